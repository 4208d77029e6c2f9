"""One engine of bench_models.py in a process of its own: the same tests, token ids and
timing as bench_models.py, for when the two engines cannot share a process (cera's wgpu
and llama.cpp's ggml-vulkan each open the Vulkan driver; in one process that crashed on
the H200). Run it once per engine and compare the printed medians.

    python benchmarks/bench_models_one.py {cera,llama.cpp} --device vulkan --model PATH ... [--tests pp512,tg128]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from bench_models import parse_tests, test_ids
from bench_models_engines import CeraEngine, LlamaCppEngine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("engine", choices=("cera", "llama.cpp"))
    ap.add_argument("--device", choices=("cpu", "vulkan"), default="vulkan")
    ap.add_argument("--model", action="append", dest="models", required=True)
    ap.add_argument("--tests", default="pp512,tg128")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    tests = parse_tests(args.tests)
    for path in args.models:
        if args.engine == "cera":
            engine = CeraEngine(path, args.threads, device=args.device)
        else:
            engine = LlamaCppEngine(path, args.threads, gpu=args.device != "cpu")
            if path == args.models[0]:  # its device as it reports it (matrix cores or not: prompt speed)
                for line in engine.load_log.splitlines():
                    if line.startswith("ggml_vulkan:") or "matrix cores" in line:
                        print(f"llama.cpp {line.strip()}", flush=True)
        name = path.rsplit("/", 1)[-1]
        for test in tests:
            prefix, ids = test_ids(args.seed, name, test, engine.n_vocab)
            engine.run(test, prefix, ids)  # warm-up
            speeds = [test.n / engine.run(test, prefix, ids).seconds for _ in range(args.reps)]
            print(
                f"{args.engine:9s} {name:45s} {test.name:8s} {statistics.median(speeds):10.1f} tok/s "
                f"(runs {', '.join(f'{s:.1f}' for s in speeds)})",
                flush=True,
            )
        engine.close()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
