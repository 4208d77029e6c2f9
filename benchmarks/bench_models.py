"""Model benchmark: cera and llama.cpp side by side on the same GGUF files.

    python benchmarks/bench_models.py [--model PATH_OR_BUNDLE ...] [--threads 2] [--reps 5]
                                      [--tests pp128,pp512,tg128,tg128@d512] [--json OUT]
                                      [--cli-reps 5] [--tool-rounds 3] [--ik-llama PATH [--ik-args '-rtr 1']]

For each model both engines load the same file with the same thread count, and every test
runs on both, alternating the engines (A B A B ...) after a warm-up of each, on the same
token ids:

- ppN: N tokens evaluated as one batch on a fresh context (prompt processing);
- tgN: N tokens decoded one at a time, each a batch of one with its logits (decode);
- ...@dD: the same after D context tokens already in the cache (not timed).

Printed per test: the median tok/s of each engine with its standard deviation, the ratio
of the medians cera / llama.cpp, and the interquartile range of the per-repetition ratios
(each cera run divided by the llama.cpp run next to it). Then, per model, cera's Python
overhead per decoded token (time outside the C kernels, measured with a timing proxy on
the CPU backend's kernel library: bench_models_overhead.py) and the decode bandwidth of
both engines as a fraction of the machine's read bandwidth (bench_models_memory.py).

Then, with the in-process engines closed, both engines as users run them, each a whole
process (bench_models_cli.py): `cera run` against `llama_cpp.Llama` (and ik_llama.cpp's
llama-cli with --ik-llama), decode per token = (T(n=129) - T(n=1)) / 128 and prefill =
T(long prompt) - T(short prompt), medians with their interquartile range, after one
untimed process of each, the engines taking turns; and the tools' own benchmarks as
processes in turns: `cera bench` beside ik_llama.cpp's llama-bench. Every table carries
the 1-minute load average over its runs.

llama.cpp runs on its own defaults (flash attention auto, f16 KV cache, weight repacking);
the settings both engines ran with are printed and stored in --json. On a machine shared
with other work every figure is provisional: the load average is recorded with them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from bench_models_engines import TestSpec

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODELS = (
    "smollm2-135m-instruct-q4_1",
    "gemma3-270m-q4_k_m",
    "qwen2.5-coder-0.5b-instruct-q4_k_m",
    "qwen2.5-coder-1.5b-instruct-q4_k_m",
)
DEFAULT_TESTS = "pp128,pp512,tg128,tg128@d512"
ENGINES = ("cera", "llama.cpp")
_TEST_RE = re.compile(r"^(pp|tg)(\d+)(?:@d(\d+))?$")


# -- arguments ------------------------------------------------------------------------------


def parse_tests(text: str) -> list[TestSpec]:
    """Parse a list such as "pp128,tg128@d512" into TestSpecs; ValueError names a bad item."""
    tests = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        m = _TEST_RE.match(item)
        if not m:
            raise ValueError(f"test {item!r} is not ppN, tgN, ppN@dD or tgN@dD (e.g. pp512, tg128@d512)")
        kind, n, depth = m.group(1), int(m.group(2)), int(m.group(3) or 0)
        if n < 1:
            raise ValueError(f"test {item!r}: the token count must be at least 1")
        tests.append(TestSpec(kind, n, depth))
    if not tests:
        raise ValueError("no tests given")
    names = [t.name for t in tests]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"tests listed twice: {', '.join(dupes)}")
    return tests


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="bench_models.py",
        description="cera vs llama.cpp on the same GGUF files: pp/tg tok/s, Python overhead, decode bandwidth.",
    )
    ap.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="PATH_OR_BUNDLE",
        help=f"a GGUF path or cera bundle name; repeat for several (default: {', '.join(DEFAULT_MODELS)})",
    )
    ap.add_argument("--threads", type=int, default=2, help="threads for both engines (default 2)")
    ap.add_argument(
        "--device",
        choices=("cpu", "vulkan"),
        default="cpu",
        help="cpu (default), or vulkan: cera's Vulkan backend against llama.cpp with every layer offloaded to its "
        "GPU backend (llama-cpp-python built with -DGGML_VULKAN=ON); the CPU-only figures (Python overhead, "
        "read bandwidth) are skipped",
    )
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions per engine and test (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs per engine before the timed ones (default 1)")
    ap.add_argument("--tests", default=DEFAULT_TESTS, help=f"comma-separated tests (default {DEFAULT_TESTS})")
    ap.add_argument("--seed", type=int, default=1234, help="seed of the random token ids (default 1234)")
    ap.add_argument(
        "--overhead-tokens",
        type=int,
        default=64,
        help="decoded tokens per run of the Python-overhead measurement; 0 skips it (default 64)",
    )
    ap.add_argument("--overhead-reps", type=int, default=3, help="plain/proxied run pairs for the overhead (default 3)")
    ap.add_argument(
        "--bandwidth-mib",
        type=int,
        default=1024,
        help="MiB read to measure the memory read bandwidth; 0 skips it (default 1024)",
    )
    ap.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="also print a cProfile of one cera decode run, top N functions (default off)",
    )
    ap.add_argument(
        "--omp-wait-policy",
        choices=("default", "passive", "active"),
        default="default",
        help="OMP_WAIT_POLICY for llama.cpp's OpenMP threads; 'default' leaves the environment as it is "
        "(llama.cpp's default: spin). 'passive' keeps llama.cpp usable on a machine busy with other work "
        "(see benchmarks/README.md), but is not its default: say so when quoting figures",
    )
    ap.add_argument(
        "--cli-reps",
        type=int,
        default=5,
        help="repetitions of the whole-process runs (cera run, llama_cpp.Llama, ik_llama.cpp's llama-cli) that give "
        "decode = (T(n=129) - T(n=1)) / 128 and prefill = T(long) - T(short); 0 skips them (default 5)",
    )
    ap.add_argument(
        "--cli-long-tokens", type=int, default=512, help="tokens of the long prompt of the whole-process runs (default 512)"
    )
    ap.add_argument(
        "--tool-rounds",
        type=int,
        default=3,
        help="turns of the tools' own benchmarks as processes (cera bench, and ik_llama.cpp's llama-bench when "
        "--ik-llama is given), each pp512 and tg128 over --reps repetitions; 0 skips them (default 3)",
    )
    ap.add_argument(
        "--ik-llama",
        metavar="PATH",
        help="ik_llama.cpp's llama-bench or llama-cli (or the folder holding them; build with "
        "benchmarks/peers/build_ik_llama.sh): a second peer in the whole-process and tool figures",
    )
    ap.add_argument(
        "--ik-args",
        default="",
        metavar="ARGS",
        help="extra arguments for both ik_llama.cpp binaries, e.g. '-rtr 1' (its run-time repacking, off by default "
        "there); they are printed with the figures",
    )
    ap.add_argument(
        "--json", dest="json_out", metavar="OUT", help="write every figure, sample and setting to this file"
    )
    return ap


def parse_args(argv=None) -> argparse.Namespace:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        args.tests = parse_tests(args.tests)
    except ValueError as e:
        ap.error(str(e))
    for name in ("threads", "reps"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1")
    for name in ("warmup", "overhead_tokens", "overhead_reps", "bandwidth_mib", "profile", "cli_reps", "tool_rounds"):
        if getattr(args, name) < 0:
            ap.error(f"--{name.replace('_', '-')} must not be negative")
    args.models = args.models or list(DEFAULT_MODELS)
    args.ik = None
    if args.ik_llama:
        from bench_models_cli import peer_binaries

        try:
            args.ik = peer_binaries(args.ik_llama)
        except FileNotFoundError as e:
            ap.error(str(e))
    if args.cli_long_tokens < 16:
        ap.error("--cli-long-tokens must be at least 16")
    if args.device != "cpu":  # both measure the CPU's kernels and memory
        args.overhead_tokens = 0
        args.bandwidth_mib = 0
    return args


# -- the alternation schedule -----------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    engine: str
    rep: int  # index within the warm-up or within the timed runs
    timed: bool


def alternation_schedule(engines, reps: int, warmup: int) -> list[Run]:
    """Warm-up runs, then timed runs, the engines taking turns: A B A B ..."""
    runs = [Run(e, i, False) for i in range(warmup) for e in engines]
    runs += [Run(e, i, True) for i in range(reps) for e in engines]
    return runs


# -- statistics -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    mean: float
    stdev: float
    q1: float
    q3: float
    min: float
    max: float

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    def as_dict(self) -> dict:
        return {**self.__dict__, "iqr": self.iqr}


def summarize(values) -> Summary:
    """Median, mean, sample standard deviation and quartiles (inclusive method)."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("no values to summarize")
    if len(values) == 1:
        v = values[0]
        return Summary(1, v, v, 0.0, v, v, v, v)
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return Summary(len(values), statistics.median(values), statistics.fmean(values), statistics.stdev(values),
                   q1, q3, min(values), max(values))  # fmt: skip


