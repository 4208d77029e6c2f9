"""Apple-silicon benchmark: cera on Metal (MLX) against mlx-lm and llama.cpp's Metal build.

    python benchmarks/bench_metal.py [--model BUNDLE_OR_GGUF ...] [--mlx-model GGUF=MLX_REPO ...]
                                     [--tests pp128,pp512,tg128,tg128@d512] [--reps 5] [--json OUT]

One command on a Mac with `pip install -r requirements-dev.txt mlx-lm` and llama-cpp-python
built with Metal (its macOS default): for each model the three engines run the tests of
bench_models.py on the same random token ids, taking turns (A B C A B C ...) after a
warm-up of each:

- ppN: N tokens evaluated as one batch on a fresh context (last position's logits);
- tgN: N tokens decoded one at a time, each a batch of one with its logits;
- ...@dD: the same after D context tokens already in the cache (not timed).

Engines:

- cera: `cera.load(..., device="metal")` (bench_models_engines.CeraEngine);
- llama.cpp: its C API through llama-cpp-python, every layer on its Metal backend
  (`n_gpu_layers` 999), on its defaults otherwise (bench_models_engines.LlamaCppEngine);
- mlx-lm: `mlx_lm.load` of the MLX conversion of the same base model (``--mlx-model``;
  MLX's own 4-bit groups of 64, not the GGUF file's mix of types: the table prints both),
  the model called on a KV cache from `mlx_lm.models.cache.make_prompt_cache`, one
  `mx.eval` per step, as its generate loop does (without its overlap of the next step's
  graph building, which all three engines could do).

Printed per test: the median tok/s of each engine, its standard deviation, and cera's
median divided by each peer's. Elsewhere than a Mac it refuses, unless
CERA_METAL_DEVICE=cpu asks for MLX's CPU device (to check that the script runs; no figure
taken there means anything about Apple GPUs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_models import (  # noqa: E402 - the shared pieces of the model benchmark
    DEFAULT_MODELS,
    DEFAULT_TESTS,
    _fmt,
    alternation_schedule,
    machine_facts,
    markdown_table,
    parse_tests,
    summarize,
    test_ids,
    tokens_per_second,
)
from bench_models_engines import TestSpec, Timing, _clocks, _since  # noqa: E402

# The mlx-community conversions of the default models' base models (override with --mlx-model).
DEFAULT_MLX = {
    "smollm2-135m-instruct-q4_1": "mlx-community/SmolLM2-135M-Instruct-4bit",
    "gemma3-270m-q4_k_m": "mlx-community/gemma-3-270m-4bit",
    "qwen2.5-coder-0.5b-instruct-q4_k_m": "mlx-community/Qwen2.5-Coder-0.5B-Instruct-4bit",
    "qwen2.5-coder-1.5b-instruct-q4_k_m": "mlx-community/Qwen2.5-Coder-1.5B-Instruct-4bit",
}
ENGINES = ("cera", "mlx-lm", "llama.cpp")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="bench_metal.py",
        description="cera on Metal (MLX) vs mlx-lm and llama.cpp's Metal build: pp/tg tok/s on the same models.",
    )
    ap.add_argument("--model", action="append", dest="models", metavar="BUNDLE_OR_GGUF",
                    help=f"a bundle name or GGUF path (repeatable; default: {', '.join(DEFAULT_MODELS)})")  # fmt: skip
    ap.add_argument("--mlx-model", action="append", default=[], metavar="GGUF=MLX_REPO",
                    help="the mlx-lm model (Hugging Face repo or local folder) to run beside a --model "
                         "(default: the mlx-community 4-bit conversion of each default model)")  # fmt: skip
    ap.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated subset of {', '.join(ENGINES)}")
    ap.add_argument("--tests", default=DEFAULT_TESTS, help=f"comma-separated tests (default {DEFAULT_TESTS})")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions per engine and test (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs per engine before the timed ones (default 1)")
    ap.add_argument("--seed", type=int, default=1234, help="seed of the random token ids (default 1234)")
    ap.add_argument("--json", metavar="OUT", help="also write every sample and setting to this JSON file")
    return ap


def parse_args(argv=None) -> argparse.Namespace:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        args.tests = parse_tests(args.tests)
    except ValueError as e:
        ap.error(str(e))
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in args.engines if e not in ENGINES]
    if unknown or not args.engines:
        ap.error(f"--engines: {', '.join(unknown) or 'none given'}; choose from {', '.join(ENGINES)}")
    if args.reps < 1 or args.warmup < 0:
        ap.error("--reps must be at least 1 and --warmup not negative")
    args.models = args.models or list(DEFAULT_MODELS)
    pairs = dict(DEFAULT_MLX)
    for item in args.mlx_model:
        key, sep, repo = item.partition("=")
        if not (sep and key and repo):
            ap.error(f"--mlx-model {item!r} is not GGUF=MLX_REPO")
        pairs[key] = repo
    args.mlx_pairs = pairs
    return args


def refusal() -> str | None:
    """Why this machine cannot give the figures this script is for, or None."""
    if os.environ.get("CERA_METAL_DEVICE", "").lower() == "cpu":
        return None
    if sys.platform != "darwin" or platform.machine() != "arm64":
        return (
            f"bench_metal.py measures Apple GPUs: this is {sys.platform} {platform.machine()}, not a Mac with Apple "
            f"silicon. CERA_METAL_DEVICE=cpu runs it on MLX's CPU device to check the script works (its figures "
            f"say nothing about Metal)."
        )
    return None


class MlxLmEngine:
    """mlx-lm's model and KV cache, driven the way the other engines are (see the module docstring)."""

    name = "mlx-lm"

    def __init__(self, repo: str):
        import mlx.core as mx
        from mlx_lm import load

        self.mx = mx
        t0 = time.perf_counter()
        self.model, self.tokenizer = load(repo)
        self.load_seconds = time.perf_counter() - t0
        self.repo = repo
        self.n_vocab = int(getattr(self.tokenizer, "vocab_size", 0) or 0)

    def settings(self) -> dict:
        import mlx_lm

        return {"mlx_lm": getattr(mlx_lm, "__version__", "?"), "mlx": self.mx.__version__, "model": self.repo}

    def _cache(self, prefix: list[int]):
        from mlx_lm.models.cache import make_prompt_cache

        cache = make_prompt_cache(self.model)
        if prefix:
            self.mx.eval(self.model(self.mx.array([prefix]), cache=cache))
        return cache

    def run(self, test: TestSpec, prefix: list[int], ids: list[int]) -> Timing:
        mx = self.mx
        cache = self._cache(prefix)
        if test.kind == "pp":
            start = _clocks()
            mx.eval(self.model(mx.array([ids]), cache=cache)[:, -1])
            return _since(start)
        start = _clocks()
        for token in ids:
            mx.eval(self.model(mx.array([[token]]), cache=cache))
        return _since(start)

    def close(self) -> None:
        self.model = None


