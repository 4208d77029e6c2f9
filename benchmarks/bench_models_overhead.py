"""cera's Python overhead per decoded token: the time a decode step spends outside the
compiled kernels of the CPU backend.

Method (kernel-timing proxy). The CPU backend calls its C kernels through a cffi ``lib``
object. For the measurement runs only, every reference to that object (and to any of its
functions held under another name) inside the ``cera_backend_cpu`` modules is replaced by
a proxy whose functions read ``time.perf_counter()`` around the real call and add up the
time per function. Within one proxied decode run of N tokens, with C kernel calls:

- kernel time      = time inside the wrapped calls - C x floor,
- outside kernels  = run time - time inside the wrapped calls - C x (cost - floor),
- token time       = run time - C x cost  (what the run would take without the proxy),

each divided by N, where ``floor`` is what the proxy measures inside a C function that
does nothing (call dispatch, half a timer read) and ``cost`` is the time the proxy adds
per call, both calibrated on such a function right before. Both figures come from the
same run, so the noise of a busy machine between runs does not enter their split; the
median over the runs is reported. As a cross-check, plain runs (no proxy) alternate with
the proxied ones: their time per token should come out near the estimated token time.

Everything that is not a C kernel counts as outside: the model's Python code, the
backend's numpy bookkeeping and the numpy ops it runs (add, mul), argument conversion
and call dispatch, the session's per-token work.

If the backend's internals change so that no cffi lib can be found, or the proxy sees no
calls (the kernels are reached another way), the figure is reported as unavailable with
the reason instead of guessed.
"""

from __future__ import annotations

import statistics
import sys
import time
import types

PACKAGE = "cera_backend_cpu"
# Cheap C functions without arguments or side effects, for calibrating the proxy.
CALIBRATION_FUNCTIONS = ("cera_best_variant", "cera_compiled_variants", "cera_cpu_features")


class ProxyUnavailable(Exception):
    """The timing proxy cannot be installed (or saw nothing): the figure is n/a."""


def _is_cffi_lib(obj) -> bool:
    t = type(obj)
    return t.__module__ == "_cffi_backend" and t.__name__ == "Lib"


class _TimedFunction:
    __slots__ = ("calls", "seconds")

    def __init__(self):
        self.calls = 0
        self.seconds = 0.0


def _timed(fn, record: _TimedFunction):
    clock = time.perf_counter

    def timed(*args):
        t0 = clock()
        result = fn(*args)
        record.seconds += clock() - t0
        record.calls += 1
        return result

    timed.__name__ = getattr(fn, "__name__", "kernel")
    timed.__wrapped__ = fn
    return timed


class TimedLib:
    """Stands in for a cffi lib: its callables are timed wrappers of the real ones.

    Wrappers are stored in the instance dict on first use, so later lookups cost what a
    plain attribute lookup costs, not a `__getattr__` call."""

    def __init__(self, lib, records: dict[str, _TimedFunction]):
        object.__setattr__(self, "_lib", lib)
        object.__setattr__(self, "_records", records)

    def __getattr__(self, name):
        value = getattr(self._lib, name)
        if not callable(value):
            return value
        wrapper = _timed(value, self._records.setdefault(name, _TimedFunction()))
        object.__setattr__(self, name, wrapper)
        return wrapper


class KernelTimer:
    """Installs TimedLib proxies into the CPU backend's modules, and takes them out."""

    def __init__(self, package: str = PACKAGE):
        self.package = package
        self.records: dict[str, _TimedFunction] = {}
        self._replaced: list[tuple[dict, str, object]] = []
        self.libs: list = []

    def _modules(self) -> list[types.ModuleType]:
        return [
            m
            for name, m in list(sys.modules.items())
            if (name == self.package or name.startswith(self.package + ".")) and m is not None
        ]

    def install(self) -> None:
        modules = self._modules()
        if not modules:
            raise ProxyUnavailable(f"{self.package} is not imported (is cera running on the CPU backend?)")
        libs = {}
        for module in modules:
            for value in vars(module).values():
                if _is_cffi_lib(value):
                    libs[id(value)] = value
        if not libs:
            raise ProxyUnavailable(
                f"no cffi lib object found in the modules of {self.package} ({', '.join(m.__name__ for m in modules)})"
            )
        self.libs = list(libs.values())
        proxies = {id(lib): TimedLib(lib, self.records) for lib in self.libs}
        functions = {}  # id of a lib function -> (proxy, name), for aliases such as `_matmul = lib.cera_matmul`
        for lib in self.libs:
            for name in dir(lib):
                value = getattr(lib, name, None)
                if callable(value):
                    functions[id(value)] = (proxies[id(lib)], name)
        for module in modules:
            namespace = vars(module)
            for key, value in list(namespace.items()):
                if id(value) in proxies and _is_cffi_lib(value):
                    self._swap(namespace, key, proxies[id(value)])
                elif id(value) in functions and type(value).__name__ == "builtin_function_or_method":
                    proxy, name = functions[id(value)]
                    self._swap(namespace, key, getattr(proxy, name))

    def _swap(self, namespace: dict, key: str, new) -> None:
        self._replaced.append((namespace, key, namespace[key]))
        namespace[key] = new

    def uninstall(self) -> None:
        for namespace, key, old in reversed(self._replaced):
            namespace[key] = old
        self._replaced.clear()

    def reset(self) -> None:
        for record in self.records.values():
            record.calls = 0
            record.seconds = 0.0

    @property
    def calls(self) -> int:
        return sum(r.calls for r in self.records.values())

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.records.values())

    def __enter__(self):
        self.install()
        return self

    def __exit__(self, *exc):
        self.uninstall()


