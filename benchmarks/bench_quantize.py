"""Quantizer throughput: cera.sources.quants (numpy, what `cera quantize` and Hub
conversions run) against ggml's own quantizer (ggml_quantize_chunk in the libggml-base that
llama-cpp-python ships, one thread, what llama-quantize runs per thread), on the same
float32 matrix, checking the bytes are equal as it goes.

    python benchmarks/bench_quantize.py [--rows 4096] [--cols 4096] [--types Q8_0,Q4_0,...]

Prints, per type, million values per second for each and their ratio. A conversion's time is
roughly the model's parameter count over cera's figure (reading and writing add little).
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import time

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

from cera.sources.quants import quantize

TYPES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")


def load_ggml():
    try:
        import llama_cpp
    except ImportError:
        return None
    libs = glob.glob(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so*"))
    if not libs:
        return None
    lib = ctypes.CDLL(libs[0])
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]  # fmt: skip
    return lib


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    x = (np.random.default_rng(0).standard_normal((args.rows, args.cols), dtype=np.float32) * 0.02).astype(np.float32)
    ggml = load_ggml()
    n = x.size / 1e6
    print(f"{args.rows} x {args.cols} float32; ggml: {'libggml-base from llama-cpp-python' if ggml else 'not installed'}")
    print(f"{'type':6} {'cera Mval/s':>12} {'ggml Mval/s':>12} {'ggml/cera':>10}  bytes")
    for name in args.types.split(","):
        t = T[name]
        got = quantize(x, t)
        t_cera = best_of(lambda t=t: quantize(x, t), args.repeat)
        line = f"{name:6} {n / t_cera:12.1f}"
        if ggml is not None:
            bs, ts = GGML_QUANT_SIZES[t]
            want = np.zeros(x.size // bs * ts, dtype=np.uint8)

            def run(t=t, want=want):
                ggml.ggml_quantize_chunk(int(t), x.ctypes.data, want.ctypes.data, 0, x.shape[0], x.shape[1], None)

            t_ggml = best_of(run, args.repeat)
            same = "equal" if np.array_equal(got.reshape(-1), want) else "DIFFER"
            line += f" {n / t_ggml:12.1f} {t_cera / t_ggml:10.1f}  {same}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