def _engines(source: str, path: str, args, log) -> dict:
    from bench_models_engines import CeraEngine, LlamaCppEngine

    out = {}
    for name in args.engines:
        try:
            if name == "cera":
                out[name] = CeraEngine(path, 1, device="metal")
            elif name == "llama.cpp":
                out[name] = LlamaCppEngine(path, os.cpu_count() or 4, gpu=True)
            else:
                repo = args.mlx_pairs.get(source) or args.mlx_pairs.get(path)
                if repo is None:
                    raise RuntimeError(f"no mlx-lm model given for {source} (--mlx-model {source}=REPO)")
                out[name] = MlxLmEngine(repo)
        except Exception as e:  # noqa: BLE001 - an engine that cannot run is reported, the others go on
            log(f"  {name}: not run: {type(e).__name__}: {e}")
    return out


def bench_model(source: str, args, log) -> dict:
    from cera.sources import resolve

    path = str(resolve(source, quiet=True).path)
    engines = _engines(source, path, args, log)
    result = {"model": source, "path": path, "settings": {n: e.settings() for n, e in engines.items()}, "tests": []}
    if "cera" not in engines:
        result["error"] = "cera could not load the model on metal"
        return result
    n_vocab = min(e.n_vocab for e in engines.values() if getattr(e, "n_vocab", 0)) or engines["cera"].n_vocab
    try:
        for test in args.tests:
            prefix, ids = test_ids(args.seed, source, test, n_vocab)
            seconds = {name: [] for name in engines}
            for run in alternation_schedule(list(engines), args.reps, args.warmup):
                timing = engines[run.engine].run(test, prefix, ids)
                if run.timed:
                    seconds[run.engine].append(timing.seconds)
                log(f"  {test.name:12s} {run.engine:9s} {'rep ' + str(run.rep + 1) if run.timed else 'warm-up':8s} "
                    f"{test.n / timing.seconds:9.2f} tok/s")  # fmt: skip
            tps = {name: tokens_per_second(test.n, s) for name, s in seconds.items()}
            result["tests"].append({"test": test.name, **{n: summarize(v).as_dict() for n, v in tps.items()},
                                    "samples_tok_s": tps})  # fmt: skip
    finally:
        for e in engines.values():
            e.close()
    return result


def report(models: list[dict], out=sys.stdout) -> None:
    header = ["model", "test", *[f"{e} tok/s" for e in ENGINES], "cera / mlx-lm", "cera / llama.cpp"]
    rows = []
    for m in models:
        for t in m["tests"]:

            def cell(e, t=t):
                return f"{_fmt(t[e]['median'])} ± {_fmt(t[e]['stdev'])}" if e in t else "not run"

            def ratio(e, t=t):
                return _fmt(t["cera"]["median"] / t[e]["median"], 2) if e in t and "cera" in t else "n/a"

            rows.append([m["model"], t["test"], *[cell(e) for e in ENGINES], ratio("mlx-lm"), ratio("llama.cpp")])
    print(markdown_table(header, rows), file=out)


def main(argv=None) -> int:
    args = parse_args(argv)
    why = refusal()
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    facts = {**machine_facts(), "platform": f"{sys.platform} {platform.machine()}",
             "metal_device_env": os.environ.get("CERA_METAL_DEVICE")}  # fmt: skip
    models = []
    for source in args.models:
        log(f"{source}:")
        models.append(bench_model(source, args, log))
    report(models)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": facts, "models": models}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
