"""The IQ formats: dequantization bit-exact with the gguf package, on random
blocks and on blocks made by ggml's own quantizer; products within the error of the
8-bit activations of a float64 product of the dequantized weights; every variant whose
many-row microkernel takes them equal to the scalar one, bit for bit.

Against llama.cpp itself: tests/models/test_types_fidelity.py (whole files)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from cpu_variants import simd_variants
from gguf.constants import GGMLQuantizationType
from gguf.quants import dequantize

from cera_backend_cpu._native import ffi, lib

IQ = ("IQ4_XS", "IQ3_S", "IQ3_XXS", "IQ2_S", "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S")
BYTES = {"IQ4_XS": 136, "IQ3_S": 110, "IQ3_XXS": 98, "IQ2_S": 82, "IQ2_XS": 74, "IQ2_XXS": 66, "IQ1_M": 56, "IQ1_S": 50}


def _bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def random_iq_blocks(t: str, n_rows: int, k: int, rng, scale: float = 0.01) -> np.ndarray:
    """Random bytes (every byte pattern is a valid block) with a sane f16 scale."""
    raw = rng.integers(0, 256, (n_rows, k // 256, BYTES[t]), dtype=np.uint8)
    d = (rng.uniform(scale / 10, scale, raw.shape[:2]) * rng.choice([-1.0, 1.0], raw.shape[:2])).astype(np.float16)
    h = d.view(np.uint16)
    if t == "IQ1_M":  # the f16 is spread over the top nibbles of the four scale words
        sc = raw[..., 48:56].copy().view(np.uint16)
        for j in range(4):
            sc[..., j] = (sc[..., j] & 0x0FFF) | (((h >> (4 * j)) & 0xF) << 12)
        raw[..., 48:56] = sc.view(np.uint8)
    else:
        raw[..., 0:2] = h.view(np.uint8).reshape(raw.shape[:2] + (2,))
    return raw.reshape(n_rows, -1)


def _c_dequantize(t, data, n):
    out = np.empty(n, np.float32)
    rc = lib.cera_dequantize(int(GGMLQuantizationType[t]), ffi.from_buffer(np.ascontiguousarray(data)),
                             ffi.from_buffer("float[]", out), n)  # fmt: skip
    assert rc == 0
    return out


@pytest.mark.parametrize("t", IQ)
@pytest.mark.parametrize("seed", range(3))
def test_random_blocks_bit_exact(t, seed):
    rng = np.random.default_rng(seed)
    data = random_iq_blocks(t, 1, 256 * int(rng.integers(1, 12)), rng, scale=float(10.0 ** rng.uniform(-5, 1)))
    ref = dequantize(data, GGMLQuantizationType[t]).reshape(-1)
    np.testing.assert_array_equal(_bits(_c_dequantize(t, data, ref.size)), _bits(ref))


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs llama-cpp-python's ggml")
@pytest.mark.parametrize("t", IQ)
def test_ggml_quantized_blocks_bit_exact(t):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
    import quantized_files

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((8, 512)) * np.exp(rng.uniform(-2, 2, (1, 512)))).astype(np.float32)
    data = quantized_files.quantize(quantized_files._ggml(), t, x)
    ref = dequantize(data, GGMLQuantizationType[t]).reshape(-1)
    np.testing.assert_array_equal(_bits(_c_dequantize(t, data, ref.size)), _bits(ref))


@pytest.fixture(scope="module")
def backends():
    from cera_backend_cpu.backend import CpuBackend

    bs = {v: CpuBackend(threads=2, variant=v) for v in ("scalar", *simd_variants())}
    yield bs
    for b in bs.values():
        b.close()


@pytest.mark.parametrize("t", IQ)
def test_products_near_float64_and_variants_agree(backends, t):
    rng = np.random.default_rng(sum(map(ord, t)))
    k, n = 512, 40
    data = random_iq_blocks(t, n, k, rng, scale=0.05)
    w64 = dequantize(data, GGMLQuantizationType[t]).astype(np.float64).reshape(n, k)
    for m in (1, 3, 20):  # one row, a few (row kernels), a prompt (the many-row microkernel)
        x = (rng.standard_normal((m, k)) * np.exp(rng.uniform(-1, 1, (1, k)))).astype(np.float32)
        ref = x.astype(np.float64) @ w64.T
        # Q8_K rounds each activation by at most half a step of its block's amax / 127
        step = np.abs(x.reshape(m, -1, 256)).max(axis=2, keepdims=True) / 127
        bound = (np.abs(w64)[None] * np.repeat(step, 256, axis=2)[:, None, :].reshape(m, 1, k)).sum(-1) * 0.51
        bound += 1e-5 * (np.abs(x.astype(np.float64)) @ np.abs(w64).T) + 1e-6
        outs = {}
        for v, be in backends.items():
            y = be.linear(x, be.weight("w", data, t, shape=(k, n)))
            assert np.all(np.abs(y - ref) <= bound), (v, t, m, np.abs(y - ref).max(), bound.min())
            outs[v] = y
        if m == 1:  # one arithmetic (cera_dot_iq) for every variant
            for v, y in outs.items():
                np.testing.assert_array_equal(_bits(y), _bits(outs["scalar"]), err_msg=f"{v} {t}")
        if m == 20 and "avx512vnni" in outs:  # both take the tiled microkernel
            np.testing.assert_array_equal(_bits(outs["avx512vnni"]), _bits(outs["scalar"]), err_msg=t)
