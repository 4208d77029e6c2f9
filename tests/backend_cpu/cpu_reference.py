"""Independent references for the CPU backend's tests: plain numpy, float64 where it
matters, written from the formats' and llama.cpp's definitions, not from our C code.

Also the random test data (valid quantized blocks of every type) and the error bounds
the tests use, each derived in its docstring. u = 2**-24 is float32's unit roundoff.
"""

from __future__ import annotations

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize, quantize

U = 2.0**-24  # float32 unit roundoff
U16 = 2.0**-11  # float16 unit roundoff
U_BF16 = 2.0**-8
HALF_MIN_SUB = 2.0**-24  # smallest f16 subnormal: rounding to f16 errs by at most half of it

QUANT_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
FLOAT_TYPES = ("F32", "F16", "BF16")
ALL_TYPES = FLOAT_TYPES + QUANT_TYPES

# The activation format llama.cpp pairs with each weight type (its vec_dot_type).
ACT_FORMAT = {
    "F32": "F32",
    "F16": "F16",
    "BF16": "BF16",
    "Q4_0": "Q8_0",
    "Q5_0": "Q8_0",
    "Q8_0": "Q8_0",
    "IQ4_NL": "Q8_0",
    "Q4_1": "Q8_1",
    "Q5_1": "Q8_1",
    "Q2_K": "Q8_K",
    "Q3_K": "Q8_K",
    "Q4_K": "Q8_K",
    "Q5_K": "Q8_K",
    "Q6_K": "Q8_K",
}

# Byte offsets of the f16 scale fields in each block (ggml-common.h layouts).
F16_FIELDS = {
    "Q4_0": (0,),
    "Q4_1": (0, 2),
    "Q5_0": (0,),
    "Q5_1": (0, 2),
    "Q8_0": (0,),
    "IQ4_NL": (0,),
    "Q2_K": (80, 82),
    "Q3_K": (108,),
    "Q4_K": (0, 2),
    "Q5_K": (0, 2),
    "Q6_K": (208,),
}

# Byte ranges holding the quants (not scales) of the types that have a min offset:
# zeroing them leaves a block whose dequantization is its min part alone.
QUANT_BYTES_OF_MIN_TYPES = {
    "Q4_1": ((4, 20),),
    "Q5_1": ((4, 24),),
    "Q2_K": ((16, 80),),
    "Q4_K": ((16, 144),),
    "Q5_K": ((16, 176),),
}

# gguf can quantize these itself; the others get random valid blocks.
GGUF_CAN_QUANTIZE = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")


def block_size(t: str) -> int:
    return GGML_QUANT_SIZES[GGMLQuantizationType[t]][0]


def block_bytes(t: str) -> int:
    return GGML_QUANT_SIZES[GGMLQuantizationType[t]][1]


# -- test data --------------------------------------------------------------------------


