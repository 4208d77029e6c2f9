"""Embedding throughput: cera's `embed` and llama-cpp-python's `Llama.embed` on the same
GGUF file, the same texts and thread count.

    python benchmarks/bench_embed.py [--model nomic-embed-text-v1.5-f16] [--texts 256] [--threads 2] [--reps 3]

The texts are short sentences (8-20 words) made from a fixed word list with a seeded
generator, so both engines embed the very same strings. Each engine embeds all of them
per repetition (cera in batches of up to 2048 tokens; llama-cpp-python as its `embed`
batches them, n_batch 2048), alternating engines after a warm-up of each. Printed: texts
per second (median) of each and the ratio, the cosine agreement of the two engines'
vectors, and the load average (on a shared machine every figure is provisional).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

WORDS = (
    "the a model state token short long fast slow river city music light energy cell data signal "
    "network paper answer question search query document vector memory layer weight small large"
).split()


def make_texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(8, 21)))) for _ in range(n)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="nomic-embed-text-v1.5-f16")
    ap.add_argument("--texts", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)

    import cera
    from cera.sources import resolve

    path = str(resolve(args.model, quiet=True).path)
    texts = make_texts(args.texts)
    loaded = cera.load(path, device="cpu", threads=args.threads, quiet=True)
    engines = {"cera": lambda: loaded.embed(texts)}
    try:
        from llama_cpp import Llama

        llm = Llama(model_path=path, embedding=True, n_threads=args.threads, n_threads_batch=args.threads,
                    n_ctx=2048, n_batch=2048, n_ubatch=2048, verbose=False)  # fmt: skip
        engines["llama.cpp"] = lambda: np.array(llm.embed(texts, normalize=True))
    except ImportError:
        print("llama-cpp-python is not installed: cera alone")
    vectors = {name: fn() for name, fn in engines.items()}  # warm-up
    times: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(args.reps):
        for name, fn in engines.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    print(f"{args.texts} texts, {args.threads} threads, model {os.path.basename(path)}, load {os.getloadavg()}")
    rates = {}
    for name, ts in times.items():
        rates[name] = args.texts / statistics.median(ts)
        print(f"  {name:10s} {rates[name]:8.1f} texts/s  (median of {len(ts)}: {statistics.median(ts):.3f} s)")
    if len(rates) == 2:
        print(f"  cera / llama.cpp: {rates['cera'] / rates['llama.cpp']:.2f}x")
        cos = (vectors["cera"] * vectors["llama.cpp"]).sum(axis=1)
        print(f"  cosine cera vs llama.cpp: min {cos.min():.7f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