def tokens_per_second(n_tokens: int, seconds: list[float]) -> list[float]:
    return [n_tokens / s if s > 0 else math.inf for s in seconds]


def paired_ratios(a: list[float], b: list[float]) -> list[float]:
    """a[i] / b[i]: each run of one engine against the run of the other next to it."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} and {len(b)} samples cannot be paired")
    return [x / y if y else math.nan for x, y in zip(a, b, strict=True)]


# -- tables -----------------------------------------------------------------------------------


def _fmt(x: float, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{digits}f}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table with columns padded to line up in a terminal too."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    right = [i > 0 for i in range(len(header))]

    def line(cells):
        return (
            "| "
            + " | ".join(
                str(c).rjust(w) if r else str(c).ljust(w) for c, w, r in zip(cells, widths, right, strict=True)
            )
            + " |"
        )

    sep = (
        "|"
        + "|".join(("-" * (w + 1) + ":") if r else (":" + "-" * (w + 1)) for w, r in zip(widths, right, strict=True))
        + "|"
    )
    return "\n".join([line(header), sep, *(line(r) for r in rows)])


SPEED_HEADER = [
    "model",
    "test",
    "cera tok/s",
    "±sd",
    "llama.cpp tok/s",
    "±sd",
    "cera/llama.cpp",
    "paired IQR",
    "cpu share c/l",
    "load 1-min",
]


def speed_row(model: str, result: dict) -> list[str]:
    """One table row from a test result (see `run_test`)."""
    c, lc = result["cera"], result["llama.cpp"]
    pr = result["paired_ratio"]
    return [model, result["test"], _fmt(c["median"]), _fmt(c["stdev"]), _fmt(lc["median"]), _fmt(lc["stdev"]),
            _fmt(result["ratio"], 2), f"{_fmt(pr['q1'], 2)}–{_fmt(pr['q3'], 2)}",
            "/".join(_fmt(result.get("cpu_share_median", {}).get(e, math.nan), 2) for e in ENGINES),
            _load_range(result.get("loadavg_1min", []))]  # fmt: skip


def _load_range(loads: list[float]) -> str:
    return f"{_fmt(min(loads), 2)}–{_fmt(max(loads), 2)}" if loads else "n/a"


CLI_HEADER = ["model", "engine", "decode tok/s", "IQR", "decode user ms/tok", "prefill tok/s", "IQR",
              "prefill user tok/s", "cera/engine decode", "cera/engine prefill", "load 1-min"]  # fmt: skip


def _iqr(s: dict, digits: int = 1) -> str:
    return f"{_fmt(s['q1'], digits)}–{_fmt(s['q3'], digits)}"


def cli_rows(model: str, cli: dict) -> list[list[str]]:
    """Rows of the whole-process table: wall-clock figures with their IQR, user-CPU figures beside."""
    engines = cli["engines"]
    cera = engines.get("cera")
    loads = cli.get("loadavg_1min", [])
    rows = []
    for name, e in engines.items():
        w, u = e["wall"], e["user"]
        ratio_d = cera["wall"]["decode_tok_s"]["median"] / w["decode_tok_s"]["median"] if cera else math.nan
        ratio_p = cera["wall"]["prefill_tok_s"]["median"] / w["prefill_tok_s"]["median"] if cera else math.nan
        rows.append([model, name, _fmt(w["decode_tok_s"]["median"]), _iqr(w["decode_tok_s"]),
                     _fmt(u["decode_ms_per_token"]["median"], 2), _fmt(w["prefill_tok_s"]["median"]),
                     _iqr(w["prefill_tok_s"]), _fmt(u["prefill_tok_s"]["median"]),
                     "—" if name == "cera" else _fmt(ratio_d, 2), "—" if name == "cera" else _fmt(ratio_p, 2),
                     _load_range(loads)])  # fmt: skip
    return rows


TOOL_HEADER = ["model", "tool", "test", "median tok/s", "IQR over turns", "min–max", "load 1-min"]


def tool_rows(model: str, tools: dict) -> list[list[str]]:
    load = _load_range(tools.get("loadavg_1min", []))
    return [[model, name, test, _fmt(s["median"]), _iqr(s), f"{_fmt(s['min'])}–{_fmt(s['max'])}", load]
            for name, tests in tools["tools"].items() for test, s in tests.items()]  # fmt: skip


EXTRA_HEADER = ["model", "weights MB/token", "read BW GB/s", "cera tg GB/s", "% read BW", "llama.cpp tg GB/s", "% read BW",
                "cera Python ms/token", "% of token", "kernel calls/token"]  # fmt: skip


def extra_row(model: str, extra: dict) -> list[str]:
    bw = extra.get("bandwidth") or {}
    ov = extra.get("overhead") or {}
    cells = [model, _fmt(bw.get("weight_bytes", math.nan) / 1e6), _fmt(bw.get("read_bw_gb_s", math.nan), 2)]
    for engine in ENGINES:
        e = bw.get(engine) or {}
        cells += [_fmt(e.get("gb_s", math.nan), 2), _fmt(e.get("fraction", math.nan) * 100, 0)]
    if ov.get("available"):
        cells += [
            _fmt(ov["overhead_ms"], 2),
            _fmt(ov["overhead_fraction"] * 100, 1),
            _fmt(ov["kernel_calls_per_token"], 0),
        ]
    else:
        cells += ["n/a", "n/a", "n/a"]
    return cells


# -- facts about the run ----------------------------------------------------------------------


def _git(*args) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:
        return f"n/a ({type(e).__name__})"


def machine_facts() -> dict:
    lscpu = {}
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, timeout=20).stdout.splitlines():
            key, _, value = line.partition(":")
            lscpu[key.strip()] = value.strip()
    except Exception:
        pass
    dirty = [ln for ln in _git("status", "--porcelain", "--", ".").splitlines() if ln[3:].startswith("cera")]
    return {
        "cpu": lscpu.get("Model name") or platform.processor() or platform.machine(),
        "cores": lscpu.get("Core(s) per socket", "?") + " per socket x " + lscpu.get("Socket(s)", "?"),
        "logical_cpus": os.cpu_count(),
        "python": platform.python_version(),
        "commit": _git("rev-parse", "--short", "HEAD"),
        "engine_files_changed_since_commit": dirty,
        "loadavg_start": os.getloadavg(),
    }


# -- running ----------------------------------------------------------------------------------


def test_ids(seed: int, model_key: str, test: TestSpec, n_vocab: int) -> tuple[list[int], list[int]]:
    """(context ids, timed ids) of a test: random, the same for both engines."""
    import numpy as np

    key = zlib.crc32(model_key.encode())  # the model's own ids, whatever its place in the list
    rng = np.random.default_rng([seed, key, ["pp", "tg"].index(test.kind), test.n, test.depth])
    ids = rng.integers(0, n_vocab, size=test.depth + test.n).tolist()
    return ids[: test.depth], ids[test.depth :]


def logits_agreement(engines: dict, ids: list[int]) -> dict:
    """Both engines evaluate the same ids; do their last logits agree? (That they computed
    the same thing is what makes their times comparable; a mismatch is reported, not fatal.)"""
    import numpy as np

    a, b = (np.asarray(engines[name].logits_after(ids), np.float64) for name in ENGINES)
    if a.shape != b.shape:
        return {"ok": False, "summary": f"logits of different sizes {a.shape} and {b.shape}"}
    top_a, top_b = int(a.argmax()), int(b.argmax())
    diff = float(np.abs(a - b).max())
    corr = float(np.corrcoef(a, b)[0, 1])
    # llama.cpp's own logits move by up to ~0.5 with its batch split and weight repacking
    # (tests/models/reference/README.md), so a top-1 that differs where llama.cpp's top two
    # are closer than that is not a sign of different work.
    gap = float(b[top_b] - b[top_a])
    ok = (top_a == top_b or gap < 0.5) and corr > 0.99
    close = "" if top_a == top_b else f" (llama.cpp's logits for the two: {gap:.3f} apart)"
    summary = (
        f"{'ok' if ok else 'MISMATCH'}: top-1 {top_a} / {top_b}{close}, max |diff| {diff:.3f}, "
        f"correlation {corr:.5f} (last logits after {len(ids)} ids)"
    )
    return {"ok": ok, "top1": [top_a, top_b], "max_abs_diff": diff, "correlation": corr, "summary": summary}


def run_test(engines: dict, test: TestSpec, prefix, ids, reps: int, warmup: int, threads: int, log) -> dict:
    seconds = {name: [] for name in engines}
    cpu_share = {name: [] for name in engines}
    loadavg = [os.getloadavg()[0]]
    for run in alternation_schedule(list(engines), reps, warmup):
        timing = engines[run.engine].run(test, prefix, ids)
        share = timing.cpu_share(threads)
        if run.timed:
            seconds[run.engine].append(timing.seconds)
            cpu_share[run.engine].append(share)
        label = f"rep {run.rep + 1}" if run.timed else "warm-up"
        log(
            f"  {test.name:12s} {run.engine:9s} {label:8s} {test.n / timing.seconds:9.2f} tok/s  (cpu share {share:.2f})"
        )
    loadavg.append(os.getloadavg()[0])
    tps = {name: tokens_per_second(test.n, s) for name, s in seconds.items()}
    summaries = {name: summarize(v) for name, v in tps.items()}
    return {
        "test": test.name,
        **{name: summaries[name].as_dict() for name in engines},
        "ratio": summaries["cera"].median / summaries["llama.cpp"].median,
        "paired_ratio": summarize(paired_ratios(tps["cera"], tps["llama.cpp"])).as_dict(),
        "samples_tok_s": tps,
        "cpu_share_median": {name: statistics.median(v) for name, v in cpu_share.items()},
        "loadavg_1min": loadavg,
    }


def _decode_test(tests: list[TestSpec]) -> TestSpec | None:
    tg = [t for t in tests if t.kind == "tg"]
    return min(tg, key=lambda t: (t.depth, -t.n)) if tg else None


def bench_model(source: str, args, read_bw: dict | None, log) -> dict:
    from bench_models_engines import CeraEngine, LlamaCppEngine
    from bench_models_memory import decode_weight_bytes

    from cera.sources import resolve

    path = resolve(source, quiet=True).path
    log(f"\n== {source}: {path}")
    cera_engine = CeraEngine(str(path), args.threads, device=args.device)
    llama_engine = LlamaCppEngine(str(path), args.threads, gpu=args.device != "cpu")
    engines = {"cera": cera_engine, "llama.cpp": llama_engine}
    try:
        if cera_engine.n_vocab != llama_engine.n_vocab:
            log(
                f"  note: vocabulary sizes differ (cera {cera_engine.n_vocab}, llama.cpp {llama_engine.n_vocab}); ids below both"
            )
        n_vocab = min(cera_engine.n_vocab, llama_engine.n_vocab)
        agreement = logits_agreement(engines, test_ids(args.seed, path.name, TestSpec("pp", 16), n_vocab)[1])
        log(f"  same work check: {agreement['summary']}")
        results = []
        for test in args.tests:
            prefix, ids = test_ids(args.seed, path.name, test, n_vocab)
            results.append(run_test(engines, test, prefix, ids, args.reps, args.warmup, args.threads, log))
            log("  " + " | ".join(speed_row(source, results[-1])[1:]))
        extra: dict = {}
        decode = _decode_test(args.tests)
        if read_bw and decode is not None:
            # Measured again now, next to this model's decode runs: on a shared machine the
            # bandwidth moves with the load. The fraction uses the best figure seen so far.
            from bench_models_memory import measure_read_bandwidth

            here = measure_read_bandwidth(args.threads, args.bandwidth_mib)
            best = max(read_bw["best_gb_s"], here["best_gb_s"])
            read_bw["best_gb_s"] = best
            log(f"  read bandwidth now: {here['figures_gb_s']}; best so far {best:.2f} GB/s")
            weights = decode_weight_bytes(path)
            tg = next(r for r in results if r["test"] == decode.name)
            extra["bandwidth"] = {"weight_bytes": weights["bytes"], "output_matrix": weights["output"], "test": decode.name,
                                  "read_bw_gb_s": best, "read_bw_here": here}  # fmt: skip
            for name in ENGINES:
                gb_s = weights["bytes"] * tg[name]["median"] / 1e9
                extra["bandwidth"][name] = {"gb_s": gb_s, "fraction": gb_s / best}
        if args.overhead_tokens:
            from bench_models_overhead import measure_python_overhead

            test = TestSpec("tg", args.overhead_tokens, 0)
            prefix, ids = test_ids(args.seed, path.name, test, n_vocab)
            log(f"  Python overhead: {args.overhead_reps} x (plain, proxied) runs of {test.name}")
            try:
                extra["overhead"] = measure_python_overhead(cera_engine, test, prefix, ids, args.overhead_reps)
            except Exception as e:  # never lose the speed table to this figure
                extra["overhead"] = {"available": False, "reason": f"{type(e).__name__}: {e}"}
        if args.profile:
            from bench_models_overhead import profile_decode

            test = TestSpec("tg", max(args.overhead_tokens, 16), 0)
            prefix, ids = test_ids(args.seed, path.name, test, n_vocab)
            extra["profile"] = profile_decode(cera_engine, test, prefix, ids, args.profile)
        if args.cli_reps:
            from bench_models_cli import prompts

            count = lambda text: len(cera_engine.loaded.tokenizer.encode(text))  # noqa: E731
            prompt_set = prompts(count, long_tokens=args.cli_long_tokens)
        record = {
            "model": source,
            "path": str(path),
            "settings": {name: e.settings() for name, e in engines.items()},
            "llama_cpp_params": llama_engine.params(),
            "load_seconds": {name: e.load_seconds for name, e in engines.items()},
            "logits_check": agreement,
            "results": results,
            **extra,
        }
    finally:
        for e in engines.values():
            e.close()
    # the processes below run with the in-process engines closed
    if args.cli_reps:
        from bench_models_cli import cera_cli, ik_llama_cli, llama_cpp_cli, measure_cli

        cli = [cera_cli(), llama_cpp_cli()]
        if args.ik and args.ik["llama-cli"]:
            cli.append(ik_llama_cli(args.ik["llama-cli"], args.ik_args.split()))
        log(f"  whole processes: {', '.join(e.name for e in cli)}, {args.cli_reps} reps (after one untimed process each)")
        try:
            record["cli"] = measure_cli(str(Path(path).resolve()), cli, args.threads, args.cli_reps, prompt_set, log)
        except Exception as e:  # e.g. a peer that does not know the file's architecture
            record["cli_error"] = f"{type(e).__name__}: {e}"[:2000]
            log(f"  whole processes FAILED: {record['cli_error']}")
            if len(cli) > 2:  # the two engines on their own, without the second peer
                log("  again without ik_llama.cpp")
                record["cli"] = measure_cli(str(Path(path).resolve()), cli[:2], args.threads, args.cli_reps, prompt_set, log)
    if args.tool_rounds:
        from bench_models_cli import tool_benches

        ik_bench = args.ik["llama-bench"] if args.ik else None
        log(f"  tool benchmarks: {args.tool_rounds} turns of {args.reps} reps each")
        try:
            record["tools"] = tool_benches(str(Path(path).resolve()), ik_bench, args.threads, args.tool_rounds, args.reps, log,
                                           ik_extra=args.ik_args.split())  # fmt: skip
        except Exception as e:
            record["tools_error"] = f"{type(e).__name__}: {e}"[:2000]
            log(f"  tool benchmarks FAILED: {record['tools_error']}")
            if ik_bench:
                log("  again without ik_llama.cpp")
                record["tools"] = tool_benches(str(Path(path).resolve()), None, args.threads, args.tool_rounds, args.reps, log)
    return record


def _error_line(text: str) -> str:
    """The line of a failed process's output that says why (its last line naming an error)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return next((ln for ln in reversed(lines) if "error" in ln.lower()), lines[0] if lines else text)