def random_blocks(t: str, n_rows: int, k: int, rng: np.random.Generator, scale: float = 0.01) -> np.ndarray:
    """n_rows rows of k elements of quantized type t, as stored bytes [n_rows, row_bytes].

    Every byte is random except the f16 scale fields, which get finite values in
    [scale/10, scale] with a random sign (so no NaN/inf and both signs of every scale
    appear). Every bit pattern of the quants and sub-block scales is a valid block."""
    bs, ts = block_size(t), block_bytes(t)
    raw = rng.integers(0, 256, (n_rows, k // bs, ts), dtype=np.uint8)
    for off in F16_FIELDS[t]:
        vals = rng.uniform(scale / 10, scale, raw.shape[:2]) * rng.choice([-1.0, 1.0], raw.shape[:2])
        raw[..., off : off + 2] = vals.astype(np.float16).view(np.uint8).reshape(raw.shape[:2] + (2,))
    return raw.reshape(n_rows, -1)


def random_weight(t: str, n_rows: int, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(stored data, dequantized float64 values [n_rows, k]) of a random weight of type t."""
    if t == "F32":
        w = rng.standard_normal((n_rows, k)).astype(np.float32)
        return w, w.astype(np.float64)
    if t == "F16":
        w = rng.standard_normal((n_rows, k)).astype(np.float16)
        return w, w.astype(np.float64)
    if t == "BF16":
        w = quantize(rng.standard_normal((n_rows, k)).astype(np.float32), GGMLQuantizationType.BF16).view(np.uint16)
        return w, dequantize(w.view(np.uint8), GGMLQuantizationType.BF16).astype(np.float64)
    if t in GGUF_CAN_QUANTIZE and rng.random() < 0.5:
        data = quantize(rng.standard_normal((n_rows, k)).astype(np.float32), GGMLQuantizationType[t])
    else:
        data = random_blocks(t, n_rows, k, rng)
    return data, dequantize(data, GGMLQuantizationType[t]).astype(np.float64)


def min_part(t: str, data: np.ndarray) -> np.ndarray:
    """The min offsets of each element of a weight (0 for types without mins), float64."""
    if t not in QUANT_BYTES_OF_MIN_TYPES:
        return np.zeros(0)
    ts = block_bytes(t)
    blocks = data.reshape(data.shape[0], -1, ts).copy()
    for a, b in QUANT_BYTES_OF_MIN_TYPES[t]:
        blocks[..., a:b] = 0
    return dequantize(blocks.reshape(data.shape), GGMLQuantizationType[t]).astype(np.float64)


# -- activation quantizers, as llama.cpp's CPU backend runs them on x86-64 --------------


def _rne(v: np.ndarray) -> np.ndarray:
    return np.rint(v)  # numpy rounds half to even


def quantize_q8_0(x: np.ndarray, with_sum: bool = False):
    """ggml-cpu/arch/x86/quants.c quantize_row_q8_0 (and _q8_1 with with_sum): per block of
    32, d = amax/127, q = round-half-even(x * (127/amax)), all in float32.
    Returns (d float32 [nb] as stored in f16, q int8 [nb, 32], s float32 [nb] or None)."""
    xb = x.astype(np.float32).reshape(-1, 32)
    amax = np.abs(xb).max(axis=1)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        iscale = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = _rne(xb * iscale[:, None]).astype(np.int8)
    d16 = d.astype(np.float16).astype(np.float32)
    s = None
    if with_sum:
        s = (d * q.astype(np.int32).sum(axis=1).astype(np.float32)).astype(np.float16).astype(np.float32)
    return d16, q, s


def quantize_q8_k(x: np.ndarray):
    """ggml-quants.c quantize_row_q8_K_ref: per block of 256, the signed element of largest
    magnitude (first one on ties) gives iscale = -127/max; q = nearest_int(iscale*x)
    clamped to 127; d = 1/iscale. Returns (d float32 [nb], q int8 [nb, 256], bsums [nb, 16])."""
    xb = x.astype(np.float32).reshape(-1, 256)
    idx = np.abs(xb).argmax(axis=1)  # argmax returns the first maximum
    mx = xb[np.arange(len(xb)), idx]
    with np.errstate(divide="ignore"):
        iscale = np.where(mx != 0, np.float32(-127) / mx, np.float32(0)).astype(np.float32)
    q = np.minimum(_rne(xb * iscale[:, None]), 127).astype(np.int8)
    with np.errstate(divide="ignore"):
        d = np.where(mx != 0, np.float32(1) / iscale, np.float32(0)).astype(np.float32)
    bsums = q.astype(np.int32).reshape(-1, 16, 16).sum(axis=2).astype(np.int16)
    return d, q, bsums


def quantized_activation(fmt: str, x: np.ndarray) -> np.ndarray:
    """The values (float64) the kernels see for activation row x in format fmt."""
    if fmt == "F32":
        return x.astype(np.float64)
    if fmt == "F16":
        return x.astype(np.float16).astype(np.float64)
    if fmt == "BF16":
        return dequantize(quantize(x.astype(np.float32), GGMLQuantizationType.BF16), GGMLQuantizationType.BF16).astype(
            np.float64
        )
    if fmt in ("Q8_0", "Q8_1"):
        d, q, _ = quantize_q8_0(x)
        return (q.astype(np.float64) * d[:, None].astype(np.float64)).reshape(-1)
    d, q, _ = quantize_q8_k(x)
    return (q.astype(np.float64) * d[:, None].astype(np.float64)).reshape(-1)


def activation_bytes(fmt: str, x: np.ndarray) -> bytes:
    """The stored bytes of x in activation format fmt (block layouts of ggml-common.h)."""
    if fmt == "F32":
        return x.astype(np.float32).tobytes()
    if fmt == "F16":
        return x.astype(np.float16).tobytes()
    if fmt == "BF16":
        return quantize(x.astype(np.float32), GGMLQuantizationType.BF16).tobytes()
    if fmt == "Q8_0":
        d, q, _ = quantize_q8_0(x)
        return b"".join(np.float16(di).tobytes() + qi.tobytes() for di, qi in zip(d, q, strict=True))
    if fmt == "Q8_1":
        d, q, s = quantize_q8_0(x, with_sum=True)
        return b"".join(
            np.float16(di).tobytes() + np.float16(si).tobytes() + qi.tobytes()
            for di, qi, si in zip(d, q, s, strict=True)
        )
    d, q, bs = quantize_q8_k(x)
    return b"".join(np.float32(di).tobytes() + qi.tobytes() + bi.tobytes() for di, qi, bi in zip(d, q, bs, strict=True))


# -- error bounds of the quantized products -----------------------------------------------


def activation_error_bound(fmt: str, x: np.ndarray) -> np.ndarray:
    """Per element, a bound on |x~ - x| where x~ is what the kernel uses for x.

    Q8_0 / Q8_1 (blocks of 32): q = rne(x * 127/amax) is within 0.5 + 2*127*u of
    x*127/amax (two float32 roundings: 127/amax and the product), so |q*d - x| <=
    (0.5 + 300u) * d with d = amax/127. d is stored as f16: |f16(d) - d| <= max(d * 2^-11,
    2^-25) (normal / subnormal half), and |q| <= 127 multiplies that. Total:
    (0.5 + 300u) d + 127 max(d 2^-11, 2^-25).
    Q8_K (blocks of 256): d = 1/iscale is float32, the same argument gives
    (0.5 + 300u) |d| + 127 * |d| * 2u (the rounding of d = 1/iscale itself).
    F16: |f16(x) - x| <= max(|x| 2^-11, 2^-25).  BF16: |x| 2^-8.  F32: 0."""
    x = x.astype(np.float64)
    if fmt == "F32":
        return np.zeros_like(x)
    if fmt == "F16":
        return np.maximum(np.abs(x) * U16, HALF_MIN_SUB / 2)
    if fmt == "BF16":
        return np.abs(x) * U_BF16
    if fmt in ("Q8_0", "Q8_1"):
        amax = np.abs(x.reshape(-1, 32)).max(axis=1)
        d = amax / 127
        per_block = (0.5 + 300 * U) * d + 127 * np.maximum(d * U16, HALF_MIN_SUB / 2)
        return np.repeat(per_block, 32)
    amax = np.abs(x.reshape(-1, 256)).max(axis=1)
    d = amax / 127
    per_block = (0.5 + 300 * U) * d + 127 * d * 2 * U
    return np.repeat(per_block, 256)


def matmul_error_bound(t: str, data: np.ndarray, w: np.ndarray, x: np.ndarray, x_used: np.ndarray) -> np.ndarray:
    """A bound on |kernel(x) - W @ x| for one activation row x: [n_rows].

    E_act = sum_j |W_j| |x~_j - x_j|: the activations are quantized (activation_error_bound).
    For Q4_1 / Q5_1 the min term uses the block sum s = f16(d * sum q) instead of
    sum_j x~_j; |s - sum_j x~_j| <= 32*127*d*2^-11 + 32*127*|f16(d) - d| <= 32 amax 2^-10,
    times |m| per block: E_s.
    E_fp: float32 rounding. The kernel forms, per block b, scale products (a few
    roundings) times exact integer sums, converts to float and sums the nb block terms in
    float32 (any order): |error| <= (nb + 8) u sum_b |term_b|, where |term_b| <=
    sum_{j in b} (|A_j| + |B_j|) |x~_j| with A the scale part and B the min part of
    W_j = A_j + B_j. The reference W_j itself carries up to 3u (|A_j| + |B_j|) from
    gguf's float32 dequantization, covered by the +8. Float weights: plain float32 dot of
    K products, (K + 2) u sum |W_j x~_j|."""
    w_abs = np.abs(w)
    fmt = ACT_FORMAT[t]
    e_act = w_abs @ activation_error_bound(fmt, x)
    k = x.size
    if t in FLOAT_TYPES:
        return e_act + (k + 2) * U * (w_abs @ np.abs(x_used)) + 1e-30
    b = min_part(t, data)
    mag = w_abs + (2 * np.abs(b) if b.size else 0)
    nb = k // block_size(t)
    e_fp = (nb + 8) * U * (mag @ np.abs(x_used))
    e_s = 0.0
    if t in ("Q4_1", "Q5_1"):
        amax = np.abs(x.reshape(-1, 32)).max(axis=1).astype(np.float64)
        m_blocks = np.abs(b.reshape(b.shape[0], -1, 32)[:, :, 0])  # the block's min
        e_s = m_blocks @ (32 * amax * 2.0**-10)
    return e_act + e_fp + e_s + 1e-30


def exact_activation_error_bound(t: str, data: np.ndarray, w: np.ndarray, x_used: np.ndarray, x: np.ndarray):
    """A bound on |kernel(x) - W @ x~| when x~ (the quantized activation) is known exactly:
    only E_fp and, for Q4_1 / Q5_1, E_s remain (see matmul_error_bound)."""
    k = x_used.size
    w_abs = np.abs(w)
    if t in FLOAT_TYPES:
        return (k + 2) * U * (w_abs @ np.abs(x_used)) + 1e-30
    b = min_part(t, data)
    mag = w_abs + (2 * np.abs(b) if b.size else 0)
    e = (k // block_size(t) + 8) * U * (mag @ np.abs(x_used))
    if t in ("Q4_1", "Q5_1"):
        amax = np.abs(x.reshape(-1, 32)).max(axis=1).astype(np.float64)
        e = e + np.abs(b.reshape(b.shape[0], -1, 32)[:, :, 0]) @ (32 * amax * 2.0**-10)
    return e + 1e-30


# -- float64 references of the other ops --------------------------------------------------


def rms_norm(x, w, eps):
    x = x.astype(np.float64)
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * w if w is not None else y


def layer_norm(x, w, b, eps):
    x = x.astype(np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    y = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def rope_thetas(pos, n_dims, base, freq_scale, freq_factors, ext_factor, beta_fast, beta_slow, n_ctx_orig):
    """theta[t, i] and mscale of llama.cpp's rope_yarn, in float64: theta_extrap =
    pos * base^(-2i/n_dims) / ff_i; interpolated = freq_scale * theta_extrap; with YaRN
    (ext_factor != 0) mixed by ramp(i) * ext_factor between the two, where
    ramp(i) = 1 - clamp((i - low) / max(0.001, high - low), 0, 1) and low/high are the
    floor/ceil of n_dims * ln(n_ctx_orig / (beta * 2 pi)) / (2 ln base) for beta_fast /
    beta_slow, clamped to [0, n_dims - 1]; the magnitude is scaled by
    1 + 0.1 ln(1 / freq_scale)."""
    i = np.arange(n_dims // 2, dtype=np.float64)
    inv = base ** (-2.0 * i / n_dims)
    ff = np.ones_like(i) if freq_factors is None else np.asarray(freq_factors[: n_dims // 2], np.float64)
    extrap = pos.astype(np.float64)[:, None] * inv[None, :] / ff[None, :]
    interp = freq_scale * extrap
    mscale = 1.0
    if ext_factor != 0.0:

        def corr(beta):
            return n_dims * np.log(n_ctx_orig / (beta * 2 * np.pi)) / (2 * np.log(base))

        low = max(0.0, np.floor(corr(beta_fast)))
        high = min(n_dims - 1.0, np.ceil(corr(beta_slow)))
        ramp = 1 - np.clip((i - low) / max(0.001, high - low), 0, 1)
        mix = ramp * ext_factor
        theta = interp * (1 - mix) + extrap * mix
        mscale = 1.0 + 0.1 * np.log(1.0 / freq_scale)
    else:
        theta = interp
    return theta, mscale


def rope(x, pos, spec):
    """Rotate pairs (i, i+1) (normal) or (i, i + n_dims/2) (NeoX) of the first n_dims."""
    theta, mscale = rope_thetas(
        pos, spec.n_dims, spec.base, spec.freq_scale, spec.freq_factors, spec.ext_factor, spec.beta_fast,
        spec.beta_slow, spec.n_ctx_orig,
    )  # fmt: skip
    c = np.cos(theta)[:, None, :] * mscale * spec.attn_factor
    s = np.sin(theta)[:, None, :] * mscale * spec.attn_factor
    x = x.astype(np.float64)
    y = x.copy()
    n = spec.n_dims
    if spec.neox:
        x0, x1 = x[..., : n // 2], x[..., n // 2 : n]
        y[..., : n // 2] = x0 * c - x1 * s
        y[..., n // 2 : n] = x0 * s + x1 * c
    else:
        x0, x1 = x[..., 0:n:2], x[..., 1:n:2]
        y[..., 0:n:2] = x0 * c - x1 * s
        y[..., 1:n:2] = x0 * s + x1 * c
    return y, theta


def attention(q, k_cells, v_cells, cell_pos, q_pos, scale, window, softcap, group):
    """q [n, H, dk]; k_cells [cells, Hkv, dk]; v_cells [cells, Hkv, dv] (float64)."""
    n, n_heads, _ = q.shape
    out = np.zeros((n, n_heads, v_cells.shape[2]))
    for t in range(n):
        p = q_pos[t]
        vis = (cell_pos >= 0) & (cell_pos <= p)
        if window:
            vis &= p - cell_pos < window
        idx = np.nonzero(vis)[0]
        for h in range(n_heads):
            g = h // group
            s = k_cells[idx, g] @ q[t, h] * scale
            if softcap:
                s = softcap * np.tanh(s / softcap)
            e = np.exp(s - s.max())
            out[t, h] = (e / e.sum()) @ v_cells[idx, g]
    return out


def gelu_tanh(x):
    x = x.astype(np.float64)
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * x * (1 + 0.044715 * x * x)))


def gelu_erf(x):
    from math import erf

    x = x.astype(np.float64)
    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


def silu(x):
    x = x.astype(np.float64)
    return x / (1 + np.exp(-x))
