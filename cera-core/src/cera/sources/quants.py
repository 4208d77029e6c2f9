"""Quantizing float rows to GGML block types.

Q4_0, Q4_1, Q5_0 and Q5_1 are here, in llama.cpp's float32 arithmetic (round to nearest,
one scale per block from the block's extreme value): the `gguf` package's quantizers
compute in float64 and round differently where a value falls on a tie. Q8_0, F16 and BF16
come from the `gguf` package. It has no K-quant quantizer; Q2_K, Q3_K, Q4_K, Q5_K and Q6_K
are here, in two strategies:

- ``search`` (the default): llama.cpp's reference quantizers. Each sub-block's scale (and
  minimum) is chosen by a search that lowers the weighted squared error of the rounded
  values (weights ``sqrt(mean x^2) + |x|`` for Q4_K/Q5_K, ``x^2`` for Q3_K/Q6_K; Q2_K
  lowers the absolute error weighted by ``|x|``), as
  ``llama-quantize`` does without an importance matrix. The arithmetic follows
  llama.cpp's float32 operations in its order, vectorised over blocks, so the bytes equal
  ``llama-quantize``'s (tested against it).
- ``rtn``: plain round to nearest, the scale from the sub-block's range alone. Faster,
  and a larger error; there for comparison and for speed on very large models.

For the legacy types both strategies are llama.cpp's (it has no search for them without
an importance matrix).
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants as gguf_quants
from gguf.constants import GGML_QUANT_SIZES

QK_K = 256
STRATEGIES = ("search", "rtn")
f32 = np.float32


def quantize(rows: np.ndarray, qtype: T, strategy: str = "search") -> np.ndarray:
    """``rows`` (..., n) float32 -> uint8 (..., n // block * type_size)."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    if qtype == T.F32:
        return rows.view(np.uint8)
    legacy = {T.Q4_0: (4, False), T.Q4_1: (4, True), T.Q5_0: (5, False), T.Q5_1: (5, True)}.get(qtype)
    if legacy is not None:
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown quantization strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
        shape = rows.shape
        out = _legacy(rows.reshape(-1, 32), *legacy)
        return out.reshape(*shape[:-1], shape[-1] // 32 * GGML_QUANT_SIZES[qtype][1])
    k_quant = {T.Q2_K: _q2_k, T.Q3_K: _q3_k, T.Q4_K: _q4_k, T.Q5_K: _q5_k, T.Q6_K: _q6_k}.get(qtype)
    if k_quant is None:
        return gguf_quants.quantize(rows, qtype)
    shape = rows.shape
    blocks = rows.reshape(-1, QK_K)
    out = k_quant(blocks, strategy)
    type_size = GGML_QUANT_SIZES[qtype][1]
    return out.reshape(*shape[:-1], shape[-1] // QK_K * type_size)


def _legacy(x: np.ndarray, bits: int, with_min: bool) -> np.ndarray:
    """Q4_0/Q4_1/Q5_0/Q5_1 blocks of 32, as ggml's quantize_row_q*_ref computes them."""
    nb = x.shape[0]
    top = (1 << bits) - 1
    if with_min:
        idx = np.arange(nb)
        mn = x[idx, x.argmin(axis=1)]  # the first of equal values (-0.0 vs 0.0), as C's loop keeps
        d = (x[idx, x.argmax(axis=1)] - mn) / f32(top)
        id_ = np.where(d != 0, f32(1) / np.where(d != 0, d, f32(1)), f32(0)).astype(f32)
        v = (x - mn[:, None]) * id_[:, None] + f32(0.5)
        q = v.astype(np.int32)  # C's cast: toward zero (v >= 0 here)
        if bits == 4:
            q = np.minimum(q, 15)
        with np.errstate(over="ignore"):  # a huge minimum is inf in fp16, as in ggml
            head = [d.astype(np.float16).view(np.uint8).reshape(nb, 2), mn.astype(np.float16).view(np.uint8).reshape(nb, 2)]
    else:
        first = np.abs(x).argmax(axis=1)  # the first of equal magnitudes, as C's strict < keeps
        mx = x[np.arange(nb), first]
        mx = np.where(np.abs(mx) > 0, mx, f32(0))  # C's max stays +0.0 for a block of zeros
        d = (mx / f32(-(1 << (bits - 1)))).astype(f32)
        id_ = np.where(d != 0, f32(1) / np.where(d != 0, d, f32(1)), f32(0)).astype(f32)
        v = x * id_[:, None] + f32(1 << (bits - 1)) + f32(0.5)
        q = np.minimum(v.astype(np.int32).astype(np.int8), top).astype(np.int32)
        head = [d.astype(np.float16).view(np.uint8).reshape(nb, 2)]
    q = q.astype(np.uint8)
    lo, hi = q[:, :16], q[:, 16:]
    qs = (lo & 0xF) | ((hi & 0xF) << 4)
    if bits == 4:
        return np.concatenate(head + [qs], axis=1)
    qh = np.zeros(nb, dtype=np.uint32)
    for j in range(16):
        qh |= ((lo[:, j].astype(np.uint32) >> 4) & 1) << j
        qh |= ((hi[:, j].astype(np.uint32) >> 4) & 1) << (j + 16)
    return np.concatenate(head + [qh.view(np.uint8).reshape(nb, 4), qs], axis=1)


def _nearest_int(v: np.ndarray) -> np.ndarray:
    # llama.cpp rounds by adding 1.5 * 2^23 in float32: round half to even, as rint does
    return np.rint(v.astype(f32)).astype(np.int32)


def _fp16(v: np.ndarray) -> np.ndarray:
    return v.astype(np.float16)


def _seqsum(a: np.ndarray) -> np.ndarray:
    """Row sums added left to right in float32, as llama.cpp's loops add (numpy's sum is
    pairwise and would round differently)."""
    cols = np.ascontiguousarray(a.T) if a.shape[1] >= 32 else a.T  # whichever numpy walks faster
    total = cols[0].astype(f32)
    for c in cols[1:]:
        total += c
    return total


def _make_qkx2(x: np.ndarray, w: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int,
               use_mad: bool = False):  # fmt: skip
    """Scale and minimum per row of ``x`` (rows of 32, or 16 for Q2_K) by llama.cpp's
    make_qkx2_quants: the levels L in [0, nmax] and the (scale, -min) lowering the weighted
    squared error (the weighted absolute error with ``use_mad``, as Q2_K asks)."""

    def err(diff):
        return np.abs(diff) if use_mad else diff * diff

    mn = x.min(axis=1)
    mx = x.max(axis=1)
    sum_w = _seqsum(w)
    sum_x = _seqsum(w * x)
    mn = np.where(mn > 0, f32(0), mn)
    mn0 = mn
    flat = mx == mn
    rng = np.where(flat, f32(1), mx - mn)
    iscale = f32(nmax) / rng
    scale = f32(1) / iscale
    L = np.clip(_nearest_int(iscale[:, None] * (x - mn[:, None])), 0, nmax)
    diff = scale[:, None] * L.astype(f32) + mn[:, None] - x
    best = _seqsum(w * err(diff))
    for step in range(nstep + 1):
        # llama.cpp divides by (max - min) with the best min found so far
        rng = np.where(flat, f32(1), mx - mn)
        isc = (f32(rmin) + f32(rdelta) * f32(step) + f32(nmax)) / rng
        La = np.clip(_nearest_int(isc[:, None] * (x - mn[:, None])), 0, nmax)
        Lf = La.astype(f32)
        wl = w * Lf
        sum_l = _seqsum(wl)
        sum_l2 = _seqsum(wl * Lf)
        sum_xl = _seqsum(wl * x)
        D = sum_w * sum_l2 - sum_l * sum_l
        ok = D > 0
        Ds = np.where(ok, D, f32(1))
        this_scale = (sum_w * sum_xl - sum_x * sum_l) / Ds
        this_min = (sum_l2 * sum_x - sum_l * sum_xl) / Ds
        pos = this_min > 0
        this_min = np.where(pos, f32(0), this_min)
        this_scale = np.where(pos, sum_xl / np.where(sum_l2 == 0, f32(1), sum_l2), this_scale)
        diff = this_scale[:, None] * Lf + this_min[:, None] - x
        cur = _seqsum(w * err(diff))
        better = ok & (cur < best)
        L = np.where(better[:, None], La, L)
        best = np.where(better, cur, best)
        scale = np.where(better, this_scale, scale)
        mn = np.where(better, this_min, mn)
    scale = np.where(flat, f32(0), scale)
    mn = np.where(flat, mn0, mn)
    L = np.where(flat[:, None], 0, L)
    return scale.astype(f32), (-mn).astype(f32), L


def _rtn_min_max(x: np.ndarray, nmax: int):
    mn = np.minimum(x.min(axis=1), f32(0))
    mx = x.max(axis=1)
    rng = mx - mn
    scale = np.where(rng > 0, rng / f32(nmax), f32(0)).astype(f32)
    return scale, (-mn).astype(f32)


def _k_scales_mins(x: np.ndarray, nmax: int, rmin: float, nstep: int, strategy: str):
    """Per 32-element sub-block scale and minimum (blocks of 256 -> 8 each), packed as
    6-bit values with the two fp16 super-block factors, and the final levels."""
    nb = x.shape[0]
    sub = x.reshape(nb * 8, 32)
    if strategy == "search":
        sum_x2 = _seqsum(sub * sub)
        av_x = np.sqrt(sum_x2 / f32(32))
        weights = (av_x[:, None] + np.abs(sub)).astype(f32)
        scales, mins, _ = _make_qkx2(sub, weights, nmax, rmin, 0.1, nstep)
    elif strategy == "rtn":
        scales, mins = _rtn_min_max(sub, nmax)
    else:
        raise ValueError(f"unknown quantization strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
    scales = scales.reshape(nb, 8)
    mins = mins.reshape(nb, 8)
    max_scale = np.zeros(nb, dtype=f32)
    max_min = np.zeros(nb, dtype=f32)
    for j in range(8):
        max_scale = np.where(scales[:, j] > max_scale, scales[:, j], max_scale)
        max_min = np.where(mins[:, j] > max_min, mins[:, j], max_min)
    inv_scale = np.where(max_scale > 0, f32(63) / np.where(max_scale > 0, max_scale, f32(1)), f32(0))
    inv_min = np.where(max_min > 0, f32(63) / np.where(max_min > 0, max_min, f32(1)), f32(0))
    ls = np.minimum(_nearest_int(inv_scale[:, None] * scales) & 0xFF, 63).astype(np.uint8)
    lm = np.minimum(_nearest_int(inv_min[:, None] * mins) & 0xFF, 63).astype(np.uint8)
    packed = np.zeros((nb, 12), dtype=np.uint8)
    packed[:, 0:4] = ls[:, 0:4]
    packed[:, 4:8] = lm[:, 0:4]
    packed[:, 8:12] = (ls[:, 4:8] & 0xF) | ((lm[:, 4:8] & 0xF) << 4)
    packed[:, 0:4] |= (ls[:, 4:8] >> 4) << 6
    packed[:, 4:8] |= (lm[:, 4:8] >> 4) << 6
    d = _fp16(max_scale / f32(63))
    dmin = _fp16(max_min / f32(63))
    # the levels, from the rounded factors as the dequantizer will see them
    dsub = d.astype(f32)[:, None] * ls.astype(f32)
    msub = dmin.astype(f32)[:, None] * lm.astype(f32)
    xs = x.reshape(nb, 8, 32)
    safe = np.where(dsub == 0, f32(1), dsub)
    L = np.clip(_nearest_int((xs + msub[:, :, None]) / safe[:, :, None]), 0, nmax)
    L = np.where((dsub == 0)[:, :, None], 0, L)  # llama.cpp leaves those levels as the search set them
    if strategy == "search":
        _, _, Ls = _make_qkx2_levels_for_zero(sub, nmax, rmin, nstep, dsub)
        L = np.where((dsub == 0)[:, :, None], Ls, L)
    return d, dmin, packed, L.reshape(nb, QK_K).astype(np.uint8)


def _make_qkx2_levels_for_zero(sub, nmax, rmin, nstep, dsub):
    # For a sub-block whose 6-bit scale rounded to 0 llama.cpp keeps the search's levels;
    # recomputing them only where needed keeps the common path cheap.
    zero = (dsub == 0).reshape(-1)
    levels = np.zeros(sub.shape, dtype=np.int32)
    if zero.any():
        xs = sub[zero]
        sum_x2 = _seqsum(xs * xs)
        av_x = np.sqrt(sum_x2 / f32(32))
        weights = (av_x[:, None] + np.abs(xs)).astype(f32)
        _, _, L = _make_qkx2(xs, weights, nmax, rmin, 0.1, nstep)
        levels[zero] = L
    return None, None, levels.reshape(dsub.shape[0], 8, 32)


def _q4_k(x: np.ndarray, strategy: str) -> np.ndarray:
    nb = x.shape[0]
    d, dmin, scales, L = _k_scales_mins(x, 15, -1.0, 20, strategy)
    q = np.zeros((nb, 128), dtype=np.uint8)
    for g in range(4):
        lo = L[:, 64 * g: 64 * g + 32]
        hi = L[:, 64 * g + 32: 64 * g + 64]
        q[:, 32 * g: 32 * g + 32] = lo | (hi << 4)
    return np.concatenate([d.view(np.uint8).reshape(nb, 2), dmin.view(np.uint8).reshape(nb, 2), scales, q], axis=1)


def _q5_k(x: np.ndarray, strategy: str) -> np.ndarray:
    nb = x.shape[0]
    d, dmin, scales, L = _k_scales_mins(x, 31, -0.5, 15, strategy)
    qh = np.zeros((nb, 32), dtype=np.uint8)
    ql = np.zeros((nb, 128), dtype=np.uint8)
    for g in range(4):
        l1 = L[:, 64 * g: 64 * g + 32]
        l2 = L[:, 64 * g + 32: 64 * g + 64]
        qh |= ((l1 > 15).astype(np.uint8) << (2 * g)) | ((l2 > 15).astype(np.uint8) << (2 * g + 1))
        ql[:, 32 * g: 32 * g + 32] = (l1 & 0xF) | ((l2 & 0xF) << 4)
    return np.concatenate([d.view(np.uint8).reshape(nb, 2), dmin.view(np.uint8).reshape(nb, 2), scales, qh, ql], axis=1)


def _make_qx(x: np.ndarray, nmax: int, search: bool) -> np.ndarray:
    """llama.cpp's make_qx_quants with weights x^2 (rmse_type 1): the signed scale per row."""
    scale, _ = _qx_search(x, nmax, search)
    return scale


def _qx_search(x: np.ndarray, nmax: int, search: bool):
    """make_qx_quants for rows of ``x``: (scale, levels + nmax). Where several entries tie
    for the largest magnitude, C keeps the first; argmax does too."""
    ax = np.abs(x)
    first = ax.argmax(axis=1)
    amax = ax[np.arange(x.shape[0]), first]
    mx = x[np.arange(x.shape[0]), first]
    zero = amax < f32(1e-15)
    mx_s = np.where(zero, f32(1), mx)
    iscale = f32(-nmax) / mx_s
    L = np.clip(_nearest_int(iscale[:, None] * x), -nmax, nmax - 1)
    if not search:
        return np.where(zero, f32(0), f32(1) / iscale), np.where(zero[:, None], 0, L + nmax)
    w = x * x

    def sums(lv):
        lf = lv.astype(f32)
        return _seqsum(w * x * lf), _seqsum(w * lf * lf)

    sumlx, suml2 = sums(L)
    scale = np.where(suml2 != 0, sumlx / np.where(suml2 != 0, suml2, f32(1)), f32(0))
    best = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        isc = -(f32(nmax) + f32(0.1) * f32(step)) / mx_s
        lv = np.clip(_nearest_int(isc[:, None] * x), -nmax, nmax - 1)
        sumlx, suml2 = sums(lv)
        better = (suml2 > 0) & (sumlx * sumlx > best * suml2)
        new_scale = sumlx / np.where(suml2 > 0, suml2, f32(1))
        L = np.where(better[:, None], lv, L)
        scale = np.where(better, new_scale, scale)
        best = np.where(better, new_scale * sumlx, best)
    return np.where(zero, f32(0), scale).astype(f32), np.where(zero[:, None], 0, L + nmax)


def _q6_k(x: np.ndarray, strategy: str) -> np.ndarray:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown quantization strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
    nb = x.shape[0]
    sub = x.reshape(nb * 16, 16)
    scales = _make_qx(sub, 32, strategy == "search").reshape(nb, 16)
    max_scale = np.zeros(nb, dtype=f32)
    max_abs = np.zeros(nb, dtype=f32)
    for j in range(16):
        a = np.abs(scales[:, j])
        bigger = a > max_abs
        max_abs = np.where(bigger, a, max_abs)
        max_scale = np.where(bigger, scales[:, j], max_scale)
    empty = max_abs < f32(1e-15)
    iscale = f32(-128) / np.where(empty, f32(1), max_scale)
    d = _fp16(np.where(empty, f32(0), f32(1) / iscale))
    sc = np.minimum(_nearest_int(iscale[:, None] * scales), 127)
    sc = np.where(empty[:, None], 0, sc).astype(np.int8)
    dsub = d.astype(f32)[:, None] * sc.astype(f32)
    xs = x.reshape(nb, 16, 16)
    safe = np.where(dsub == 0, f32(1), dsub)
    L = np.clip(_nearest_int(xs / safe[:, :, None]), -32, 31) + 32
    if (dsub == 0).any():  # llama.cpp keeps the search's levels there
        keep = _q6_levels(sub, strategy == "search").reshape(nb, 16, 16)
        L = np.where((dsub == 0)[:, :, None], keep, L)
    L = np.where(empty[:, None, None], 0, L).reshape(nb, QK_K).astype(np.uint8)
    ql = np.zeros((nb, 128), dtype=np.uint8)
    qh = np.zeros((nb, 64), dtype=np.uint8)
    for h in range(2):
        base = 128 * h
        q1 = L[:, base: base + 32]
        q2 = L[:, base + 32: base + 64]
        q3 = L[:, base + 64: base + 96]
        q4 = L[:, base + 96: base + 128]
        ql[:, 64 * h: 64 * h + 32] = (q1 & 0xF) | ((q3 & 0xF) << 4)
        ql[:, 64 * h + 32: 64 * h + 64] = (q2 & 0xF) | ((q4 & 0xF) << 4)
        qh[:, 32 * h: 32 * h + 32] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)
    out = np.concatenate([ql, qh, sc.view(np.uint8), d.view(np.uint8).reshape(nb, 2)], axis=1)
    out[empty] = 0
    return out


def _q6_levels(sub: np.ndarray, search: bool) -> np.ndarray:
    """The levels make_qx_quants leaves for each 16-value row (kept where a scale rounds to 0)."""
    return _qx_search(sub, 32, search)[1]


def _pack_2bit(L: np.ndarray) -> np.ndarray:
    """Levels (nb, 256) in [0, 3] -> (nb, 64): four 32-value quarters of each half share a byte."""
    nb = L.shape[0]
    qs = np.zeros((nb, 64), dtype=np.uint8)
    for h in range(2):
        b = 128 * h
        qs[:, 32 * h: 32 * h + 32] = (L[:, b: b + 32] | (L[:, b + 32: b + 64] << 2) | (L[:, b + 64: b + 96] << 4)
                                      | (L[:, b + 96: b + 128] << 6))  # fmt: skip
    return qs


def _q2_k(x: np.ndarray, strategy: str) -> np.ndarray:
    """Q2_K as quantize_row_q2_K_ref: 16 sub-blocks of 16, each a 2-bit level with a scale
    and a minimum, both quantized to 4 bits against the block's largest."""
    nb = x.shape[0]
    sub = x.reshape(nb * 16, 16)
    if strategy == "search":
        scales, mins, L0 = _make_qkx2(sub, np.abs(sub), 3, -0.5, 0.1, 15, use_mad=True)
    elif strategy == "rtn":
        scales, mins = _rtn_min_max(sub, 3)
        safe = np.where(scales > 0, scales, f32(1))
        L0 = np.where((scales > 0)[:, None], np.clip(_nearest_int((sub + mins[:, None]) / safe[:, None]), 0, 3), 0)
    else:
        raise ValueError(f"unknown quantization strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
    scales = scales.reshape(nb, 16)
    mins = mins.reshape(nb, 16)
    max_scale = np.zeros(nb, dtype=f32)
    max_min = np.zeros(nb, dtype=f32)
    for j in range(16):
        max_scale = np.where(scales[:, j] > max_scale, scales[:, j], max_scale)
        max_min = np.where(mins[:, j] > max_min, mins[:, j], max_min)
    has_s, has_m = max_scale > 0, max_min > 0
    inv_s = f32(15) / np.where(has_s, max_scale, f32(1))
    inv_m = f32(15) / np.where(has_m, max_min, f32(1))
    ls = np.where(has_s[:, None], _nearest_int(inv_s[:, None] * scales), 0)
    lm = np.where(has_m[:, None], _nearest_int(inv_m[:, None] * mins), 0)
    packed = ((ls & 0xFF) | ((lm << 4) & 0xFF)).astype(np.uint8)  # C stores ints into uint8_t
    d = _fp16(np.where(has_s, max_scale / f32(15), f32(0)))
    dmin = _fp16(np.where(has_m, max_min / f32(15), f32(0)))
    dsub = d.astype(f32)[:, None] * (packed & 0xF).astype(f32)
    msub = dmin.astype(f32)[:, None] * (packed >> 4).astype(f32)
    xs = x.reshape(nb, 16, 16)
    safe = np.where(dsub == 0, f32(1), dsub)
    L = np.clip(_nearest_int((xs + msub[:, :, None]) / safe[:, :, None]), 0, 3)
    L = np.where((dsub == 0)[:, :, None], L0.reshape(nb, 16, 16), L)  # llama.cpp keeps the search's levels
    qs = _pack_2bit(L.reshape(nb, QK_K).astype(np.uint8))
    return np.concatenate([packed, qs, d.view(np.uint8).reshape(nb, 2), dmin.view(np.uint8).reshape(nb, 2)], axis=1)


def _make_q3(x: np.ndarray, nmax: int, rmse: bool):
    """llama.cpp's make_q3_quants for rows of ``x``: (signed scale, levels + nmax). With
    ``rmse`` the levels are refined one value at a time (five passes at most), keeping a
    change when it raises sumlx^2 / suml2 (weights x^2): the same sequential updates, run
    for all rows at once."""
    rows = np.arange(x.shape[0])
    first = np.abs(x).argmax(axis=1)  # the first of equal magnitudes, as C's strict > keeps
    amax = np.abs(x[rows, first])
    mx = x[rows, first]
    zero = amax < f32(1e-15)
    iscale = f32(-nmax) / np.where(zero, f32(1), mx)
    L = np.clip(_nearest_int(iscale[:, None] * x), -nmax, nmax - 1)
    if not rmse:
        return np.where(zero, f32(0), f32(1) / iscale).astype(f32), np.where(zero[:, None], 0, L + nmax)
    with np.errstate(over="ignore", invalid="ignore"):  # x^4 of a huge row overflows, as in C
        return _q3_refine(x, L, zero, nmax)


def _q3_refine(x: np.ndarray, L: np.ndarray, zero: np.ndarray, nmax: int):
    w = x * x
    wx = w * x
    Lf = L.astype(f32)
    sumlx = _seqsum(wx * Lf)
    suml2 = _seqsum(w * Lf * Lf)
    for _ in range(5):
        changed = np.zeros(x.shape[0], dtype=bool)
        for i in range(x.shape[1]):
            li = L[:, i].astype(f32)
            slx = sumlx - wx[:, i] * li
            sl2 = suml2 - w[:, i] * li * li
            pos = slx > 0
            new_l = np.clip(_nearest_int(x[:, i] * sl2 / np.where(pos, slx, f32(1))), -nmax, nmax - 1)
            nf = new_l.astype(f32)
            slx2 = slx + wx[:, i] * nf
            sl22 = sl2 + w[:, i] * nf * nf
            take = pos & (new_l != L[:, i]) & (sl22 > 0) & (slx2 * slx2 * suml2 > sumlx * sumlx * sl22)
            L[:, i] = np.where(take, new_l, L[:, i])
            sumlx = np.where(take, slx2, sumlx)
            suml2 = np.where(take, sl22, suml2)
            changed |= take
        if not changed.any():  # a row with no change stays unchanged in later passes too
            break
    scale = np.where(suml2 > 0, sumlx / np.where(suml2 > 0, suml2, f32(1)), f32(0))
    return np.where(zero, f32(0), scale).astype(f32), np.where(zero[:, None], 0, L + nmax)


def _q3_k(x: np.ndarray, strategy: str) -> np.ndarray:
    """Q3_K as quantize_row_q3_K_ref: 16 sub-blocks of 16, 3-bit signed levels (two low
    bits in qs, the high bit in hmask), 6-bit signed scales against the largest."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown quantization strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
    nb = x.shape[0]
    sub = x.reshape(nb * 16, 16)
    scales, L0 = _make_q3(sub, 4, strategy == "search")
    scales = scales.reshape(nb, 16)
    max_scale = np.zeros(nb, dtype=f32)
    amax = np.zeros(nb, dtype=f32)
    for j in range(16):
        a = np.abs(scales[:, j])
        bigger = a > amax
        amax = np.where(bigger, a, amax)
        max_scale = np.where(bigger, scales[:, j], max_scale)
    has = max_scale != 0
    iscale = f32(-32) / np.where(has, max_scale, f32(1))
    l6 = np.where(has[:, None], np.clip(_nearest_int(iscale[:, None] * scales), -32, 31) + 32, 0)
    packed = np.zeros((nb, 12), dtype=np.uint8)
    for j in range(16):
        lo = (l6[:, j] & 0xF).astype(np.uint8)
        if j < 8:
            packed[:, j] |= lo
        else:
            packed[:, j - 8] |= lo << 4
        packed[:, 8 + j % 4] |= ((l6[:, j] >> 4).astype(np.uint8) << (2 * (j // 4))).astype(np.uint8)
    d = _fp16(np.where(has, f32(1) / iscale, f32(0)))
    sc = np.where(has[:, None], l6 - 32, 0)  # what the dequantizer reads back (0 when d is 0 anyway)
    dsub = d.astype(f32)[:, None] * sc.astype(f32)
    xs = x.reshape(nb, 16, 16)
    safe = np.where(dsub == 0, f32(1), dsub)
    L = np.clip(_nearest_int(xs / safe[:, :, None]), -4, 3) + 4
    L = np.where((dsub == 0)[:, :, None], L0.reshape(nb, 16, 16), L).reshape(nb, QK_K)
    hmask = np.zeros((nb, 32), dtype=np.uint8)
    for bit in range(8):
        hi = L[:, 32 * bit: 32 * bit + 32] > 3
        hmask |= hi.astype(np.uint8) << bit
    L = np.where(L > 3, L - 4, L).astype(np.uint8)
    return np.concatenate([hmask, _pack_2bit(L), packed, d.view(np.uint8).reshape(nb, 2)], axis=1)
