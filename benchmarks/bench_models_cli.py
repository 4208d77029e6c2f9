"""The engines as users run them, each a whole process: bench_models.py's end-to-end figures.

Engines (each process loads the file, evaluates the prompt, generates, exits):

- cera: ``cera run -m FILE --raw -p PROMPT -n N --temp 0 --ignore-eos -t T -c CTX --device cpu``;
- llama.cpp: a Python process running ``llama_cpp.Llama(FILE, n_threads=T, n_ctx=CTX)`` and
  ``create_completion(PROMPT, max_tokens=N, temperature=0)`` with the end-of-generation
  tokens banned (llama-cpp-python's own defaults otherwise: flash attention off);
- ik_llama.cpp (when its llama-cli is given): ``llama-cli -m FILE -p PROMPT -n N --temp 0
  --ignore-eos -t T -c CTX --no-display-prompt`` plus any extra arguments (e.g. ``-rtr 1``).

Three cases per engine, on the same text for all: the short prompt with 1 and with 129
tokens generated, and the long prompt with 1. From the whole-process times T, per
repetition: decode ms/token = (T(short, 129) - T(short, 1)) / 128 and prefill tok/s =
(long tokens - short tokens) / (T(long, 1) - T(short, 1)), so loading, start-up and
tokenizing cancel. The same differences of the processes' user CPU seconds are reported
beside them (on a shared machine they move less than wall time). Each engine runs one
untimed process first (the page cache, the kernel's first touches); then every repetition
runs every case with the engines taking turns (A B C A B C ...).

The same module runs the tools' own benchmarks as processes, alternating: ``cera bench``
(``-p N -n 128 --json``) and ik_llama.cpp's ``llama-bench`` (``-p N -n 128 -o json``).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

LLAMA_CPP_SCRIPT = r"""
import sys
import llama_cpp
path, prompt_file, n, threads, ctx = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
prompt = open(prompt_file, encoding="utf-8").read()
llm = llama_cpp.Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=ctx, verbose=False)
eog = [t for t in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(llm._model.vocab, t)]
out = llm.create_completion(prompt, max_tokens=n, temperature=0.0, logit_bias={t: -1e30 for t in eog})
sys.stdout.write(out["choices"][0]["text"])
sys.stderr.write("generated %d\n" % out["usage"]["completion_tokens"])
"""

FILLER = (
    "The quick brown fox jumps over the lazy dog while the river runs past the old mill, "
    "and the miller counts the sacks of grain that the carts bring in from the fields. "
)


@dataclass(frozen=True)
class Case:
    name: str
    prompt: str
    n_predict: int


@dataclass
class ProcessTiming:
    wall: float
    user: float
    system: float


@dataclass
class EngineCli:
    """How one engine is started from the command line: ``argv(model, prompt_file, prompt, n, threads, ctx)``."""

    name: str
    argv: object
    notes: str = ""
    samples: dict = field(default_factory=dict)  # case name -> [ProcessTiming]


def cera_cli(extra: list[str] | None = None) -> EngineCli:
    exe = Path(sys.executable).with_name("cera")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "cera_cli.main"]

    def argv(model, prompt_file, prompt, n, threads, ctx):
        return [*cmd, "run", "-m", model, "--raw", "-f", prompt_file, "-n", str(n), "--temp", "0", "--ignore-eos",
                "-t", str(threads), "-c", str(ctx), "--device", "cpu", "-q", *(extra or [])]  # fmt: skip

    return EngineCli("cera", argv, "cera run --raw --temp 0 --ignore-eos")


def llama_cpp_cli() -> EngineCli:
    def argv(model, prompt_file, prompt, n, threads, ctx):
        return [sys.executable, "-c", LLAMA_CPP_SCRIPT, model, prompt_file, str(n), str(threads), str(ctx)]

    return EngineCli("llama.cpp", argv, "llama_cpp.Llama create_completion, temperature 0, EOG banned")


def ik_llama_cli(binary: str, extra: list[str] | None = None) -> EngineCli:
    def argv(model, prompt_file, prompt, n, threads, ctx):
        return [binary, "-m", model, "-f", prompt_file, "-n", str(n), "--temp", "0", "--ignore-eos", "-t", str(threads),
                "-c", str(ctx), "--no-display-prompt", *(extra or [])]  # fmt: skip

    return EngineCli("ik_llama.cpp", argv, "llama-cli --temp 0 --ignore-eos " + " ".join(extra or []))


def peer_binaries(path: str) -> dict:
    """{'llama-bench': path or None, 'llama-cli': path or None} from a path to either binary
    or to the folder holding them (its sibling is looked for beside it)."""
    p = Path(path)
    folder = p if p.is_dir() else p.parent
    found = {}
    for name in ("llama-bench", "llama-cli"):
        candidate = p if p.name == name and p.is_file() else folder / name
        found[name] = str(candidate) if candidate.is_file() and os.access(candidate, os.X_OK) else None
    if not any(found.values()):
        raise FileNotFoundError(f"{path}: neither llama-bench nor llama-cli is there (build it with benchmarks/peers/build_ik_llama.sh)")
    return found


def run_process(argv: list[str], timeout: float = 900, cwd: str | None = None) -> ProcessTiming:
    """Run to the end (in ``cwd``: llama-cli writes a main.log there); wall time and the
    child's own user/system CPU seconds (wait4)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd)
    deadline = t0 + timeout
    stderr_chunks = []
    # stderr is small for every engine here; read it while waiting so the pipe cannot fill
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            raise TimeoutError(f"{argv[0]} ran past {timeout:.0f} s")
        time.sleep(0.002)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr_chunks.append(proc.stderr.read().decode("utf-8", errors="replace"))
    proc.stderr.close()
    if proc.returncode != 0:
        tail = "".join(stderr_chunks)[-2000:]
        raise RuntimeError(f"{' '.join(argv[:3])} ... exited with {proc.returncode}:\n{tail}")
    return ProcessTiming(wall, usage.ru_utime, usage.ru_stime)


