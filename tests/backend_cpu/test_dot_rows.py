"""Products of a few activation rows (a batch of sequences decoding together, short
prompts) through the kernels' many-row dot products (cera_kernels.dotm): every output
element must be, bit for bit, what the one-row product gives for that activation row.

dotm unpacks a weight block once for several activation rows; only the integer parts
are shared, so this holds exactly, and a sequence's tokens do not depend on what shares
its batch. From 16 rows (legacy formats) or 8 (K-quants) on, a plain product takes the
tiled microkernel (gemm.c), whose arithmetic is another of llama.cpp's; the per_row
products of a decode batch keep the one-row arithmetic for any number of rows, which the
plan test below checks up to 20 rows.
"""

from __future__ import annotations

import numpy as np
import pytest
from cpu_reference import random_weight
from cpu_variants import simd_variants
from gguf.constants import GGMLQuantizationType

from cera_backend_cpu._native import ffi, lib

LEGACY = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL")
KQUANTS = ("Q4_K", "Q5_K", "Q6_K")
GEMM_FROM = {**{t: 16 for t in LEGACY}, **{t: 8 for t in KQUANTS}}  # matmul.c GEMM_MIN_ROWS*
M_MAX = 9


@pytest.fixture(scope="module", params=[1, 2], ids=["1thread", "2threads"])
def backends(request):
    from cera_backend_cpu.backend import CpuBackend

    bs = {v: CpuBackend(threads=request.param, variant=v) for v in simd_variants()}
    if not bs:
        pytest.skip("no SIMD variant on this CPU")
    yield bs
    for b in bs.values():
        b.close()


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def _x(rng, m, k):
    # hidden-state-like rows: mixed magnitudes, outlier channels
    return (rng.standard_normal((m, k)) * np.exp(rng.uniform(-2, 2, (1, k)))).astype(np.float32)


def _ks(t):
    return (256, 512, 1024 + 32) if t in LEGACY else (256, 512, 1024)


# IQ4_NL is the exception: llama.cpp sums one activation row (vec_dot) in two sets of float
# lanes and two or more (tinyBLAS) in one, so a plain product of a few rows follows the
# latter; the per_row products of a decode batch (below) still give the one-row bits.
@pytest.mark.parametrize("t", [t for t in LEGACY + KQUANTS if t != "IQ4_NL"])
def test_rows_of_a_product_equal_their_one_row_products(backends, t):
    rng = np.random.default_rng(sum(map(ord, t)))
    for k in _ks(t):
        for n in (1, 3, 4, 7, 33):
            data, _ = random_weight(t, n, k, rng)
            x = _x(rng, M_MAX, k)
            for variant, be in backends.items():
                w = be.weight("w", data, t, shape=(k, n))
                alone = np.stack([be.linear(x[m : m + 1], w)[0] for m in range(M_MAX)])
                for m in range(2, min(M_MAX, GEMM_FROM[t] - 1) + 1):
                    y = be.linear(x[:m], w)
                    same = _bits(y) == _bits(alone[:m])
                    assert same.all(), (
                        f"{variant} {t} K={k} N={n} M={m}: {np.count_nonzero(~same)} elements differ from the "
                        f"one-row products, first at {np.argwhere(~same)[0].tolist()}"
                    )


def _ptr(ctype, a):
    return ffi.cast(ctype, ffi.from_buffer(a))


def _plan_products(be, x, members, glu=False):
    """Run one per_row products op of a plan; members: [(weight, bias or None, residual or None)].

    Returns, per member, y (and out where a residual is given), and the glu output."""
    M, K = x.shape
    plan = ffi.gc(lib.cera_plan_new(be._ctx), lib.cera_plan_free)
    mem = ffi.new("cera_product[]", len(members))
    keep, outs = [x], []
    for i, (w, bias, res) in enumerate(members):
        N = w.shape[1]
        y = np.full((M, N), np.nan, np.float32)
        out = np.full((M, N), np.nan, np.float32) if res is not None else None
        keep += [y, out, bias, res]
        mem[i].wtype = w.type_id
        mem[i].w = w.ptr
        mem[i].w_row_bytes = w.row_bytes
        mem[i].N = N
        mem[i].y = _ptr("float *", y)
        mem[i].y_stride = N
        mem[i].bias = _ptr("float *", bias) if bias is not None else ffi.NULL
        mem[i].residual = _ptr("float *", res) if res is not None else ffi.NULL
        mem[i].out = _ptr("float *", out) if out is not None else ffi.NULL
        outs.append((y, out))
    g = np.full((M, members[0][0].shape[1]), np.nan, np.float32) if glu else None
    rc = lib.cera_plan_products(plan, _ptr("float *", x), K, K, M, mem, len(members), 0 if glu else -1,
                                _ptr("float *", g) if glu else ffi.NULL, g.shape[1] if glu else 0, 1)
    assert rc == 0
    assert lib.cera_plan_run(plan, ffi.NULL) == 0
    return outs, g


