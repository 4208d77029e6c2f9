"""cera against cera: this tree against another checkout, on the same load.

    python benchmarks/bench_ab.py --baseline /path/to/other/checkout [--model BUNDLE ...]
                                  [--threads 2] [--reps 5] [--tests pp512,tg128]

Before/after figures taken hours apart on a shared machine mostly measure the machine.
This script runs both trees in turns (A B A B ...), each run a fresh subprocess that
imports the tree's own sources (its `cera-core/src`, `cera-backend-cpu/src` with its
compiled kernels, `cera-models/*/src`), loads the model and times the same work through
the public API both versions have (`cera.load`, `new_session`, `append_tokens`,
`evaluate`): ppN evaluates N random ids as one batch on a fresh session, tgN evaluates N
ids one at a time (all logits read back each step, as bench_models.py's tg). Printed per
model and test: each tree's median tok/s, the ratio of medians (this tree / baseline),
and the range of the per-turn ratios. The baseline checkout needs its CPU kernels built in
place (`cd <checkout>/cera-backend-cpu/src && python -m cera_backend_cpu._build`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODELS = ("smollm2-135m-instruct-q4_1", "gemma3-270m-q4_k_m", "qwen2.5-coder-0.5b-instruct-q4_k_m",
          "qwen2.5-coder-1.5b-instruct-q4_k_m")  # fmt: skip

SNIPPET = r"""
import json, sys, time
import numpy as np
import cera
model, threads, tests, seed = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), int(sys.argv[4])
m = cera.load(model, threads=threads, quiet=True)
rng = np.random.default_rng(seed)
vocab = m.model.n_vocab
out = {"cera": cera.__file__}
for test in tests:
    kind, n = test[:2], int(test[2:])
    ids = rng.integers(0, min(vocab, 32000), n + 1).tolist()
    if kind == "ov":  # Python overhead per decoded token (ms), by bench_models_overhead's proxy
        sys.path.insert(0, sys.argv[5])
        from types import SimpleNamespace
        from bench_models_overhead import measure_python_overhead

        class Engine:
            session = None

            def run(self, test, prefix, toks):
                # one session for every run (its first use compiles what it needs: the warm-up's
                # part), emptied before the clock starts; nothing evaluated outside the clock, as
                # the proxy counts every kernel call
                if self.session is None:
                    self.session = m.new_session(n_ctx=n + 8, n_batch=512)
                s = self.session
                s.reset()
                t = time.perf_counter()
                for tok in toks:
                    s.append_tokens([tok])
                    s.evaluate()
                return SimpleNamespace(seconds=time.perf_counter() - t)

        r = measure_python_overhead(Engine(), SimpleNamespace(name=test), [], ids[1 : n + 1], reps=3)
        out[test] = r["overhead_ms"] if r.get("available") else float("nan")
        continue
    best = []
    for _ in range(2):  # a warm-up and a timed run
        if kind == "pp":
            s = m.new_session(n_ctx=n + 8, n_batch=max(n, 1))
            s.append_tokens(ids[:n])
            t = time.perf_counter()
            s.evaluate()
        else:
            s = m.new_session(n_ctx=n + 8, n_batch=512)
            s.append_tokens(ids[:1])
            s.evaluate()
            t = time.perf_counter()
            for tok in ids[1 : n + 1]:
                s.append_tokens([tok])
                s.evaluate()
        best.append(n / (time.perf_counter() - t))
    out[test] = best[-1]
print(json.dumps(out))
"""


def source_path(tree: Path) -> str:
    dirs = [tree / "cera-core/src", tree / "cera-backend-cpu/src", tree / "cera-cli/src"]
    dirs += sorted((tree / "cera-models").glob("*/src"))
    return os.pathsep.join(str(d) for d in dirs if d.exists())


def run(tree: Path, model: str, threads: int, tests: str, seed: int) -> dict:
    env = dict(os.environ, PYTHONPATH=source_path(tree))
    proc = subprocess.run([sys.executable, "-c", SNIPPET, model, str(threads), tests, str(seed), str(REPO / "benchmarks")], env=env,
                          capture_output=True, text=True, timeout=3600)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"run in {tree} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, type=Path, help="the other checkout")
    ap.add_argument("--model", action="append", dest="models")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tests", default="pp512,tg128",
                    help="ppN (prompt of N), tgN (N decode steps), ovN (Python overhead per token in ms "
                         "over N decode steps, by bench_models_overhead.py's proxy; lower is better)")  # fmt: skip
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args(argv)
    tests = [t.strip() for t in args.tests.split(",") if t.strip()]
    report = {"baseline": str(args.baseline), "threads": args.threads, "reps": args.reps, "load": os.getloadavg(), "models": {}}
    for model in args.models or MODELS:
        samples = {"this": {t: [] for t in tests}, "base": {t: [] for t in tests}}
        for rep in range(args.reps):
            for who, tree in (("base", args.baseline), ("this", REPO)):
                r = run(tree, model, args.threads, args.tests, args.seed + rep)
                for t in tests:
                    samples[who][t].append(r[t])
            print(f"{model}: rep {rep + 1}/{args.reps} done (load {os.getloadavg()[0]:.1f})", file=sys.stderr)
        rows = {}
        for t in tests:
            a, b = samples["this"][t], samples["base"][t]
            ratios = [x / y for x, y in zip(a, b, strict=True)]
            rows[t] = {"this": statistics.median(a), "base": statistics.median(b),
                       "ratio": statistics.median(a) / statistics.median(b), "ratios": (min(ratios), max(ratios))}  # fmt: skip
            unit, fmt = ("ms/token", "8.3f") if t.startswith("ov") else ("tok/s", "8.1f")
            print(f"{model:38s} {t:8s} this {rows[t]['this']:{fmt}} {unit}  baseline {rows[t]['base']:{fmt}} {unit}  "
                  f"ratio {rows[t]['ratio']:.3f} (per turn {min(ratios):.2f}-{max(ratios):.2f})")  # fmt: skip
        report["models"][model] = {"samples": samples, "summary": rows}
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