def model_details(m: dict) -> list[str]:
    """The lines of a model's report below the tables: checks, overhead, profile."""
    lines = [f"{m['model']}: same work check: {m['logits_check']['summary']}"]
    for key in ("cli_error", "tools_error"):
        if m.get(key):
            lines.append(f"{m['model']}: {key.replace('_', ' ')} (figures without the peer that failed): {_error_line(m[key])}")
    ov = m.get("overhead")
    if ov and not ov.get("available"):
        lines.append(f"{m['model']}: Python overhead n/a: {ov['reason']}")
    elif ov:
        cal = ov["calibration"]
        lines.append(
            f"{m['model']}: {ov['test']} token {ov['token_ms']:.2f} ms = C kernels {ov['kernel_ms']:.2f} ms "
            f"+ outside them {ov['overhead_ms']:.2f} ms ({ov['overhead_fraction'] * 100:.1f}%; runs: "
            + ", ".join(f"{x:.2f}" for x in ov["overhead_ms_samples"])
            + f" ms); {ov['kernel_calls_per_token']:.0f} kernel calls/token; proxy cost "
            f"{cal['proxy_cost_per_call_s'] * 1e9:.0f} ns/call, floor {cal['inside_floor_per_call_s'] * 1e9:.0f} ns/call; "
            f"check: plain runs {ov['plain_token_ms']:.2f} ms/token"
        )
        lines.append(
            "  kernels per token: "
            + ", ".join(
                f"{f['function']} {f['ms_per_token']:.2f} ms ({f['calls_per_token']:.0f} calls)"
                for f in ov["functions"][:6]
            )
        )
    if m.get("profile"):
        lines.append(f"{m['model']}: cProfile of one decode run (cProfile inflates Python time):\n{m['profile']}")
    return lines


