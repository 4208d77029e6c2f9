"""q8_0 and q4_0 KV caches on the Metal backend (`cera_backend_metal.kv_quant`, MLX's CPU
device here), against the numpy reference and the CPU backend: the same cases and
tolerances as tests/backend_vulkan/test_kv_quant.py (its docstring says why: 3e-2 of the
largest output; stored codes at most one step apart, at most 1% of them). Measured on
MLX's CPU device against the CPU backend (x86): every byte of every case identical."""

from __future__ import annotations

import numpy as np
import pytest

from cera import kv_types
from cera.graph.ops import AttentionSpec
from cera.state import AttentionKV

from .conftest import needs_mlx

conformance = pytest.importorskip("cera.testing.conformance")


def _case(kind: str, dim: int, passes, window: int | None = None):
    heads, kv_heads = 4, 2
    spec = AttentionSpec(scale=dim**-0.5, window=window)

    def build(g, w, s):
        n = g.layout.n_tokens
        q = g.reshape(conformance._x(g, heads * dim), (n, heads, dim))
        k = g.reshape(conformance._x(g, kv_heads * dim, "k"), (n, kv_heads, dim))
        v = g.reshape(conformance._x(g, kv_heads * dim, "v"), (n, kv_heads, dim))
        g.output("y", g.attention(q, k, v, s[0], spec))

    weights = (conformance._emb(heads * dim), conformance._emb(kv_heads * dim, "k"), conformance._emb(kv_heads * dim, "v"))
    return conformance.OpCase(f"attention[{kind},{dim}]", "attention", build, weights,
                              state=(AttentionKV(kv_heads, dim, dim, window=window),), passes=passes,
                              tolerance=3e-2, kv_type=kind, n_ctx=160)  # fmt: skip


DIMS = (64, 128, 96)  # turned over 64 / 128 (keys) and 64 (values); 96: not turned
PASSES = ((70, 23), (1, 1), (3, 1))


@needs_mlx
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("kind", ["q8_0", "q4_0"])
def test_attention_over_a_quantized_cache_is_the_reference(metal, kind, dim):
    conformance.check_op(metal, _case(kind, dim, PASSES))


@needs_mlx
def test_a_quantized_ring_is_the_reference(metal):
    case = _case("q4_0", 64, ((30,), (25,), (1,), (20,), (1,)), window=40)
    mt, _ref = conformance.check_op(metal, case)
    assert mt.k[0].shape[2] < case.n_ctx


def _codes(rows: np.ndarray, kind: str):
    nbytes = kv_types.BLOCK_TYPES[kind][1]
    blocks = rows.reshape(*rows.shape[:-1], -1, nbytes)
    scales = blocks[..., :2].copy().view(np.uint16)[..., 0]
    qs = blocks[..., 2:]
    codes = qs.view(np.int8).astype(np.int32) if kind == "q8_0" else np.concatenate([qs & 15, qs >> 4], -1).astype(np.int32)
    return scales, codes


@needs_mlx
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("kind", ["q8_0", "q4_0"])
def test_cache_rows_and_outputs_match_the_cpu_backend(metal, kind, dim):
    pytest.importorskip("cera_backend_cpu")
    from cera_backend_cpu.backend import CpuBackend

    mt, cpu = conformance.check_op(metal, _case(kind, dim, PASSES), ref=CpuBackend())
    assert mt.k[0].nbytes == 2 * 2 * 160 * kv_types.row_bytes(kind, dim)
    for slot in (0, 1):
        a, b = mt.snapshot(slot), cpu.snapshot(slot)
        assert a.kv_type == b.kv_type == kind and a.n_filled == b.n_filled
        for got, want in zip(a.kv[0], b.kv[0], strict=True):
            assert got.dtype == want.dtype == np.uint8 and got.shape == want.shape
            (gs, gc), (ws, wc) = _codes(got, kind), _codes(want, kind)
            assert np.mean(gs == ws) >= 0.99
            step = np.abs(gc - wc)
            assert step.max() <= 1 and np.mean(step != 0) <= 0.01, (step.max(), np.mean(step != 0))
