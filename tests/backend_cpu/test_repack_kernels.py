"""CERA_CPU_LLAMA_REPACK=1 (llama.cpp's repacked Q4_0 / IQ4_NL arithmetic, as it ships on
x86): the SIMD kernels of that arithmetic (one activation row: dot_repack; many: the tiled
gemm_repack) give the scalar reference's bits (quants.c cera_dot_repack, which the scalar
variant runs), for one and for many activation rows, over row counts that leave partial
groups of 4 and tiles of 8 or 16. Against llama.cpp itself: test_types_fidelity.py."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_reference import random_weight
from cpu_variants import simd_variants


@pytest.mark.parametrize("t", ["Q4_0", "IQ4_NL"])
def test_the_repacked_arithmetic_is_the_scalar_one_bit_for_bit(monkeypatch, t):
    from cera_backend_cpu.backend import CpuBackend

    monkeypatch.setenv("CERA_CPU_LLAMA_REPACK", "1")
    variants = simd_variants()
    if not variants:
        pytest.skip("no SIMD variant runs here (or CERA_CPU_VARIANT forces scalar)")
    rng = np.random.default_rng(7)
    k, n = 32 * 5, 40  # a multiple of 8 rows: repacked; 40 = 2 tiles of 16 + 8, 10 groups of 4
    data, _ = random_weight(t, n, k, rng)
    x = (rng.standard_normal((20, k)) * np.exp(rng.uniform(-2, 2, (1, k)))).astype(np.float32)
    scalar = CpuBackend(threads=1, variant="scalar")
    try:
        ref = {m: scalar.linear(x[:m], scalar.weight("w", data, t, shape=(k, n))) for m in (1, 3, 20)}
    finally:
        scalar.close()
    for v in variants:
        backend = CpuBackend(threads=2, variant=v)
        try:
            w = backend.weight("w", data, t, shape=(k, n))
            for m, expected in ref.items():
                np.testing.assert_array_equal(backend.linear(x[:m], w), expected, err_msg=f"{t} on {v}, {m} rows")
        finally:
            backend.close()