def print_report(facts: dict, read_bw: dict | None, models: list[dict], args, out=sys.stdout) -> None:
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p()
    p(f"cera vs llama.cpp, {args.threads} thread(s), {args.reps} reps (after {args.warmup} warm-up), "
      f"commit {facts['commit']}" + (" + uncommitted engine changes" if facts["engine_files_changed_since_commit"] else ""))  # fmt: skip
    p(
        f"llama.cpp OMP_WAIT_POLICY: {os.environ.get('OMP_WAIT_POLICY', 'unset (libgomp default, spinning: llama.cpp as shipped)')}"
    )
    p(f"machine: {facts['cpu']}, {facts['cores']} cores ({facts['logical_cpus']} logical), "
      f"load average {facts['loadavg_start'][0]:.2f} at start, {facts['loadavg_end'][0]:.2f} at end")  # fmt: skip
    if read_bw:
        p(
            f"memory read bandwidth: {read_bw['best_gb_s']:.2f} GB/s (best: {read_bw['best_of']}; "
            + ", ".join(f"{k} {v:.2f}" for k, v in read_bw["figures_gb_s"].items())
            + ")"
        )
        for note in read_bw["notes"]:
            p(f"  {note}")
    p()
    rows = [speed_row(m["model"], r) for m in models for r in m["results"]]
    p(markdown_table(SPEED_HEADER, rows))
    p()
    p(markdown_table(EXTRA_HEADER, [extra_row(m["model"], m) for m in models]))
    cli = [row for m in models if m.get("cli") for row in cli_rows(m["model"], m["cli"])]
    if cli:
        first = next(m["cli"] for m in models if m.get("cli"))
        p()
        p(f"Whole processes as users run them ({args.cli_reps} reps after one untimed process each, engines in turns; "
          f"decode = (T(n={first['n_decode'] + 1}) - T(n=1)) / {first['n_decode']}, prefill = (long - short tokens) / "
          f"(T(long) - T(short)), prompts of {first['short_tokens']} and {first['long_tokens']} tokens; wall clock, "
          "user CPU beside):")  # fmt: skip
        names = {n: e["notes"] for m in models for n, e in (m.get("cli") or {}).get("engines", {}).items()}
        for n, notes in names.items():
            p(f"  {n}: {notes}")
        p(markdown_table(CLI_HEADER, cli))
    tools = [row for m in models if m.get("tools") for row in tool_rows(m["model"], m["tools"])]
    if tools:
        p()
        p(f"The tools' own benchmarks as processes ({args.tool_rounds} turns, each of {args.reps} reps):")
        for name, cmd in next(m["tools"] for m in models if m.get("tools"))["commands"].items():
            p(f"  {name}: {cmd}")
        p(markdown_table(TOOL_HEADER, tools))
    for m in models:
        p()
        for line in model_details(m):
            p(line)
    p()
    first = models[0]["settings"] if models else {}
    for name, settings in first.items():
        p(f"{name} settings ({models[0]['model']}): " + "; ".join(f"{k}={v}" for k, v in settings.items()))
    for m in models[1:]:  # only what differs from the first model
        for name, settings in m["settings"].items():
            changed = {k: v for k, v in settings.items() if first.get(name, {}).get(k) != v}
            if changed:
                p(f"{name} settings ({m['model']}): " + "; ".join(f"{k}={v}" for k, v in changed.items()))