def calibrate(lib, n: int = 200_000, repeat: int = 5) -> dict:
    """The proxy's own cost per call, and what it measures inside an empty C call.

    Uses a C function of ``lib`` that takes no arguments and does nothing of note; if
    there is none, a Python builtin stands in (said in the result)."""
    name = next((f for f in CALIBRATION_FUNCTIONS if callable(getattr(lib, f, None))), None)
    if name is not None:
        target, args, used = lib, (), f"{name}() of the backend's lib"
    else:
        name = "abs"
        target, args, used = types.SimpleNamespace(abs=abs), (1,), "abs(1) (no argument-free lib function found)"
    records: dict[str, _TimedFunction] = {}
    proxy = TimedLib(target, records)
    getattr(proxy, name)  # create the wrapper

    def loop(obj) -> float:
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(n):
                getattr(obj, name)(*args)
            best = min(best, time.perf_counter() - t0)
        return best

    direct = loop(target)
    records[name].calls = 0
    records[name].seconds = 0.0
    proxied = loop(proxy)
    inside = records[name].seconds / records[name].calls
    return {
        "calibrated_on": used,
        "proxy_cost_per_call_s": max(0.0, (proxied - direct) / n),
        "inside_floor_per_call_s": inside,
        "direct_call_s": direct / n,
    }


def measure_python_overhead(engine, test, prefix: list[int], ids: list[int], reps: int = 3) -> dict:
    """Python overhead per decoded token of ``engine`` (a CeraEngine) on a tg test.

    Alternates plain and proxied runs (after a plain warm-up); returns the figures, or
    ``{"available": False, "reason": ...}``."""
    timer = KernelTimer()
    try:
        timer.install()
        timer.uninstall()
    except ProxyUnavailable as e:
        return {"available": False, "reason": str(e)}
    except Exception as e:  # internals changed in a way this code does not expect
        timer.uninstall()
        return {"available": False, "reason": f"installing the proxy failed: {type(e).__name__}: {e}"}
    calibration = calibrate(timer.libs[0])
    n = len(ids)
    engine.run(test, prefix, ids)  # warm-up
    plain, proxied, inside, calls = [], [], [], []
    per_function: dict[str, list[tuple[int, float]]] = {}
    for _ in range(reps):
        plain.append(engine.run(test, prefix, ids).seconds)
        timer.reset()
        with timer:
            proxied.append(engine.run(test, prefix, ids).seconds)
        inside.append(timer.seconds)
        calls.append(timer.calls)
        for fname, record in timer.records.items():
            per_function.setdefault(fname, []).append((record.calls, record.seconds))
    if not any(calls):
        return {
            "available": False,
            "reason": "the proxy saw no kernel calls: the backend reaches its compiled code another way",
        }
    cost, floor = calibration["proxy_cost_per_call_s"], calibration["inside_floor_per_call_s"]
    kernel = [(t_in - c * floor) / n for t_in, c in zip(inside, calls, strict=True)]
    outside = [(t - t_in - c * (cost - floor)) / n for t, t_in, c in zip(proxied, inside, calls, strict=True)]
    token = [(t - c * cost) / n for t, c in zip(proxied, calls, strict=True)]
    calls_per_token = statistics.median(calls) / n
    functions = []
    for fname, samples in per_function.items():
        c = statistics.median(s[0] for s in samples) / n
        s = statistics.median(s[1] for s in samples) / n - c * floor
        if c:
            functions.append(
                {"function": fname, "calls_per_token": c, "ms_per_token": s * 1e3, "us_per_call": s / c * 1e6}
            )
    functions.sort(key=lambda f: -f["ms_per_token"])
    return {
        "available": True,
        "method": "kernel-timing proxy on the CPU backend's cffi lib (see bench_models_overhead.py)",
        "test": test.name,
        "reps": reps,
        "token_ms": statistics.median(token) * 1e3,
        "kernel_ms": statistics.median(kernel) * 1e3,
        "overhead_ms": statistics.median(outside) * 1e3,
        "overhead_fraction": statistics.median(o / t for o, t in zip(outside, token, strict=True)),
        "overhead_ms_samples": [o * 1e3 for o in outside],
        "kernel_calls_per_token": calls_per_token,
        "plain_token_ms": statistics.median(plain) / n * 1e3,
        "proxied_token_ms": statistics.median(proxied) / n * 1e3,
        "calibration": calibration,
        "functions": functions,
    }


def profile_decode(engine, test, prefix: list[int], ids: list[int], top: int = 25) -> str:
    """cProfile of one decode run: the functions with the most time of their own.

    cProfile slows Python code down several times, so read it for where the time goes,
    not for how much there is."""
    import cProfile
    import io
    import pstats

    engine.run(test, prefix, ids)  # warm-up
    profiler = cProfile.Profile()
    profiler.enable()
    engine.run(test, prefix, ids)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()
