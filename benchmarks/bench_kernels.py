"""Micro-benchmarks of the CPU backend's quantized kernels, next to the machine's memory
read bandwidth.

    python benchmarks/bench_kernels.py [--types Q4_0,Q4_K,...] [--threads 1,2] [--mib 1024]
                                       [--variant auto|scalar|avx2|avx512|avx512vnni|neon]

For every tensor type and thread count:

- matvec GB/s: one activation row times a weight much larger than the caches (--mib of
  weights, row length 4096), as in decoding; bytes of weights read per second. Next to
  it, the read bandwidth of the same machine and thread count ("read GB/s"), measured by
  streaming a buffer of the same size through the same thread pool with the widest
  loads the CPU has (cera_read_probe), alternating with the matvec runs (probe, matvec,
  probe, matvec, ...) so that both see the same load from other processes; "%read" is
  the median of the per-pair ratios. The CPU backend's target is >= 80%
  for Q4_0, Q4_K, Q5_0, Q6_K and Q8_0 with 2 threads.
- cached GB/s: the same on a 4 MiB weight that stays in the caches: the kernel's own
  speed, what a memory-bound figure cannot show.
- matmul GFLOP/s: 128 activation rows times a 4096 x 4096 weight, as in prefill;
  2*M*N*K floating-point operations per second.

With --shapes lfm2-350m,qwen2.5-0.5b the matvecs are instead those of one decoded token of
that model: every product of every layer, each with its own weights (together far larger
than the caches), run in order in one C call (cera_bench_matvecs: no Python between the
products, so small products pay only what they pay in a decode step). "token GB/s" is the
weight bytes of the whole sequence per second, next to the read bandwidth as above, and
"us/product" the mean time of one product. Every product takes the type under test
where its row length is a multiple of the type's block (else it is left out and named).

Each figure is the median of --repeat runs after a warm-up. On a machine shared with
other work the figures are provisional: re-measure on a quiet machine before quoting.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time

import numpy as np

TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
         "IQ4_XS", "IQ3_S", "IQ3_XXS", "IQ2_S", "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S")  # fmt: skip
TARGET_TYPES = ("Q4_0", "Q4_K", "Q5_0", "Q6_K", "Q8_0")
K = 4096

# Byte offsets of the f16 scales in each block: set to sane values so that no NaN or
# subnormal float slows a kernel down (random bytes elsewhere are valid quants).
F16_FIELDS = {
    "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "IQ4_NL": (0,),
    "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
    "IQ4_XS": (0,), "IQ3_S": (0,), "IQ3_XXS": (0,), "IQ2_S": (0,), "IQ2_XS": (0,), "IQ2_XXS": (0,), "IQ1_S": (0,),
    "IQ1_M": (),  # its f16 scale lies in the top nibbles of the scale words: cleared below (d = 0)
}  # fmt: skip


def weight_bytes(t: str, n_rows: int, rng: np.random.Generator) -> np.ndarray:
    """n_rows rows of K elements of type t, stored form; a random 4 MiB pattern repeated."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    bs, ts = GGML_QUANT_SIZES[GGMLQuantizationType[t]]
    row_bytes = K // bs * ts
    pattern_rows = max(1, min(n_rows, (4 << 20) // row_bytes))
    if t in ("F32", "F16", "BF16"):
        vals = rng.standard_normal((pattern_rows, K)).astype(np.float32)
        if t == "F16":
            vals = vals.astype(np.float16)
        elif t == "BF16":
            vals = (vals.view(np.uint32) >> 16).astype(np.uint16)
        pattern = vals.view(np.uint8).reshape(pattern_rows, row_bytes)
    else:
        blocks = rng.integers(0, 256, (pattern_rows, K // bs, ts), dtype=np.uint8)
        for off in F16_FIELDS[t]:
            scales = rng.uniform(1e-3, 1e-2, blocks.shape[:2]).astype(np.float16)
            blocks[..., off : off + 2] = scales.view(np.uint8).reshape(blocks.shape[:2] + (2,))
        if t == "IQ1_M":
            blocks[..., 49:56:2] &= 0x0F
        pattern = blocks.reshape(pattern_rows, row_bytes)
    out = np.empty((n_rows, row_bytes), np.uint8)
    for start in range(0, n_rows, pattern_rows):
        stop = min(n_rows, start + pattern_rows)
        out[start:stop] = pattern[: stop - start]
    if t == "F32":
        return out.view(np.float32)
    if t == "F16":
        return out.view(np.float16)
    if t == "BF16":
        return out.view(np.uint16)
    return out


def median_time(fn, repeat: int) -> float:
    fn()  # warm-up: page faults, pool start
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def read_bandwidth(backend, buf: np.ndarray, repeat: int = 5) -> float:
    """GB/s of streaming ``buf`` through the backend's thread pool with the widest loads
    the CPU has (cera_read_probe), best of ``repeat`` runs after one warm-up."""
    from cera_backend_cpu._native import ffi, lib

    ptr = ffi.from_buffer(buf)
    lib.cera_read_probe(backend._ctx, ptr, buf.nbytes)
    return (
        buf.nbytes / min(timed(lambda: lib.cera_read_probe(backend._ctx, ptr, buf.nbytes)) for _ in range(repeat)) / 1e9
    )


def matvec_vs_read(backend, probe: np.ndarray, weight, x, repeat: int) -> tuple[float, float, float]:
    """(matvec GB/s, read GB/s, median ratio) from alternating runs of the two."""
    from cera_backend_cpu._native import ffi, lib

    ptr = ffi.from_buffer(probe)
    nbytes = weight.data.nbytes

    def read():
        lib.cera_read_probe(backend._ctx, ptr, probe.nbytes)

    def matvec():
        backend.linear(x, weight)

    read(), matvec()  # warm-up
    reads, mvs = [], []
    for _ in range(repeat):
        reads.append(probe.nbytes / timed(read) / 1e9)
        mvs.append(nbytes / timed(matvec) / 1e9)
    ratio = statistics.median(m / r for m, r in zip(mvs, reads, strict=True))
    return statistics.median(mvs), statistics.median(reads), ratio


# (name, K, N, count) of the products of one decoded token, output head last
SHAPES = {
    # LFM2-350M: 10 short-convolution layers (in 1024 -> 3 x 1024, out), 6 attention layers
    # (q, k, v of 16/8 heads of 64, o), 16 feed-forwards of 4608, tied output of 65,536
    "lfm2-350m": [("conv.in_proj", 1024, 3072, 10), ("conv.out_proj", 1024, 1024, 10), ("attn.q", 1024, 1024, 6),
                  ("attn.k", 1024, 512, 6), ("attn.v", 1024, 512, 6), ("attn.o", 1024, 1024, 6),
                  ("ffn.w1", 1024, 4608, 16), ("ffn.w3", 1024, 4608, 16), ("ffn.w2", 4608, 1024, 16),
                  ("output", 1024, 65536, 1)],
    # Qwen2.5-0.5B: 24 layers of 896, 14/2 heads of 64, feed-forward 4864, output of 151,936
    "qwen2.5-0.5b": [("attn.q", 896, 896, 24), ("attn.k", 896, 128, 24), ("attn.v", 896, 128, 24),
                     ("attn.o", 896, 896, 24), ("ffn.gate", 896, 4864, 24), ("ffn.up", 896, 4864, 24),
                     ("ffn.down", 4864, 896, 24), ("output", 896, 151936, 1)],
}  # fmt: skip


def token_matvecs(backend, probe: np.ndarray, t: str, shape: str, rng, repeat: int):
    """(token GB/s, read GB/s, median ratio, us per product, left-out product names) for the
    products of one decoded token of ``shape``, every weight of type t."""
    from cera_backend_cpu._native import ffi, lib
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    bs, ts = GGML_QUANT_SIZES[GGMLQuantizationType[t]]
    keep, weights, left_out = [], [], set()
    for name, k, n, count in SHAPES[shape]:
        if k % bs:
            left_out.add(name)
            continue
        for _ in range(count):
            raw = rng.integers(0, 256, (n, k // bs, ts), dtype=np.uint8)
            for off in F16_FIELDS.get(t, ()):
                scales = rng.uniform(1e-3, 1e-2, raw.shape[:2]).astype(np.float16)
                raw[..., off : off + 2] = scales.view(np.uint8).reshape(raw.shape[:2] + (2,))
            weights.append(np.ascontiguousarray(raw.reshape(n, k // bs * ts)))
            keep.append((k, n))
    n_prod = len(keep)
    types = ffi.new("int[]", [int(GGMLQuantizationType[t])] * n_prod)
    ptrs = ffi.new("void *[]", [ffi.from_buffer(w) for w in weights])
    row_bytes = ffi.new("int64_t[]", [w.shape[1] for w in weights])
    ks = ffi.new("int64_t[]", [k for k, _ in keep])
    ns = ffi.new("int64_t[]", [n for _, n in keep])
    x = rng.standard_normal(max(k for k, _ in keep)).astype(np.float32)
    y = np.empty(max(n for _, n in keep), np.float32)
    xp, yp = ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y)
    nbytes = sum(w.nbytes for w in weights)
    pp = ffi.from_buffer(probe)

    def run():
        rc = lib.cera_bench_matvecs(backend._ctx, n_prod, types, ptrs, row_bytes, ks, ns, xp, yp, 1)
        if rc != 0:
            raise RuntimeError(f"cera_bench_matvecs failed ({rc}) on {t} {shape}")

    def read():
        lib.cera_read_probe(backend._ctx, pp, probe.nbytes)

    run(), read()
    mvs, reads, times = [], [], []
    for _ in range(repeat):
        reads.append(probe.nbytes / timed(read) / 1e9)
        dt = timed(run)
        times.append(dt)
        mvs.append(nbytes / dt / 1e9)
    ratio = statistics.median(m / r for m, r in zip(mvs, reads, strict=True))
    return statistics.median(mvs), statistics.median(reads), ratio, 1e6 * statistics.median(times) / n_prod, sorted(left_out)


def main_shapes(args, types, backends, rng) -> int:
    probe = np.ones(args.mib << 20, np.uint8)
    for shape in args.shapes.split(","):
        shape = shape.strip()
        if shape not in SHAPES:
            raise SystemExit(f"unknown shape {shape!r}; choose from {', '.join(SHAPES)}")
        head = f"{shape:13} {'type':7}"
        for n in backends:
            head += f" | {'token GB/s':>10} {'read GB/s':>9} {'%read':>5} {'us/product':>10}  ({n}t)"
        print(head)
        print("-" * len(head))
        for t in types:
            line = f"{'':13} {t:7}"
            skipped = []
            for n, be in backends.items():
                gbs, read, ratio, us, skipped = token_matvecs(be, probe, t, shape, rng, args.repeat)
                line += f" | {gbs:10.2f} {read:9.2f} {100 * ratio:4.0f}% {us:10.1f}  ({n}t)"
            if skipped:
                line += f"  (left out: {', '.join(skipped)})"
            print(line, flush=True)
        print()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--types", default=",".join(TYPES), help="comma-separated GGML types")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--mib", type=int, default=1024, help="MiB of weights for the memory-bound matvec (default 1024)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--variant", default=None, help="kernel variant (default: $CERA_CPU_VARIANT, else the best)")
    ap.add_argument("--no-matmul", action="store_true", help="skip the matrix-matrix products")
    ap.add_argument("--shapes", default=None,
                    help=f"comma-separated models whose decode-token products to run instead ({', '.join(SHAPES)})")
    args = ap.parse_args()

    from cera_backend_cpu._native import cpu_features, usable_variants
    from cera_backend_cpu.backend import CpuBackend

    types = [t.strip().upper() for t in args.types.split(",") if t.strip()]
    unknown = [t for t in types if t not in TYPES]
    if unknown:
        ap.error(f"unknown type(s) {unknown}; choose from {', '.join(TYPES)}")
    threads = [int(n) for n in args.threads.split(",")]
    backends = {n: CpuBackend(threads=n, variant=args.variant) for n in threads}
    variant = next(iter(backends.values())).variant
    rng = np.random.default_rng(0)

    print(f"cera CPU kernels: {platform.processor() or platform.machine()}, variant {variant} "
          f"(usable: {', '.join(usable_variants())}; {cpu_features()}), python {platform.python_version()}")  # fmt: skip
    print("Figures are provisional when the machine is shared with other work; re-measure on a quiet one.\n")

    if args.shapes:
        return main_shapes(args, types, backends, rng)
    probe = np.ones(args.mib << 20, np.uint8)
    head = f"{'type':7} {'bits/w':>6}"
    for n in threads:
        head += f" | {'matvec GB/s':>11} {'read GB/s':>9} {'%read':>5} {'cached GB/s':>11}"
        if not args.no_matmul:
            head += f" {'matmul GFLOP/s':>14}"
        head += f"  ({n}t)"
    print(head)
    print("-" * len(head))
    below = []
    all_reads: dict[int, list[float]] = {n: [] for n in threads}
    for t in types:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        bs, ts = GGML_QUANT_SIZES[GGMLQuantizationType[t]]
        row_bytes = K // bs * ts
        big = weight_bytes(t, max(1, (args.mib << 20) // row_bytes), rng)
        small = big[: max(1, (4 << 20) // row_bytes)]
        square = big[:K] if len(big) >= K else weight_bytes(t, K, rng)
        x1 = rng.standard_normal((1, K)).astype(np.float32)
        xm = rng.standard_normal((128, K)).astype(np.float32)
        line = f"{t:7} {ts * 8 / bs:6.2f}"
        for n, be in backends.items():
            wb = be.weight("big", big, t, shape=(K, len(big)))
            ws = be.weight("small", small, t, shape=(K, len(small)))
            gbs, read, ratio = matvec_vs_read(be, probe, wb, x1, args.repeat)
            all_reads[n].append(read)
            tc = median_time(lambda be=be, ws=ws, x1=x1: be.linear(x1, ws), max(args.repeat, 20))
            line += f" | {gbs:11.2f} {read:9.2f} {100 * ratio:4.0f}% {small.nbytes / tc / 1e9:11.2f}"
            if not args.no_matmul:
                wq = be.weight("square", square, t, shape=(K, K))
                tm = median_time(lambda be=be, wq=wq, xm=xm: be.linear(xm, wq), max(1, args.repeat // 2))
                line += f" {2 * 128 * K * K / tm / 1e9:14.1f}"
            line += f"  ({n}t)"
            if n == 2 and t in TARGET_TYPES and ratio < 0.8:
                below.append(f"{t} ({100 * ratio:.0f}%)")
        print(line, flush=True)
        del big, small, square
    print()
    print("memory read bandwidth (median of all probe runs): "
          + ", ".join(f"{statistics.median(all_reads[n]):.1f} GB/s ({n} thread{'s' * (n > 1)})" for n in threads))  # fmt: skip
    if 2 in threads:
        hit = [t for t in TARGET_TYPES if t in types]
        if hit:
            print(f"target (2 threads, matvec >= 80% of read bandwidth for {', '.join(hit)}): "
                  + ("met" if not below else "missed by " + ", ".join(below)))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
