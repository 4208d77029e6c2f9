"""Where a decoded token's time goes on the Vulkan backend: the host's work before the
submission (writing the inputs; recording the pass, unless it was recorded during the
previous step), and from the submission to the read-back (the device's work plus the
round trip, with the next step's recording overlapped), averaged over decode steps of a
greedy loop.

    python benchmarks/vulkan_decode_split.py MODEL [--tokens 64] [--context 16] [--profile N]

``--context C``: decode after C tokens in the cache (a prompt of C tokens evaluated
first, in passes of 512), in a state of C + tokens + 32 cells.

``--profile N``: also the device time of every dispatch of one decode step (timestamps
in the step's own pass where the adapter allows it): the first N dispatches in order,
then the sum per kernel.
"""

from __future__ import annotations

import argparse
import statistics
import time

import cera
from cera.graph.builder import ARGMAX, Layout
from cera.generation.runtime import SeqStep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--context", type=int, default=16, metavar="C")
    ap.add_argument("--profile", type=int, default=-1, metavar="N")
    args = ap.parse_args()
    m = cera.load(args.model, device="vulkan", quiet=True)
    C = max(1, args.context)
    st = m.runner.new_state(C + args.tokens + 32)
    slot = st.acquire()
    for p0 in range(0, C, 512):
        ids = [1 + (i % 1000) for i in range(p0, min(C, p0 + 512))]
        m.runner.forward(st, [SeqStep(slot, ids, range(p0, p0 + len(ids)))], ARGMAX)
    exe = m.runner.executable(Layout((1,)), ARGMAX, st)
    rec, wait, total = [], [], []
    tok = 1
    for p in range(C, C + args.tokens):
        t = time.perf_counter()
        tok = int(m.runner.forward(st, [SeqStep(slot, [tok], [p])], ARGMAX)["argmax"][0])
        total.append(time.perf_counter() - t)
        rec.append(exe.timing[0])
        wait.append(exe.timing[1])
    med = statistics.median
    print(
        f"{m.name}{f' at {C} cells' if C != 16 else ''}: {len(exe.dispatches)} dispatches, recorded by {exe.record_mode!r}; per token (median ms): total {1e3 * med(total):.3f}, "
        f"before the submission {1e3 * med(rec):.3f}, submit to read-back {1e3 * med(wait):.3f}; {1 / med(total):.1f} tok/s greedy"
    )
    if args.profile >= 0:
        m.backend.profile = True
        m.runner.forward(st, [SeqStep(slot, [tok], [C + args.tokens])], ARGMAX)
        m.backend.profile = False
        prof = exe.profile()
        for name, ns in prof[: args.profile]:
            print(f"  {ns / 1e3:8.2f} us  {name}")
        by: dict = {}
        for name, ns in prof:
            c, t = by.get(name, (0, 0))
            by[name] = (c + 1, t + ns)
        total_ns = sum(ns for _, ns in prof)
        print(f"  per kernel ({exe._profile_stamps} stamps; {total_ns / 1e3:.1f} us in all):")
        for name, (c, t) in sorted(by.items(), key=lambda kv: -kv[1][1]):
            print(f"  {c:4d} x {t / c / 1e3:7.2f} us = {t / 1e3:8.1f} us  {100 * t / total_ns:5.1f}%  {name}")


if __name__ == "__main__":
    main()
