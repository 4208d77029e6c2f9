"""The ops of `cera.graph.ops` as MLX array programs (lazy: nothing runs until the step's one
`mx.eval`). Each follows the op table's numpy reference; where MLX's arithmetic differs
from it (float32 instead of float64 sums, f16 products for f16 weights) the conformance
suite's tolerances say by how much (tests/backend_metal/test_conformance.py)."""

from __future__ import annotations

import math

import mlx.core as mx

from .blocks import GROUP

F32 = mx.float32


# -- weights ---------------------------------------------------------------------------------


def linear(x, w, bias=None, per_row=False):
    """``x @ W.T (+ bias)`` for a MetalWeight ``w`` (numpy shape [out, in]). ``per_row``:
    one product per row of ``x``, so that each row gets the arithmetic of a one-row step
    whatever else is in the batch (`cera.graph.builder.Layout.row_exact`: a decode batch's
    sequences must get the tokens they get alone, and MLX chooses its product kernels by
    the row count)."""
    if per_row and x.ndim == 2 and x.shape[0] > 1:
        return mx.concatenate([linear(x[i : i + 1], w, bias) for i in range(x.shape[0])], axis=0)
    if w.quant is not None:
        q, s, b, bits = w.quant
        y = mx.quantized_matmul(x, q, s, b, transpose=True, group_size=GROUP, bits=bits)
    elif w.dense.dtype == F32:
        y = x @ w.dense.T
    else:  # f16 / bf16 weights: activations rounded to the weight's type (llama.cpp's vec_dot_type)
        y = (x.astype(w.dense.dtype) @ w.dense.T).astype(F32)
    if bias is not None:
        y = y + bias.values().reshape(-1)
    return y


def embedding(table, ids):
    if table.quant is not None:
        q, s, b, bits = table.quant
        return mx.dequantize(q[ids], s[ids], b[ids], group_size=GROUP, bits=bits).astype(F32)
    return table.dense[ids].astype(F32)


def operand(a, b):
    """A tensor or a weight as the second operand of an elementwise op (reference
    `_operand_shape`: a weight is one row broadcast over ``a``'s rows)."""
    if not isinstance(b, mx.array):
        b = b.values()
    if b.ndim <= a.ndim:
        try:
            if tuple(mx.broadcast_shapes(a.shape, b.shape)) == tuple(a.shape):
                return b
        except ValueError:
            pass
    return b.reshape((1,) * (a.ndim - 1) + (b.size,))


# -- elementwise and rows ----------------------------------------------------------------------


def _vector(x, w):
    return None if w is None else operand(x, w).reshape(-1)


def rms_norm(x, w=None, eps=1e-6):
    """MLX's fused kernel (one dispatch a norm on Metal)."""
    return mx.fast.rms_norm(x, _vector(x, w), eps)


def layer_norm(x, w=None, b=None, eps=1e-5):
    return mx.fast.layer_norm(x, _vector(x, w), _vector(x, b), eps)


SQRT_2_PI = math.sqrt(2 / math.pi)


def activation(kind, x):
    if kind == "silu":
        return x * mx.sigmoid(x)
    if kind == "gelu":
        return 0.5 * x * (1 + mx.tanh(SQRT_2_PI * x * (1 + 0.044715 * x * x)))
    if kind == "gelu_erf":
        return 0.5 * x * (1 + mx.erf(x / math.sqrt(2)))
    if kind == "relu":
        return mx.maximum(x, 0.0)
    raise ValueError(kind)


def glu(kind, gate, up):
    return activation({"swiglu": "silu", "geglu": "gelu"}[kind], gate) * up


def top_k(x, k):
    """Indices of the k largest values, largest first (on the device)."""
    part = mx.argpartition(-x, kth=k - 1, axis=-1)[..., :k]
    vals = mx.take_along_axis(x, part, axis=-1)
    order = mx.argsort(-vals, axis=-1)
    return mx.take_along_axis(part, order, axis=-1).astype(mx.int32)


# -- rotary embedding ---------------------------------------------------------------------------