def prompts(count_tokens, short_words: int = 8, long_tokens: int = 512) -> tuple[str, str, int, int]:
    """(short text, long text, their token counts) of the shared filler text."""
    words = FILLER.split()
    short = " ".join(words[:short_words])
    text, k = short, short_words
    while count_tokens(text) < long_tokens:
        k += 16
        text = " ".join(words[i % len(words)] for i in range(k))
    return short, text, count_tokens(short), count_tokens(text)


def _spread(values: list[float]) -> dict:
    values = [v for v in values if v == v]
    if not values:
        return {"n": 0, "median": float("nan"), "q1": float("nan"), "q3": float("nan"), "min": float("nan"), "max": float("nan")}
    if len(values) == 1:
        v = values[0]
        return {"n": 1, "median": v, "q1": v, "q3": v, "min": v, "max": v}
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return {"n": len(values), "median": statistics.median(values), "q1": q1, "q3": q3, "min": min(values), "max": max(values)}


def measure_cli(model: str, engines: list[EngineCli], threads: int, reps: int, prompt_set, log,
                n_decode: int = 128) -> dict:  # fmt: skip
    """Every engine's end-to-end decode and prefill figures (see the module docstring);
    ``prompt_set``: (short text, long text, their token counts), from `prompts`."""
    short, long_, n_short, n_long = prompt_set
    ctx = n_long + n_decode + 16
    cases = [Case("short_1", short, 1), Case("short_n", short, n_decode + 1), Case("long_1", long_, 1)]
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="cera-bench-cli-") as tmp:
        files = {}
        for case in cases:
            files[case.name] = os.path.join(tmp, case.name + ".txt")
            Path(files[case.name]).write_text(case.prompt, encoding="utf-8")

        def one(engine, case):
            return run_process(engine.argv(model, files[case.name], case.prompt, case.n_predict, threads, ctx), cwd=tmp)

        for engine in engines:  # the untimed first process of each
            t = one(engine, cases[0])
            log(f"  cli {engine.name:13s} warm-up  {t.wall:7.3f} s wall")
        for engine in engines:
            engine.samples = {c.name: [] for c in cases}
        for rep in range(reps):
            for case in cases:
                for engine in engines:
                    t = one(engine, case)
                    engine.samples[case.name].append(t)
                    log(f"  cli {engine.name:13s} rep {rep + 1} {case.name:8s} {t.wall:7.3f} s wall, {t.user:7.3f} s user")
            loads.append(os.getloadavg()[0])
    out = {"short_tokens": n_short, "long_tokens": n_long, "n_decode": n_decode, "n_ctx": ctx, "loadavg_1min": loads,
           "engines": {}}  # fmt: skip
    for engine in engines:
        out["engines"][engine.name] = {"notes": engine.notes, **derive(engine.samples, n_decode, n_short, n_long)}
    return out


