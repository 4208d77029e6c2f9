"""Every op against a plain numpy float64 reference on random data of random shapes.

Each tolerance is derived from the float32 operations the op performs (u = 2^-24):
see the comment at each test. The references are in cpu_reference.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from cpu_reference import U16, U, attention, gelu_erf, gelu_tanh, layer_norm, rms_norm, rope, silu
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cera.graph.ops import AttentionSpec, RopeSpec
from cera.state import AttentionKV, HostState, StateSpec

OPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
seeds = st.integers(0, 2**32 - 1)


def _kv(dims, n_ctx, kv_type="f16"):
    """A one-layer KV state of (kv_heads, k_dim, v_dim)."""
    spec = StateSpec()
    spec.add(AttentionKV(*dims))
    return HostState(spec, n_ctx, kv_type=kv_type, n_batch=n_ctx)


def _rand(rng, shape, spread=2.0):
    return (rng.standard_normal(shape) * np.exp(rng.uniform(-spread, spread))).astype(np.float32)


# -- norms ------------------------------------------------------------------------------------


@OPS
@given(seed=seeds, rows=st.integers(1, 6), n=st.integers(1, 300), weighted=st.booleans(), heads=st.booleans())
def test_rms_norm(be, seed, rows, n, weighted, heads):
    # float32 steps after the double-precision sum: the mean (1 rounding), sqrtf and 1/x
    # (2), x*scale (1), *w (1), plus the products summed (1): relative error <= 8u.
    rng = np.random.default_rng(seed)
    shape = (rows, 3, n) if heads else (rows, n)
    x = _rand(rng, shape)
    w = be.weight("w", rng.standard_normal(n).astype(np.float32)) if weighted else None
    eps = float(10.0 ** rng.uniform(-7, -4))
    y = be.rms_norm(x, w, eps)
    ref = rms_norm(x, w.dense().astype(np.float64) if w else None, eps)
    assert y.shape == x.shape
    np.testing.assert_allclose(y, ref, rtol=8 * U, atol=1e-37)


@OPS
@given(seed=seeds, rows=st.integers(1, 6), n=st.integers(2, 300), affine=st.booleans(), offset=st.floats(-50, 50))
def test_layer_norm(be, seed, rows, n, affine, offset):
    # mean in float32 (1 rounding, relative to |mean|); x - mean rounds to u(|x|+|mean|)
    # absolute, so y errs by that over sigma, times |w|; the variance sum, sqrtf, 1/x
    # and the products add <= 8u relative; + b one more rounding of the result.
    rng = np.random.default_rng(seed)
    x = (_rand(rng, (rows, n)) + np.float32(offset)).astype(np.float32)
    w = be.weight("w", rng.standard_normal(n).astype(np.float32)) if affine else None
    b = be.weight("b", rng.standard_normal(n).astype(np.float32)) if affine else None
    eps = 1e-5
    y = be.layer_norm(x, w, b, eps)
    wd = w.dense().astype(np.float64) if w else None
    bd = b.dense().astype(np.float64) if b else None
    ref = layer_norm(x, wd, bd, eps)
    x64 = x.astype(np.float64)
    mean = x64.mean(-1, keepdims=True)
    sigma = np.sqrt(x64.var(-1, keepdims=True) + eps)
    ww = np.abs(wd) if wd is not None else 1.0
    tol = 3 * U * (np.abs(x64) + np.abs(mean)) / sigma * ww + 10 * U * np.abs(ref) + 1e-37
    if bd is not None:
        tol = tol + 10 * U * np.abs((ref - bd) + np.abs(bd))
    assert np.all(np.abs(y - ref) <= tol)


# -- RoPE -----------------------------------------------------------------------------------------


@st.composite
def rope_specs(draw):
    head_dim = 2 * draw(st.integers(1, 64))
    n_dims = 2 * draw(st.integers(1, head_dim // 2))
    neox = draw(st.booleans())
    base = draw(st.sampled_from([10000.0, 500000.0, 1e6]))
    freq_scale = draw(st.sampled_from([1.0, 0.25, 0.125]))
    ff = None
    if draw(st.booleans()):
        ff = tuple(draw(st.lists(st.floats(1.0, 8.0), min_size=n_dims // 2, max_size=n_dims // 2)))
    yarn = draw(st.booleans()) and freq_scale != 1.0
    spec = RopeSpec(
        n_dims=n_dims, base=base, neox=neox, freq_scale=freq_scale, freq_factors=ff,
        ext_factor=1.0 if yarn else 0.0, attn_factor=draw(st.sampled_from([1.0, 0.9])),
        beta_fast=32.0, beta_slow=1.0, n_ctx_orig=4096 if yarn else 0,
    )  # fmt: skip
    return head_dim, spec


@OPS
@given(seed=seeds, n=st.integers(1, 5), heads=st.integers(1, 4), case=rope_specs(), max_pos=st.sampled_from([10, 5000]))
def test_rope(be, seed, n, heads, case, max_pos):
    # ggml builds theta_i by multiplying theta_0 = pos by theta_scale = powf(base, -2/n_dims)
    # i times in float32: each step adds <= 2u relative (the product, and the <= 1 ulp of
    # powf carried along), so |d theta_i| <= (2i + 6) u |theta_i| (+ the divisions by
    # freq factors, the freq_scale product and the YaRN mix: the +6). cosf/sinf add 2u,
    # the rotation x0*c - x1*s three roundings: |dy| <= (|x0| + |x1|) m (|d theta| + 8u).
    head_dim, spec = case
    rng = np.random.default_rng(seed)
    x = _rand(rng, (n, heads, head_dim), spread=1)
    pos = rng.integers(0, max_pos, n).astype(np.int32)
    y = be.rope(x, pos, spec)
    ref, theta = rope(x, pos, spec)
    i = np.arange(spec.n_dims // 2)
    dtheta = (2 * i + 6) * U * np.abs(theta)  # [n, n_dims/2]
    m = (1.0 + 0.1 * np.log(1 / spec.freq_scale) if spec.ext_factor else 1.0) * spec.attn_factor
    x64 = np.abs(x.astype(np.float64))
    if spec.neox:
        pair = x64[..., : spec.n_dims // 2] + x64[..., spec.n_dims // 2 : spec.n_dims]
        tol_half = pair * m * (dtheta[:, None, :] + 8 * U)
        tol = np.concatenate([tol_half, tol_half], axis=-1)
    else:
        pair = x64[..., 0 : spec.n_dims : 2] + x64[..., 1 : spec.n_dims : 2]
        tol = np.repeat(pair * m * (dtheta[:, None, :] + 8 * U), 2, axis=-1)
    err = np.abs(y[..., : spec.n_dims] - ref[..., : spec.n_dims])
    assert np.all(err <= tol + 1e-37), f"max err {err.max():.3g}"
    np.testing.assert_array_equal(y[..., spec.n_dims :], x[..., spec.n_dims :])  # the rest passes through


def test_rope_pairs_by_hand(be):
    # position 1, base 10000, 4 dims: theta = (1, 1/100). Normal pairs (0,1), (2,3);
    # NeoX pairs (0,2), (1,3).
    x = np.array([[[1.0, 2.0, 3.0, 4.0]]], np.float32)
    pos = np.array([1], np.int32)
    c0, s0, c1, s1 = np.cos(1), np.sin(1), np.cos(0.01), np.sin(0.01)
    normal = be.rope(x, pos, RopeSpec(n_dims=4))
    np.testing.assert_allclose(normal[0, 0], [c0 - 2 * s0, s0 + 2 * c0, 3 * c1 - 4 * s1, 3 * s1 + 4 * c1], rtol=1e-6)
    neox = be.rope(x, pos, RopeSpec(n_dims=4, neox=True))
    np.testing.assert_allclose(neox[0, 0], [c0 - 3 * s0, 2 * c1 - 4 * s1, s0 + 3 * c0, 2 * s1 + 4 * c1], rtol=1e-6)


# -- attention ----------------------------------------------------------------------------------


@st.composite
def attention_cases(draw):
    n_kv = draw(st.integers(1, 3))
    group = draw(st.integers(1, 4))
    k_dim = draw(st.sampled_from([8, 16, 64, 80]))
    v_dim = draw(st.sampled_from([k_dim, 32]))
    batches = draw(st.lists(st.integers(1, 6), min_size=1, max_size=4))
    window = draw(st.sampled_from([None, 1, 3, 8]))
    softcap = draw(st.sampled_from([None, 5.0, 50.0]))
    kv_type = draw(st.sampled_from(["f16", "f32"]))
    gap = draw(st.sampled_from([0, 7]))  # positions need not be contiguous
    f16_acc = draw(st.booleans())
    return n_kv, group, k_dim, v_dim, batches, window, softcap, kv_type, gap, f16_acc


@OPS
@given(seed=seeds, case=attention_cases())
def test_attention(be, seed, case):
    # Reference: float64 with the cache's rounding applied (K, V stored as f16 in an f16
    # cache, and q rounded to f16 there, as documented). Errors of the float32 kernel:
    # a logit s = scale q.k errs by <= (k_dim + 4) u scale sum|q k| (+ tanh's 2u|s|);
    # a softmax weight p_j then errs relatively by <= 2 max|ds| + (n + 8) 2u
    # (exponentials and the running sum), so the output errs by <= max|v| times that.
    # With the f16 accumulator (f16 cache), the running weighted sum of values, at most
    # S max|v| with S the running sum of weights, is rounded to f16 after every update and
    # every rescaling: <= 2 * 2^-11 S max|v| per visible cell, divided by the final S
    # (>= the running one): 2 n 2^-11 max|v| for n visible cells (+ the f16 subnormal step).
    n_kv, group, k_dim, v_dim, batches, window, softcap, kv_type, gap, f16_acc = case
    be.attention_f16_accumulator = f16_acc
    try:
        _check_attention(be, seed, n_kv, group, k_dim, v_dim, batches, window, softcap, kv_type, gap, f16_acc)
    finally:
        be.attention_f16_accumulator = True


def _check_attention(
    be, seed, n_kv, group, k_dim, v_dim, batches, window, softcap, kv_type, gap, f16_acc, query_f16=True
):
    """Attention of each batch against a float64 reference within the derived bound.
    ``query_f16``: the kernel rounds the query to f16 for an f16 cache (the per-row path);
    the tiled path of many query rows keeps it in f32."""
    rng = np.random.default_rng(seed)
    n_heads = n_kv * group
    scale = 1 / np.sqrt(k_dim)
    total = sum(batches)
    state = _kv((n_kv, k_dim, v_dim), total + 3, kv_type)
    spec = AttentionSpec(scale=scale, window=window, softcap=softcap)
    store = np.float16 if kv_type == "f16" else np.float32
    ks, vs, ps = [], [], []
    next_pos = 0
    for n in batches:
        pos = np.arange(next_pos, next_pos + n, dtype=np.int32)
        next_pos += n + gap
        q, k, v = (
            _rand(rng, (n, n_heads, k_dim), 0.5),
            _rand(rng, (n, n_kv, k_dim), 0.5),
            _rand(rng, (n, n_kv, v_dim), 0.5),
        )
        start = state.begin(0, pos)
        out = be.attention(q, k, v, state, 0, 0, start, pos, spec)
        state.commit(0)
        ks.append(k.astype(store).astype(np.float64))
        vs.append(v.astype(store).astype(np.float64))
        ps.append(pos)
        kc, vc, cp = np.concatenate(ks), np.concatenate(vs), np.concatenate(ps)
        q64 = (q.astype(store) if query_f16 else q).astype(np.float64)
        ref = attention(q64, kc, vc, cp, pos, scale, window, softcap, group)
        ds = (k_dim + 4) * U * scale * np.einsum("thd,cgd->thc", np.abs(q64), np.abs(kc)).max() + 2 * U * 50
        tol = np.abs(vc).max() * (2 * ds + (len(cp) + 8) * 2 * U) + 1e-30
        if f16_acc and kv_type == "f16":
            tol += 2 * len(cp) * (U16 * np.abs(vc).max() + 2.0**-25)
        err = np.abs(out.reshape(n, n_heads, v_dim) - ref)
        assert out.shape == (n, n_heads * v_dim)
        assert err.max() <= tol, f"attention error {err.max():.3g} > {tol:.3g}"


@st.composite
def tiled_attention_cases(draw):
    n_kv = draw(st.integers(1, 2))
    group = draw(st.integers(1, 3))
    k_dim = draw(st.sampled_from([16, 64, 72]))
    v_dim = draw(st.sampled_from([k_dim, 32]))
    batches = draw(st.lists(st.integers(64, 150), min_size=1, max_size=2))
    window = draw(st.sampled_from([None, 20, 90]))
    softcap = draw(st.sampled_from([None, 50.0]))
    kv_type = draw(st.sampled_from(["f16", "f32"]))
    gap = draw(st.sampled_from([0, 7]))
    return n_kv, group, k_dim, v_dim, batches, window, softcap, kv_type, gap


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=seeds, case=tiled_attention_cases())
def test_attention_of_many_query_rows(be, seed, case):
    """From 64 query rows on, attention runs in tiles of 64 rows x 64 cells in float32, as
    llama.cpp's does for prompts: the query is not rounded to f16 and the value sum is f32.
    Errors: a logit is one float32 chain of k_dim fused multiply-adds and a scaling, so it
    errs by <= (k_dim + 4) u scale sum|q k| (+ tanh's); the softmax weights and sums, rescaled
    once per tile, carry (n + 8) 2u relatively, as in test_attention."""
    n_kv, group, k_dim, v_dim, batches, window, softcap, kv_type, gap = case
    _check_attention(
        be, seed, n_kv, group, k_dim, v_dim, batches, window, softcap, kv_type, gap, f16_acc=False, query_f16=False
    )


def test_attention_of_many_query_rows_variants_match_scalar(scalar_be, variant_backends):
    """The tiles' float steps are the same on every variant except the softmax's expf and
    its group sums, which follow llama.cpp's build for that CPU (its vector expf, within
    2 ulp of libm's): the outputs agree to a few float ulps."""
    rng = np.random.default_rng(4)
    if not variant_backends:
        pytest.skip("no SIMD variant runs here (or CERA_CPU_VARIANT forces scalar)")
    for kv_type in ("f16", "f32"):
        q, k, v = _rand(rng, (70, 4, 40), 0.5), _rand(rng, (70, 2, 40), 0.5), _rand(rng, (70, 2, 40), 0.5)
        pos = np.arange(70, dtype=np.int32)
        outs = {}
        for name, backend in {"scalar": scalar_be, **variant_backends}.items():
            state = _kv((2, 40, 40), 80, kv_type)
            start = state.begin(0, pos)
            outs[name] = backend.attention(q, k, v, state, 0, 0, start, pos, AttentionSpec(scale=0.15, softcap=30.0, window=50))
        for name, out in outs.items():
            np.testing.assert_allclose(out, outs["scalar"], rtol=0, atol=1e-5 * np.abs(v).max(), err_msg=name)


@pytest.mark.parametrize("kv_type", ["f16", "f32"])
@pytest.mark.parametrize("f16_acc", [True, False])
def test_attention_over_a_long_context(be, kv_type, f16_acc):
    """A few query rows over a long context: errors as in test_attention, and the same bits
    with 1 and 2 threads (only a single decoded row is cut into per-thread chunks, as
    llama.cpp does; checked at the end against the same bound)."""
    from cera_backend_cpu.backend import CpuBackend

    rng = np.random.default_rng(11)
    n_kv, group, dim = 2, 3, 64
    n_heads = n_kv * group
    store = np.float16 if kv_type == "f16" else np.float32
    outs = []
    for threads in (1, 2):
        backend = CpuBackend(threads=threads)
        backend.attention_f16_accumulator = f16_acc
        rng = np.random.default_rng(11)
        state = _kv((n_kv, dim, dim), 700, kv_type)
        ctx = 640
        pos = np.arange(ctx, dtype=np.int32)
        k, v = _rand(rng, (ctx, n_kv, dim), 0.5), _rand(rng, (ctx, n_kv, dim), 0.5)
        start = state.begin(0, pos)
        backend.attention(_rand(rng, (ctx, n_heads, dim), 0.5), k, v, state, 0, 0, start, pos, AttentionSpec(scale=0.125))
        state.commit(0)
        q, k1, v1 = _rand(rng, (2, n_heads, dim), 0.5), _rand(rng, (2, n_kv, dim), 0.5), _rand(rng, (2, n_kv, dim), 0.5)
        pos1 = np.array([ctx, ctx + 1], np.int32)
        start = state.begin(0, pos1)
        for window in (None, 300):
            out = backend.attention(q, k1, v1, state, 0, 0, start, pos1, AttentionSpec(scale=0.125, window=window))
            kc = np.concatenate([k, k1]).astype(store).astype(np.float64)
            vc = np.concatenate([v, v1]).astype(store).astype(np.float64)
            q64 = q.astype(store).astype(np.float64)
            ref = attention(q64, kc, vc, np.arange(ctx + 2), pos1, 0.125, window, None, group)
            ds = (dim + 4) * U * 0.125 * np.einsum("thd,cgd->thc", np.abs(q64), np.abs(kc)).max()
            tol = np.abs(vc).max() * (2 * ds + (len(kc) + 16) * 2 * U) + 1e-30
            if f16_acc and kv_type == "f16":
                tol += 2 * len(kc) * (U16 * np.abs(vc).max() + 2.0**-25)
            err = np.abs(out.reshape(2, n_heads, dim) - ref)
            assert err.max() <= tol, f"window {window}: attention error {err.max():.3g} > {tol:.3g}"
            outs.append(out)
        state.rollback(0)
        # one decoded row: 642 cells in a 700-cell cache view llama.cpp pads to 700 (>= 512),
        # cut into one chunk per thread and merged; the same error bound holds
        start = state.begin(0, pos1[:1])
        out = backend.attention(q[:1], k1[:1], v1[:1], state, 0, 0, start, pos1[:1], AttentionSpec(scale=0.125))
        kc = np.concatenate([k, k1[:1]]).astype(store).astype(np.float64)
        vc = np.concatenate([v, v1[:1]]).astype(store).astype(np.float64)
        ref = attention(
            q[:1].astype(store).astype(np.float64), kc, vc, np.arange(ctx + 1), pos1[:1], 0.125, None, None, group
        )
        err = np.abs(out.reshape(1, n_heads, dim) - ref)
        assert err.max() <= tol, f"decoded row ({threads} threads): error {err.max():.3g} > {tol:.3g}"
        state.rollback(0)
        backend.close()
    for a, b in zip(outs[:2], outs[2:], strict=True):
        np.testing.assert_array_equal(a, b)


def test_attention_mask_by_hand(be):
    # Two cells with keys that pick out one of two values each; a query at position 5
    # with window 2 sees only the cell at position 4 (5 - 4 < 2), not the one at 3.
    state = _kv((1, 2, 2), 4, "f32")
    k = np.array([[[1.0, 0.0]], [[0.0, 1.0]]], np.float32)
    v = np.array([[[10.0, 0.0]], [[0.0, 20.0]]], np.float32)
    q = np.zeros((2, 1, 2), np.float32)
    pos = np.array([3, 4], np.int32)
    start = state.begin(0, pos)
    out = be.attention(q, k, v, state, 0, 0, start, pos, AttentionSpec(scale=1.0))
    state.commit(0)
    # zero query: uniform weights over visible cells; causal: the first token sees only itself
    np.testing.assert_allclose(out, [[10.0, 0.0], [5.0, 10.0]], rtol=1e-6)
    q1 = np.zeros((1, 1, 2), np.float32)
    start = state.begin(0, np.array([5], np.int32))
    out = be.attention(q1, np.zeros((1, 1, 2), np.float32), np.full((1, 1, 2), 4.0, np.float32), state, 0, 0, start,
                       np.array([5], np.int32), AttentionSpec(scale=1.0, window=2))  # fmt: skip
    state.commit(0)
    np.testing.assert_allclose(out, [[2.0, 12.0]], rtol=1e-6)  # mean of cells at 4 and 5


def test_attention_variants_match_scalar(scalar_be, variant_backends):
    rng = np.random.default_rng(3)
    if not variant_backends:
        pytest.skip("no SIMD variant runs here (or CERA_CPU_VARIANT forces scalar)")
    for kv_type in ("f16", "f32"):
        q, k, v = _rand(rng, (9, 8, 64), 0.5), _rand(rng, (9, 2, 64), 0.5), _rand(rng, (9, 2, 64), 0.5)
        pos = np.arange(9, dtype=np.int32)
        outs = {}
        for name, backend in {"scalar": scalar_be, **variant_backends}.items():
            state = _kv((2, 64, 64), 16, kv_type)
            start = state.begin(0, pos)
            outs[name] = backend.attention(q, k, v, state, 0, 0, start, pos, AttentionSpec(scale=0.125, softcap=30.0))
        # K.Q sums in the lane order of llama.cpp's build for each CPU; with an f16 cache the
        # f16 value accumulator can turn that last-bit difference into one f16 step
        atol = (2.0**-10 if kv_type == "f16" else 1e-5) * np.abs(v).max()
        for out in outs.values():
            np.testing.assert_allclose(out, outs["scalar"], rtol=0, atol=atol)


# -- elementwise ------------------------------------------------------------------------------------


@OPS
@given(seed=seeds, n=st.integers(1, 2000), spread=st.floats(0, 3))
def test_unary(be, seed, n, spread):
    rng = np.random.default_rng(seed)
    x = _rand(rng, (n,), spread)
    x[: min(n, 3)] = [-12.0, 11.0, 0.0][: min(n, 3)]  # past the gelu table's saturation, and zero
    x64 = x.astype(np.float64)
    # silu: expf (<= 1 ulp), 1 + e, x / (...): relative <= 5u (exp(-x) may overflow to inf: y = -0)
    y = be.unary("silu", x)
    ref = silu(x)
    assert np.all(np.abs(y - ref) <= 5 * U * np.abs(ref) + 1e-37)
    # relu: exact
    np.testing.assert_array_equal(be.unary("relu", x), np.maximum(x, 0))
    # gelu (ggml): y = f16(gelu32(f16(x))) inside (-10, 10), 0 below, x above. Rounding x
    # to f16 moves it by <= max(2^-11 |x|, 2^-25), and |gelu'| <= 1.13 carries that over;
    # gelu32 itself (tanhf and a few products) is within 8u; the f16 result rounds by
    # <= 2^-11 |y| (2^-25 in the subnormal range). Saturation: |gelu(x)| < 1e-20 below -10
    # and |gelu(x) - x| < 1e-20 above 10.
    y = be.unary("gelu", x)
    ref = gelu_tanh(x)
    tol = 1.13 * np.maximum(U16 * np.abs(x64), 2.0**-25) + (U16 + 8 * U) * np.abs(ref) + 2.0**-25 + 1e-20
    assert np.all(np.abs(y - ref) <= tol)
    # gelu_erf: erff within 2 ulp of erf, whose absolute error 2u becomes 0.5|x| 2u once
    # 1 + erf cancels for x << 0; the products add 4u relative.
    y = be.unary("gelu_erf", x)
    ref = gelu_erf(x)
    assert np.all(np.abs(y - ref) <= 4 * U * np.abs(ref) + 2 * U * np.abs(x64) + 1e-37)


@OPS
@given(seed=seeds, n=st.integers(1, 1000))
def test_glu(be, seed, n):
    # the activation's bound (test_unary) times |up|, plus the final product's rounding u
    rng = np.random.default_rng(seed)
    g, u = _rand(rng, (3, n)), _rand(rng, (3, n))
    g64, u64 = g.astype(np.float64), u.astype(np.float64)
    ref = silu(g) * u64
    y = be.glu("swiglu", g, u)
    assert np.all(np.abs(y - ref) <= 6 * U * np.abs(ref) + 1e-37)
    ref = gelu_tanh(g) * u64
    y = be.glu("geglu", g, u)
    act_tol = 1.13 * np.maximum(U16 * np.abs(g64), 2.0**-25) + (U16 + 8 * U) * np.abs(gelu_tanh(g)) + 2.0**-25 + 1e-20
    assert np.all(np.abs(y - ref) <= act_tol * np.abs(u64) + U * np.abs(ref) + 1e-37)


@OPS
@given(seed=seeds, rows=st.integers(1, 5), n=st.integers(1, 100))
def test_add_mul_scale_softcap(be, seed, rows, n):
    # one float32 rounding each (softcap: the 1/cap product, tanh (<= 2 ulp) and the cap
    # product: <= 5u relative, plus the absolute 2u |x| of rounding x/cap before tanh)
    rng = np.random.default_rng(seed)
    a, b = _rand(rng, (rows, n)), _rand(rng, (rows, n))
    wb = be.weight("bias", rng.standard_normal(n).astype(np.float32))
    a64, b64, w64 = a.astype(np.float64), b.astype(np.float64), wb.dense().astype(np.float64)
    for got, ref in [
        (be.add(a, b), a64 + b64),
        (be.add(a, wb), a64 + w64),
        (be.mul(a, b), a64 * b64),
        (be.mul(a, wb), a64 * w64),
        (be.scale(a, 0.3), a64 * np.float64(np.float32(0.3))),
    ]:
        assert got.dtype == np.float32 and got.shape == a.shape
        assert np.all(np.abs(got - ref) <= U * np.abs(ref) + 1e-37)
    cap = 30.0
    got = be.softcap(a * 40, cap)
    ref = cap * np.tanh(a64 * 40 / cap)
    assert np.all(np.abs(got - ref) <= 5 * U * np.abs(ref) + 2 * U * np.abs(a64 * 40) + 1e-37)


# -- conv and MoE ------------------------------------------------------------------------------------


def _moe_reference(x, router, gate, up, down, k, norm, gating, act):
    logits = x @ router.T
    if gating == "softmax":
        e = np.exp(logits - logits.max(-1, keepdims=True))
        probs = e / e.sum(-1, keepdims=True)
    else:
        probs = 1 / (1 + np.exp(-logits))
    top = np.argsort(-probs, axis=-1, kind="stable")[:, :k]
    out = np.zeros((x.shape[0], down.shape[1]))
    gelu_err = np.zeros_like(out)  # what ggml's f16 gelu table may add (see test_unary)
    for t in range(x.shape[0]):
        wts = probs[t, top[t]]
        if norm:
            wts = wts / wts.sum()
        for e_idx, wt in zip(top[t], wts, strict=True):
            g = gate[e_idx] @ x[t]
            a = silu(g) if act == "silu" else gelu_tanh(g)
            h = up[e_idx] @ x[t]
            out[t] += wt * (down[e_idx] @ (a * h))
            if act == "gelu":
                err = 1.13 * np.maximum(U16 * np.abs(g), 2.0**-25) + (U16 + 8 * U) * np.abs(a) + 2.0**-25
                gelu_err[t] += wt * (np.abs(down[e_idx]) @ (err * np.abs(h)))
    return out, gelu_err


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=seeds, n=st.integers(1, 5), n_expert=st.integers(2, 6), data=st.data())
def test_moe(be, seed, n, n_expert, data):
    # F32 router and experts, so routing sees exact logits (no activation quantization)
    # and random data has no near-ties. Errors: float32 products of length n_embd / n_ff
    # ((len + 2) u sum|.|) passing through silu (5u) and the weighted sum; the bound
    # below takes 64 n_ff u of the magnitudes involved, far above that and far below any
    # routing or weighting mistake (which changes outputs by O(1)); with gelu, the f16
    # table's error (test_unary) carried through the down projection is added.
    k = data.draw(st.integers(1, n_expert))
    norm = data.draw(st.booleans())
    gating = data.draw(st.sampled_from(["softmax", "sigmoid"]))
    act = data.draw(st.sampled_from(["silu", "gelu"]))
    rng = np.random.default_rng(seed)
    n_embd, n_ff = 16, 24
    x = _rand(rng, (n, n_embd), 0.5)
    router = rng.standard_normal((n_expert, n_embd)).astype(np.float32)
    gate = (rng.standard_normal((n_expert, n_ff, n_embd)) * 0.3).astype(np.float32)
    up = (rng.standard_normal((n_expert, n_ff, n_embd)) * 0.3).astype(np.float32)
    down = (rng.standard_normal((n_expert, n_embd, n_ff)) * 0.3).astype(np.float32)
    got = be.moe(
        x, be.weight("router", router), be.weight("gate", gate), be.weight("up", up), be.weight("down", down), k,
        norm_topk=norm, gating=gating, activation=act,
    )  # fmt: skip
    f = np.float64
    ref, gelu_err = _moe_reference(x.astype(f), router.astype(f), gate.astype(f), up.astype(f), down.astype(f), k, norm,
                                   gating, act)  # fmt: skip
    mag = np.abs(ref).max() + 1.0
    assert np.all(np.abs(got - ref) <= 64 * U * mag * n_ff + gelu_err)


