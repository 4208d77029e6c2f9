"""Ops of the mixers that go beyond one attention per head: products per head (multi-head
latent attention), a sigmoid gate, and Kimi delta attention's recurrence.

Registered into `cera.graph.ops.OPS` when that module is imported (it imports this one
last); the conventions are that module's.
"""

from __future__ import annotations

import math

import numpy as np

from .ops import _f64, _need, _shape_binary, op


def _shape_head_linear(x, w, **_):
    _need(len(x) == 3, f"head_linear expects [n, heads, in], got {x}")
    _need(len(w) == 3 and w[0] == x[2] and w[2] == x[1],
          f"head_linear: a weight of GGML shape {w} for inputs {x} (needs [in, out, heads])")  # fmt: skip
    return (x[0], x[1], w[1]), "f32"


@op("head_linear", "x:tensor w:weight", shape=_shape_head_linear)
def head_linear(ctx, x, w):
    """A product per head: ``y[t, h] = W[h] x[t, h]``, x ``[n, heads, in]``, w of GGML shape
    ``[in, out, heads]`` (numpy ``[heads, out, in]``; ggml_mul_mat over the head axis, as
    multi-head latent attention's absorbed key and value projections ``attn_k_b``/``attn_v_b``)."""
    return np.einsum("thi,hoi->tho", _f64(x), _f64(w)).astype(np.float32)


@op("sigmoid_gate", "x:tensor g:tensor", shape=_shape_binary)
def sigmoid_gate(ctx, x, g):
    """``x * sigmoid(g)``, g of x's shape or broadcast over it (``[n, heads, 1]``: one gate
    per head)."""
    g = _f64(g)
    return (_f64(x) * (1.0 / (1.0 + np.exp(-g)))).astype(np.float32)


def _shape_kda(q, k, v, f, b, a, state, **_):
    _need(len(q) == 3 and tuple(k) == tuple(q) and tuple(v) == tuple(q) and tuple(f) == tuple(q),
          f"kda: q {q}, k {k}, v {v} and f {f} must be one shape [n, heads, dim]")  # fmt: skip
    _need(tuple(b) == tuple(q[:2]), f"kda: beta {b} for q {q} (needs [n, heads])")
    _need(math.prod(a) == q[1], f"kda: A has {math.prod(a)} values for {q[1]} heads")
    return tuple(q), "f32"


@op("kda", "q:tensor k:tensor v:tensor f:tensor b:tensor a:weight state:state", "eps lower_bound", state_kind="ssm",
    writes_state=True, shape=_shape_kda)
def kda(ctx, q, k, v, f, b, a, state, *, eps, lower_bound):
    """Kimi delta attention (Bailing MoE V3's linear layers), token by token within each
    sequence: the gated delta rule with a decay per key channel. q and k are L2-normalised
    (``x / sqrt(sum x^2 + eps)``, llama.cpp's build_gdn_l2_norm); the log decay is
    ``g = lower_bound * sigmoid(A_h f)`` (``lower_bound`` < 0), ``beta = sigmoid(b)``; per
    head, with the state M ``[dim_v, dim_k]`` (an `SSMState` of ``[heads, dim, dim]``)::

        M = M * exp(g)[None, :];  d = (v - M k) * beta;  M = M + d k^T;  y = (M q) / sqrt(dim)

    (ggml_gated_delta_net with a per-channel gate)."""
    q, k, v, f, b = _f64(q), _f64(k), _f64(v), _f64(f), _f64(b)
    q = q / np.sqrt((q * q).sum(-1, keepdims=True) + eps)
    k = k / np.sqrt((k * k).sum(-1, keepdims=True) + eps)
    A = _f64(a).reshape(-1)
    g = lower_bound / (1.0 + np.exp(-(f * A[None, :, None])))
    beta = 1.0 / (1.0 + np.exp(-b))
    H, S = q.shape[1], q.shape[2]
    scale = 1.0 / math.sqrt(S)
    y = np.zeros_like(v)
    for s, (r0, n) in enumerate(ctx.groups):
        st = ctx.state.ssm(state, int(ctx.slots[s]))
        M = st.astype(np.float64)
        for t in range(r0, r0 + n):
            for h in range(H):
                M[h] *= np.exp(g[t, h])[None, :]
                d = (v[t, h] - M[h] @ k[t, h]) * beta[t, h]
                M[h] += d[:, None] * k[t, h][None, :]
                y[t, h] = (M[h] @ q[t, h]) * scale
        st[...] = M
    return y.astype(np.float32)
