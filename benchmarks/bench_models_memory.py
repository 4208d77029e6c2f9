"""Decode as a memory-bound job: weight bytes read per token, and the machine's read
bandwidth to compare them with.

A decode step multiplies one activation row by every weight matrix once, so it reads
every layer's weights plus the output matrix: the stored (quantized) size of all tensors
except the token embedding, of which only one row is read. When the file has no
``output.weight`` the output matrix is the token embedding itself (tied embeddings), and
then it is read in full. The KV cache, read by attention at depth, is not counted.

Read bandwidth is measured here: a buffer of --bandwidth-mib (default 1 GiB, far larger
than the caches) reduced with numpy (``bitwise_or`` over uint64 words, memory-bound),
split across 1..threads Python threads (numpy releases the GIL in the reduction); best of
several passes. Where the CPU backend's own read probe is available (the function of
benchmarks/bench_kernels.py), its figure is taken too. The largest figure is the
denominator: the most this machine was seen to read.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor


def decode_weight_bytes(path) -> dict:
    """Bytes of stored weights one decode step reads (see the module docstring)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    sizes = {t.name: int(t.n_bytes) for t in reader.tensors}
    tied = "output.weight" not in sizes
    total = sum(size for name, size in sizes.items() if name != "token_embd.weight")
    if tied and "token_embd.weight" in sizes:
        total += sizes["token_embd.weight"]
    return {
        "bytes": total,
        "file_tensor_bytes": sum(sizes.values()),
        "output": "token_embd.weight (tied)" if tied else "output.weight",
    }


def _best_seconds(fn, repeat: int) -> float:
    fn()  # warm-up: page faults, thread start
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def numpy_read_bandwidth(buf, threads: int, repeat: int = 5) -> float:
    """GB/s reading ``buf`` (a uint8 array, size a multiple of 8 * threads) with numpy."""
    import numpy as np

    words = buf.view(np.uint64)
    parts = np.array_split(words, threads)
    if threads == 1:
        seconds = _best_seconds(lambda: np.bitwise_or.reduce(words), repeat)
    else:
        with ThreadPoolExecutor(threads) as pool:
            seconds = _best_seconds(lambda: list(pool.map(np.bitwise_or.reduce, parts)), repeat)
    return buf.nbytes / seconds / 1e9


def cera_probe_read_bandwidth(buf, threads: int, repeat: int = 5) -> float:
    """GB/s of the CPU backend's read probe (bench_kernels.read_bandwidth): streams the
    buffer through cera's own thread pool. Raises when it is not available."""
    import bench_kernels

    from cera_backend_cpu.backend import CpuBackend

    backend = CpuBackend(threads=threads)
    try:
        return bench_kernels.read_bandwidth(backend, buf, repeat)
    finally:
        backend.close()


def measure_read_bandwidth(threads: int, mib: int = 1024, repeat: int = 5) -> dict:
    """Every read-bandwidth figure this script takes, and the best of them (GB/s)."""
    import numpy as np

    n = (mib << 20) // (8 * threads) * (8 * threads)
    buf = np.ones(n, np.uint8)
    figures = {}
    notes = []
    for t in sorted({1, threads}):
        figures[f"numpy, {t} thread{'s' * (t > 1)}"] = numpy_read_bandwidth(buf, t, repeat)
    try:
        figures[f"cera read probe, {threads} thread{'s' * (threads > 1)}"] = cera_probe_read_bandwidth(
            buf, threads, repeat
        )
    except Exception as e:  # the probe is an internal of the backend; its absence is not an error here
        notes.append(f"cera read probe n/a: {type(e).__name__}: {e}")
    del buf
    best_name = max(figures, key=figures.get)
    return {"best_gb_s": figures[best_name], "best_of": best_name, "figures_gb_s": figures, "notes": notes, "mib": mib}
