"""The CPU kernels' KV cache rows (csrc/kvcache.c) against the numpy formats of
`cera.kv_types` / `cera.kv_turboquant`: the bytes the kernel stores, and attention over
them against attention over the numpy decoding, in float64. (The conformance suite runs the
same types through compiled graphs: attention[q4_0], [tq3], [tq2], ...)"""

from __future__ import annotations

import numpy as np
import pytest

from cera.graph.ops import AttentionSpec
from cera.kv_types import decode, encode
from cera.state import AttentionKV, HostState, StateSpec

SPEC = AttentionSpec(scale=0.125)


def _state(kv_type, n_ctx=80, dim=64, heads=2):
    spec = StateSpec()
    spec.add(AttentionKV(heads, dim, dim))
    return HostState(spec, n_ctx, kv_type=kv_type)


def _attend(be, state, q, k, v):
    pos = np.arange(len(q), dtype=np.int32)
    start = state.begin(0, pos)
    out = be.attention(q, k, v, state, 0, 0, start, pos, SPEC)
    state.commit(0)
    return out


def _reference(q, k_rows, v_rows, kv_type, scale):
    """Causal attention over decoded rows, float64: q [n, H, D], rows [kv heads, n, bytes]."""
    kk = decode(k_rows, kv_type, key=True)  # [kv heads, n, D]
    vv = decode(v_rows, kv_type, key=False)
    n, h = q.shape[:2]
    group = h // kk.shape[0]
    out = np.zeros((n, h, vv.shape[-1]))
    for head in range(h):
        s = q[:, head].astype(np.float64) @ kk[head // group].T * scale
        s[np.triu_indices(n, 1)] = -np.inf
        w = np.exp(s - s.max(axis=1, keepdims=True))
        out[:, head] = (w / w.sum(axis=1, keepdims=True)) @ vv[head // group]
    return out.reshape(n, -1)


@pytest.mark.parametrize("kv_type", ["q8_0", "q4_0", "tq3", "tq2"])
@pytest.mark.parametrize("n", [5, 70])  # the per-row path, and tiles (f32 and TurboQuant rows)
def test_kernel_rows_and_attention_are_the_formats(be, kv_type, n):
    rng = np.random.default_rng(7)
    q = rng.standard_normal((n, 4, 64)).astype(np.float32)
    k = rng.standard_normal((n, 2, 64)).astype(np.float32) * 2
    v = rng.standard_normal((n, 2, 64)).astype(np.float32)
    state = _state(kv_type)
    out = _attend(be, state, q, k, v)
    got_k, got_v = state.k[0][0, :, :n], state.v[0][0, :, :n]
    want_k, want_v = encode(np.swapaxes(k, 0, 1), kv_type, key=True), encode(np.swapaxes(v, 0, 1), kv_type, key=False)
    if kv_type == "q4_0":  # ggml's reference quantizer, byte for byte
        assert np.array_equal(got_k, want_k) and np.array_equal(got_v, want_v)
    elif kv_type == "q8_0":  # the activation quantizer's rounding may differ from numpy's at a half
        assert np.mean(got_k != want_k) < 0.01
    else:  # float32 sums in another order move a coordinate across a threshold now and then
        assert np.mean(got_k != want_k) < 0.01 and np.mean(got_v != want_v) < 0.01
    want = _reference(q, got_k, got_v, kv_type, SPEC.scale)
    # the Q8_0 query of the block types (llama.cpp's vec_dot_type) moves scores by ~1e-2
    tol = 2e-2 if kv_type in ("q8_0", "q4_0") else 1e-4
    np.testing.assert_allclose(out, want, atol=tol * np.abs(want).max())


@pytest.mark.parametrize("kv_type", ["tq3", "tq2"])
@pytest.mark.parametrize("dim", [40, 72, 96])  # rows of 8-coordinate groups left over the kernels' 32
def test_turboquant_attention_at_other_head_sizes(be, kv_type, dim):
    rng = np.random.default_rng(8)
    q = rng.standard_normal((5, 4, dim)).astype(np.float32)
    k = rng.standard_normal((5, 2, dim)).astype(np.float32) * 2
    v = rng.standard_normal((5, 2, dim)).astype(np.float32)
    state = _state(kv_type, dim=dim)
    out = _attend(be, state, q, k, v)
    want = _reference(q, state.k[0][0, :, :5], state.v[0][0, :, :5], kv_type, SPEC.scale)
    np.testing.assert_allclose(out, want, atol=1e-4 * np.abs(want).max())


def test_a_turboquant_cache_is_under_a_quarter_of_f16():
    f16, tq3 = _state("f16", dim=128), _state("tq3", dim=128)
    assert tq3.nbytes() < 0.25 * f16.nbytes()