def rope(x, cos, sin, spec):
    """``x [n, heads, dim]`` rotated by per-row tables ``cos``/``sin`` ``[n, n_dims/2]``
    (made on the host in float64 from the positions: `cera.graph.ops.rope_thetas`)."""
    n = spec.n_dims
    c, s = cos[:, None, :], sin[:, None, :]
    if spec.neox:
        x0, x1 = x[..., : n // 2], x[..., n // 2 : n]
        parts = [x0 * c - x1 * s, x0 * s + x1 * c]
    else:
        x0, x1 = x[..., 0:n:2], x[..., 1:n:2]
        y0, y1 = x0 * c - x1 * s, x0 * s + x1 * c
        parts = [mx.stack([y0, y1], axis=-1).reshape(x0.shape[:-1] + (n,))]
    if n < x.shape[-1]:
        parts.append(x[..., n:])
    return mx.concatenate(parts, axis=-1)


# -- attention ----------------------------------------------------------------------------------


def put_cells(cache, cells, rows):
    """A cache [kv heads, cells, dim] with ``rows`` [n, kv heads, dim] at ``cells`` [n]
    (rounded to the cache's type); a new array (arrays given to a program stay as they were)."""
    new = rows.transpose(1, 0, 2).astype(cache.dtype)
    idx = mx.broadcast_to(cells[None, :, None], new.shape)
    return mx.put_along_axis(cache, idx, new, axis=1)


def attend(q, k, v, visible, spec):
    """q [n, H, dk] (f32), k [Hkv, m, dk], v [Hkv, m, dv] (f32 or f16), visible [n, m]
    bool -> [n, H * dv] f32. An f16 cache is read in f16 (the query rounded to it), as
    llama.cpp's flash attention reads one."""
    n, H, _ = q.shape
    hkv = k.shape[0]
    dt = k.dtype
    qh = q.transpose(1, 0, 2).astype(dt)[None]  # [1, H, n, dk]
    kk, vv = k[None], v[None]
    if spec.softcap:
        group = H // hkv
        qg = qh.reshape(hkv, group, n, -1).astype(F32)
        s = (qg @ kk[0][:, None].swapaxes(-1, -2).astype(F32)) * spec.scale
        s = spec.softcap * mx.tanh(s / spec.softcap)
        s = mx.where(visible, s, -mx.inf)
        p = mx.softmax(s, axis=-1, precise=True)
        out = (p @ vv[0][:, None].astype(F32)).reshape(1, H, n, -1)
    else:
        out = mx.fast.scaled_dot_product_attention(qh, kk, vv, scale=spec.scale, mask=visible)
    return out[0].transpose(1, 0, 2).reshape(n, -1).astype(F32)


def visible_cells(qpos, cpos, spec, causal=True):
    """qpos [n], cpos [m] int32 -> [n, m] bool (cera.graph.ops.attention's rule; cpos -1: empty)."""
    vis = cpos[None, :] >= 0
    if causal:
        vis = vis & (cpos[None, :] <= qpos[:, None])
    if spec.window:
        vis = vis & (qpos[:, None] - cpos[None, :] < spec.window)
    return vis


def full_visible(pos, spec):
    n = pos.shape[0]
    vis = mx.ones((n, n), dtype=mx.bool_)
    if spec.causal:
        vis = pos[None, :] <= pos[:, None]
    if spec.window:
        vis = vis & (mx.abs(pos[:, None] - pos[None, :]) < spec.window)
    return vis


# -- recurrent mixers ---------------------------------------------------------------------------


def conv1d_causal(x, w, carried):
    """x [n, C], w [C, kernel] (f32), carried [kernel - 1, C] -> (y, new carried)."""
    d = w.shape[1]
    n = x.shape[0]
    xx = mx.concatenate([carried, x], axis=0)
    y = xx[0:n] * w[:, 0]
    for j in range(1, d):
        y = y + xx[j : j + n] * w[:, j]
    return y, xx[n:]


def ssm_scan(x, dt, A, B, C, st):
    """Mamba-2's scan over the rows of one sequence; st [H, hd, ds] -> (y [n, H, hd], st)."""
    n, H, _ = x.shape
    hpg = H // B.shape[1]
    d = mx.where(dt <= 20.0, mx.log1p(mx.exp(mx.minimum(dt, 20.0))), dt)  # softplus
    ys = []
    for t in range(n):
        Bt = mx.repeat(B[t], hpg, axis=0) if hpg > 1 else B[t]  # [H, ds]
        Ct = mx.repeat(C[t], hpg, axis=0) if hpg > 1 else C[t]
        decay = mx.exp(d[t] * A)[:, None, None]
        st = st * decay + (d[t][:, None] * x[t])[:, :, None] * Bt[:, None, :]
        ys.append((st @ Ct[:, :, None])[..., 0])
    return mx.stack(ys), st


def conv1d(x, w, bias=None, stride=1, padding=0):
    """Whisper's front end: x [frames, in], w a MetalWeight of numpy shape [out, in, kernel]."""
    kernel = w.values().transpose(0, 2, 1)  # [out, kernel, in], as mx.conv1d takes it
    y = mx.conv1d(x[None], kernel, stride=stride, padding=padding)[0]
    if bias is not None:
        y = y + bias.values().reshape(-1)
    return y


# -- experts -------------------------------------------------------------------------------------


def _experts(x, w, idx):
    """x [n, k or 1, 1, in], idx [n, k] -> each token's chosen experts' products [n, k, 1, out]."""
    if w.quant is not None:
        q, s, b, bits = w.quant
        return mx.gather_qmm(x, q, s, b, rhs_indices=idx, transpose=True, group_size=GROUP, bits=bits)
    wd = w.dense
    if wd.dtype != F32:
        return mx.gather_mm(x.astype(wd.dtype), wd.swapaxes(-1, -2), rhs_indices=idx).astype(F32)
    return mx.gather_mm(x, wd.swapaxes(-1, -2), rhs_indices=idx)


def moe(x, router, gate, up, down, selection_bias=None, *, k, gating, norm_topk, weight_scale, activation_kind):
    logits = linear(x, router)
    probs = mx.softmax(logits, axis=-1, precise=True) if gating == "softmax" else mx.sigmoid(logits)
    select = probs if selection_bias is None else probs + selection_bias.values().reshape(-1)
    top = mx.argsort(-select, axis=-1)[:, :k]
    weights = mx.take_along_axis(probs, top, axis=-1)
    if norm_topk:
        weights = weights / mx.sum(weights, axis=-1, keepdims=True)
    if weight_scale is not None:
        weights = weights * weight_scale
    xe = x[:, None, None, :]
    h = activation(activation_kind, _experts(xe, gate, top)) * _experts(xe, up, top)  # [n, k, 1, ff]
    y = _experts(h, down, top)[:, :, 0, :]  # [n, k, dim]
    return mx.sum(y * weights[:, :, None], axis=1)
