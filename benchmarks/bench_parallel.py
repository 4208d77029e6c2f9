"""`cera bench --parallel 4` against `--parallel 1`, alternating in one process.

    python benchmarks/bench_parallel.py [--model smollm2-135m-instruct-q4_1] [--pairs 6]
                                        [--threads 2] [--n 128] [--parallel 4]

Run one after the other as two `cera bench` commands, the two figures are minutes apart, and
on a shared machine its speed drifts by 10% in that time. Here the same tests `cera bench`
runs (its own `_tg` and `_tg_parallel`: one sequence reading its logits back each step, and
P sequences decoding together through the scheduler) alternate, pair after pair, on one
loaded model: printed per pair and as medians, with the ratio. Also printed: the time a
decode step spends outside the forward pass (sampling, events, the scheduler), for one
sequence and for P, from `generate_many` with the runner's forward timed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct-q4_1")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--parallel", type=int, default=4)
    a = ap.parse_args()

    import cera
    from cera_cli.commands.bench import _tg, _tg_parallel

    m = cera.load(a.model, device="cpu", threads=a.threads, quiet=True)
    rng = np.random.default_rng(0)
    _tg(m, 16, rng)
    _tg_parallel(m, 16, rng, a.parallel)
    one, many = [], []
    for i in range(a.pairs):
        one.append(_tg(m, a.n, rng))
        many.append(_tg_parallel(m, a.n, rng, a.parallel))
        print(f"pair {i}: 1 sequence {one[-1]:.1f} tok/s, {a.parallel} sequences {many[-1]:.1f} tok/s, "
              f"ratio {many[-1] / one[-1]:.2f}", flush=True)  # fmt: skip
    med = statistics.median
    pairwise = [b / x for x, b in zip(one, many, strict=True)]
    print(f"medians: 1 sequence {med(one):.1f}, {a.parallel} sequences {med(many):.1f} tok/s: ratio "
          f"{med(many) / med(one):.2f}; pairwise ratios {min(pairwise):.2f}-{max(pairwise):.2f}, median {med(pairwise):.2f}")  # fmt: skip

    # the time between forward passes, from generate_many with the runner's forward timed
    runner = m.runner
    real = runner.forward
    inside = [0.0, 0]

    def timed(*args, **kw):
        t = time.perf_counter()
        out = real(*args, **kw)
        inside[0] += time.perf_counter() - t
        inside[1] += 1
        return out

    runner.forward = timed
    try:
        for p in (1, a.parallel):
            scheduler = m.scheduler(n_slots=p, n_ctx=a.n + 2, n_batch=512)
            prompts = [[int(rng.integers(0, m.model.n_vocab))] for _ in range(p)]
            inside[:] = [0.0, 0]
            t0 = time.perf_counter()
            scheduler.generate_many(prompts, max_tokens=a.n, temperature=0.0, ignore_eos=True)
            wall = time.perf_counter() - t0
            print(f"{p} sequence(s): {1e3 * inside[0] / inside[1]:.3f} ms a forward pass, "
                  f"{1e3 * (wall - inside[0]) / inside[1]:.3f} ms outside it a step")  # fmt: skip
    finally:
        runner.forward = real


if __name__ == "__main__":
    main()