def main(argv=None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if args.omp_wait_policy != "default":
        if "llama_cpp" in sys.modules:
            print("warning: llama_cpp is already imported; --omp-wait-policy may not take effect", file=sys.stderr)
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy.upper()  # read by libgomp when llama.cpp loads it
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    facts = machine_facts()
    log(f"machine: {facts['cpu']}, load average {facts['loadavg_start']}, commit {facts['commit']}")
    read_bw = None
    if args.bandwidth_mib:
        from bench_models_memory import measure_read_bandwidth

        log(f"measuring memory read bandwidth over {args.bandwidth_mib} MiB ...")
        read_bw = measure_read_bandwidth(args.threads, args.bandwidth_mib)
        log(f"  {read_bw['figures_gb_s']}")
    models, failures = [], []
    facts["command"] = "python benchmarks/bench_models.py " + " ".join(sys.argv[1:] if argv is None else argv)
    t0 = time.perf_counter()
    for source in args.models:
        try:
            m = bench_model(source, args, read_bw, log)
        except Exception as e:
            failures.append({"model": source, "error": f"{type(e).__name__}: {e}"})
            log(f"  {source} FAILED: {type(e).__name__}: {e}")
        else:
            models.append(m)
            log(markdown_table(EXTRA_HEADER, [extra_row(source, m)]))
            for line in model_details(m):
                log(line)
        facts["loadavg_end"] = os.getloadavg()
        facts["wall_seconds"] = time.perf_counter() - t0
        if args.json_out:  # after every model, so that a long run cut short keeps what it measured
            write_json(args, facts, read_bw, models, failures)
    print_report(facts, read_bw, models, args)
    for f in failures:
        print(f"\n{f['model']}: FAILED: {f['error']}")
    return 1 if failures else 0


def write_json(args, facts: dict, read_bw: dict | None, models: list[dict], failures: list[dict]) -> None:
    record = {
        "facts": facts,
        "read_bandwidth": read_bw,
        "tests": [t.name for t in args.tests],
        "threads": args.threads,
        "reps": args.reps,
        "warmup": args.warmup,
        "seed": args.seed,
        "complete": len(models) + len(failures) == len(args.models),
        "models": models,
        "failures": failures,
    }
    tmp = Path(args.json_out + ".tmp")
    tmp.write_text(json.dumps(record, indent=2, default=str))
    tmp.replace(args.json_out)


if __name__ == "__main__":
    sys.exit(main())