def derive(samples: dict, n_decode: int, n_short: int, n_long: int) -> dict:
    """Per clock (wall, user): decode and prefill figures of each repetition, summarised.
    ``samples``: case name -> [ProcessTiming] per repetition."""
    fig = {}
    for clock in ("wall", "user"):
        t1 = [getattr(x, clock) for x in samples["short_1"]]
        tn = [getattr(x, clock) for x in samples["short_n"]]
        tl = [getattr(x, clock) for x in samples["long_1"]]
        decode_ms = [(b - a) / n_decode * 1e3 for a, b in zip(t1, tn, strict=True)]
        prefill = [(n_long - n_short) / (c - a) if c > a else float("nan") for a, c in zip(t1, tl, strict=True)]
        fig[clock] = {"decode_ms_per_token": _spread(decode_ms),
                      "decode_tok_s": _spread([1e3 / d if d > 0 else float("nan") for d in decode_ms]),
                      "prefill_tok_s": _spread(prefill), "process_s_short_1": _spread(t1)}  # fmt: skip
    return fig


# -- the tools' own benchmarks as processes ------------------------------------------------------


def cera_bench_argv(model: str, threads: int, n_prompt: int, n_gen: int, reps: int) -> list[str]:
    exe = Path(sys.executable).with_name("cera")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "cera_cli.main"]
    return [*cmd, "bench", "-m", model, "-p", str(n_prompt), "-n", str(n_gen), "-r", str(reps), "-t", str(threads),
            "--device", "cpu", "--json", "-q"]  # fmt: skip


def ik_bench_argv(binary: str, model: str, threads: int, n_prompt: int, n_gen: int, reps: int, extra=None) -> list[str]:
    return [binary, "-m", model, "-p", str(n_prompt), "-n", str(n_gen), "-r", str(reps), "-t", str(threads), "-o", "json",
            *(extra or [])]  # fmt: skip


def _json_from(stdout: str):
    start = min(i for i in (stdout.find("["), stdout.find("{")) if i >= 0)
    return json.loads(stdout[start:])


def parse_cera_bench(stdout: str) -> dict:
    """{'ppN': tok/s, 'tgN': tok/s} from `cera bench --json`."""
    data = _json_from(stdout)
    rows = data.get("results", data) if isinstance(data, dict) else data
    out = {}
    for r in rows:
        out[r["test"]] = float(r["tok_s"] if "tok_s" in r else r["median_tok_s"])
    return out


def parse_llama_bench(stdout: str) -> dict:
    """{'ppN': tok/s, 'tgN': tok/s} from llama-bench -o json."""
    out = {}
    for r in _json_from(stdout):
        name = f"pp{r['n_prompt']}" if r.get("n_gen", 0) == 0 else f"tg{r['n_gen']}"
        out[name] = float(r["avg_ts"])
    return out


def tool_benches(model: str, ik_bench: str | None, threads: int, rounds: int, reps: int, log, n_prompt: int = 512,
                 n_gen: int = 128, ik_extra=None) -> dict:  # fmt: skip
    """`cera bench` and ik_llama.cpp's llama-bench, each a process of ``reps`` repetitions (each tool
    warms itself up first), the two taking turns ``rounds`` times; the medians over rounds."""
    tools = {"cera bench": (cera_bench_argv(model, threads, n_prompt, n_gen, reps), parse_cera_bench)}
    if ik_bench:
        tools["ik llama-bench"] = (ik_bench_argv(ik_bench, model, threads, n_prompt, n_gen, reps, ik_extra), parse_llama_bench)
    samples = {name: [] for name in tools}
    loads = [os.getloadavg()[0]]
    for r in range(rounds):
        for name, (argv, parse) in tools.items():
            with tempfile.TemporaryDirectory(prefix="cera-bench-tool-") as tmp:
                res = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=1800, cwd=tmp)
            if res.returncode != 0:
                raise RuntimeError(f"{name} exited with {res.returncode}:\n{res.stderr[-2000:]}")
            figures = parse(res.stdout)
            samples[name].append(figures)
            log(f"  {name:15s} round {r + 1}: " + ", ".join(f"{k} {v:.1f} tok/s" for k, v in figures.items()))
        loads.append(os.getloadavg()[0])
    out = {"commands": {name: " ".join(argv) for name, (argv, _) in tools.items()}, "loadavg_1min": loads, "tools": {}}
    for name, runs in samples.items():
        tests = runs[0].keys() if runs else []
        out["tools"][name] = {t: _spread([run.get(t, float("nan")) for run in runs]) for t in tests}
    return out


def which_cera() -> str | None:
    exe = Path(sys.executable).with_name("cera")
    return str(exe) if exe.exists() else shutil.which("cera")