def test_moe_quantized_experts(be):
    """Q8_0 experts (3-D, like ffn_*_exps): each expert's matrix is sliced at its offset."""
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    rng = np.random.default_rng(4)
    n_expert, n_embd, n_ff = 4, 64, 96
    x = _rand(rng, (3, n_embd), 0.5)
    router = rng.standard_normal((n_expert, n_embd)).astype(np.float32)
    mats = {name: (rng.standard_normal(shape) * 0.2).astype(np.float32)
            for name, shape in [("gate", (n_expert, n_ff, n_embd)), ("up", (n_expert, n_ff, n_embd)), ("down", (n_expert, n_embd, n_ff))]}  # fmt: skip
    q = {name: quantize(m, GGMLQuantizationType.Q8_0) for name, m in mats.items()}
    deq = {name: dequantize(v, GGMLQuantizationType.Q8_0).astype(np.float64) for name, v in q.items()}
    ws = {name: be.weight(name, v, "Q8_0", shape=tuple(reversed(mats[name].shape))) for name, v in q.items()}
    got = be.moe(x, be.weight("router", router), ws["gate"], ws["up"], ws["down"], 2)
    ref, _ = _moe_reference(x.astype(np.float64), router.astype(np.float64), deq["gate"], deq["up"], deq["down"], 2,
                            False, "softmax", "silu")  # fmt: skip
    # the activation quantization of three chained Q8_0 products: about 1% here; a wrong
    # expert slice would be off by O(1)
    np.testing.assert_allclose(got, ref, rtol=0, atol=0.03 * np.abs(ref).max())