@pytest.mark.parametrize("t", LEGACY + KQUANTS)
def test_per_row_products_of_many_rows_equal_their_one_row_products(backends, t):
    """A decode batch of up to 20 sequences: past the microkernel thresholds and past a
    group of 16 activation rows, with the bias, residual and glu epilogues."""
    rng = np.random.default_rng(7 + sum(map(ord, t)))
    k, n, M = 512, 67, 20
    x = _x(rng, M, k)
    datas = [random_weight(t, n, k, rng)[0] for _ in range(2)]
    bias = rng.standard_normal(n).astype(np.float32)
    res = rng.standard_normal((M, n)).astype(np.float32)
    for variant, be in backends.items():
        gate, up = (be.weight(f"w{i}", d, t, shape=(k, n)) for i, d in enumerate(datas))
        for members, glu in (([(gate, bias, res)], False), ([(gate, None, None), (up, None, None)], True)):
            got, got_glu = _plan_products(be, x, members, glu)
            for m in range(M):
                one = [(w, b, r[m : m + 1] if r is not None else None) for w, b, r in members]
                ref, ref_glu = _plan_products(be, x[m : m + 1], one, glu)
                for (y, out), (ry, rout), (w, b, _) in zip(got, ref, members):
                    lin = be.linear(x[m : m + 1], w)[0]
                    if b is not None:
                        lin = lin + b
                    assert np.array_equal(_bits(ry[0]), _bits(lin)), f"{variant} {t}: plan vs linear, row {m}"
                    assert np.array_equal(_bits(y[m]), _bits(ry[0])), f"{variant} {t} M={M}: row {m} of y"
                    if out is not None:
                        assert np.array_equal(_bits(out[m]), _bits(rout[0])), f"{variant} {t}: row {m} of out"
                if glu:
                    assert np.array_equal(_bits(got_glu[m]), _bits(ref_glu[0])), f"{variant} {t}: row {m} of glu"


@pytest.mark.parametrize("t", LEGACY + KQUANTS)
def test_matvec_rows_equal_the_one_row_dot(backends, t):
    """A one-row product walks its weight rows four at a time (dot4, its own kernel per
    format and variant): every element must be, bit for bit, the one-row dot (vec_dot) of
    its weight row with the same quantized activation row."""
    rng = np.random.default_rng(sum(map(ord, t)) + 1)
    tid = int(GGMLQuantizationType[t])
    for k in _ks(t):
        data, _ = random_weight(t, 13, k, rng)
        data = np.ascontiguousarray(data)
        x = _x(rng, 1, k)
        act = np.zeros(lib.cera_act_row_bytes(tid, k), np.uint8)
        for variant, be in backends.items():
            y = be.linear(x, be.weight("w", data, t, shape=(k, 13)))[0]
            assert lib.cera_quantize_act(be._ctx, tid, _ptr("float *", x[0]), ffi.from_buffer(act), k) == 0
            rows = data.reshape(13, -1)
            one = np.zeros(13, np.float32)
            out = ffi.new("float *")
            for r in range(13):
                row = np.ascontiguousarray(rows[r])
                assert lib.cera_vec_dot(be._ctx, tid, k, ffi.from_buffer(row), ffi.from_buffer(act), out) == 0
                one[r] = out[0]
            same = _bits(y) == _bits(one)
            assert same.all(), f"{variant} {t} K={k}: rows {np.flatnonzero(~same).tolist()} differ from vec_dot"
