"""Blocks that transformer families share, written with the backend op vocabulary.

A family module reads its config, loads its per-layer weights with `AttentionWeights` and
`FeedForwardWeights`, and chains these blocks in its own `forward`, so the family file
shows its architecture (norm placement, residuals, scalings) and nothing else.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from .backend import AttentionSpec, Backend, RopeSpec, Weight
from .errors import ModelConfigError
from .hparams import HParams


def tensor_name(layer: int, name: str, kind: str = "weight") -> str:
    return f"blk.{layer}.{name}.{kind}"


@attrs.define
class AttentionWeights:
    """One attention layer's tensors (GGUF names `blk.N.attn_*`); absent ones are None."""

    q: Weight | None
    k: Weight | None
    v: Weight | None
    o: Weight
    qkv: Weight | None = None  # fused projection (phi3)
    q_bias: Weight | None = None
    k_bias: Weight | None = None
    v_bias: Weight | None = None
    o_bias: Weight | None = None
    qkv_bias: Weight | None = None
    q_norm: Weight | None = None
    k_norm: Weight | None = None

    @classmethod
    def load(cls, weights, layer: int) -> AttentionWeights:
        def opt(name, kind="weight"):
            return weights.get(tensor_name(layer, name, kind))

        fused = opt("attn_qkv")
        if fused is None:
            q, k, v = (weights[tensor_name(layer, n)] for n in ("attn_q", "attn_k", "attn_v"))
        else:
            q = k = v = None
        return cls(
            q=q,
            k=k,
            v=v,
            o=weights[tensor_name(layer, "attn_output")],
            qkv=fused,
            q_bias=opt("attn_q", "bias"),
            k_bias=opt("attn_k", "bias"),
            v_bias=opt("attn_v", "bias"),
            o_bias=opt("attn_output", "bias"),
            qkv_bias=opt("attn_qkv", "bias"),
            q_norm=opt("attn_q_norm"),
            k_norm=opt("attn_k_norm"),
        )


@attrs.define
class FeedForwardWeights:
    """A gated feed-forward layer: down(act(gate(x)) * up(x)); `gate_up` when fused (phi3)."""

    gate: Weight | None
    up: Weight
    down: Weight
    gate_up: bool = False  # `up` holds [gate; up] stacked

    @classmethod
    def load(cls, weights, layer: int) -> FeedForwardWeights:
        gate = weights.get(tensor_name(layer, "ffn_gate"))
        return cls(
            gate=gate,
            up=weights[tensor_name(layer, "ffn_up")],
            down=weights[tensor_name(layer, "ffn_down")],
            gate_up=gate is None,
        )


@attrs.frozen
class AttentionShape:
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int


def self_attention(
    ops: Backend,
    x,
    w: AttentionWeights,
    state,
    layer: int,
    positions: np.ndarray,
    shape: AttentionShape,
    rope: RopeSpec | None,
    spec: AttentionSpec,
    eps: float = 1e-6,
    qk_norm: str = "head",
    q_scale: float | None = None,
):
    """Project to Q/K/V, optionally normalize Q and K, rotate, attend, project out.

    ``qk_norm``: "head" normalizes each head over its own dimension (qwen3, gemma3),
    "full" normalizes the concatenated heads before splitting (olmo2).
    ``q_scale``: multiply the rotated queries by it before attention (gemma's graph in
    llama.cpp does this instead of scaling the attention logits; the difference shows
    where the query is rounded to f16 for an f16 cache). ``spec.scale`` then should be 1.
    """
    n = x.shape[0]
    H, Hkv, dk, dv = shape.n_head, shape.n_head_kv, shape.head_dim_k, shape.head_dim_v
    if w.qkv is not None:
        qkv = ops.linear(x, w.qkv, w.qkv_bias)
        q, k, v = ops.split(qkv, (H * dk, Hkv * dk, Hkv * dv))
    else:
        q = ops.linear(x, w.q, w.q_bias)
        k = ops.linear(x, w.k, w.k_bias)
        v = ops.linear(x, w.v, w.v_bias)
    if qk_norm == "full":
        if w.q_norm is not None:
            q = ops.rms_norm(q, w.q_norm, eps)
        if w.k_norm is not None:
            k = ops.rms_norm(k, w.k_norm, eps)
    q = ops.reshape(q, (n, H, dk))
    k = ops.reshape(k, (n, Hkv, dk))
    v = ops.reshape(v, (n, Hkv, dv))
    if qk_norm == "head":
        if w.q_norm is not None:
            q = ops.rms_norm(q, w.q_norm, eps)
        if w.k_norm is not None:
            k = ops.rms_norm(k, w.k_norm, eps)
    if rope is not None:
        q = ops.rope(q, positions, rope)
        k = ops.rope(k, positions, rope)
    if q_scale is not None:
        q = ops.scale(q, q_scale)
    out = ops.attention(q, k, v, state, layer, positions, spec)
    return ops.linear(out, w.o, w.o_bias)


def feed_forward(ops: Backend, x, w: FeedForwardWeights, act: str = "swiglu"):
    """``down(act(gate x) * (up x))``; act is "swiglu" or "geglu"."""
    if w.gate_up:
        both = ops.linear(x, w.up)
        half = both.shape[-1] // 2
        gate, up = ops.split(both, (half, half))
    else:
        gate = ops.linear(x, w.gate)
        up = ops.linear(x, w.up)
    return ops.linear(ops.glu(act, gate, up), w.down)


def output_rows(ops: Backend, x, output: str):
    """Keep the rows whose logits are wanted: all, the last, or none."""
    if output == "all":
        return x
    if output == "last":
        return ops.rows(x, slice(-1, None))
    if output == "none":
        return None
    raise ValueError(f"output must be 'all', 'last' or 'none', not {output!r}")


# -- RoPE from metadata --------------------------------------------------------------

ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")


def read_rope(
    hp: HParams,
    n_rot: int,
    neox: bool,
    base: float | None = None,
    freq_scale: float | None = None,
    freq_factors: np.ndarray | None = None,
) -> RopeSpec:
    """The RoPE of a model's full-attention layers, as llama.cpp derives it from the keys.

    ``base`` / ``freq_scale`` override the file's values (sliding-window layers of gemma
    use their own base and no scaling).
    """
    train_base = hp.opt("rope.freq_base", 10000.0, float)
    scaling = hp.opt("rope.scaling.type", "linear", str)
    if scaling not in ROPE_SCALING_TYPES:
        raise ModelConfigError(
            f"{hp.gguf.path}: {hp.key('rope.scaling.type')} is {scaling!r}; cera knows {', '.join(ROPE_SCALING_TYPES)}"
        )
    factor = hp.opt("rope.scaling.factor", 0.0, float)
    if factor == 0.0:
        factor = hp.opt("rope.scale_linear", 0.0, float)
    scale_train = 1.0 if factor == 0.0 else 1.0 / factor
    if scaling == "none":
        scale_train = 1.0
    attn_factor_train = hp.opt("rope.scaling.attn_factor", 1.0, float)
    n_ctx_orig = hp.opt("rope.scaling.original_context_length", hp.opt("context_length", 0, int), int)
    yarn_log_mul = hp.opt("rope.scaling.yarn_log_multiplier", 0.0, float)
    fs = scale_train if freq_scale is None else freq_scale
    ext_factor = 1.0 if scaling == "yarn" else 0.0
    attn_factor = 1.0
    if ext_factor != 0.0 and fs != 1.0:
        f = 1.0 / fs
        mscale = lambda s, m: 1.0 if s <= 1.0 else 0.1 * m * math.log(s) + 1.0  # noqa: E731
        if yarn_log_mul != 0.0:
            attn_factor = mscale(f, 1.0) / mscale(f, yarn_log_mul)
        else:
            attn_factor = mscale(f, 1.0)
        # ggml's rope multiplies by (1 + 0.1 ln f) itself when ext_factor != 0; llama.cpp cancels it here.
        attn_factor *= 1.0 / (1.0 + 0.1 * math.log(f))
    attn_factor *= attn_factor_train
    return RopeSpec(
        n_dims=n_rot,
        base=train_base if base is None else base,
        neox=neox,
        freq_scale=fs,
        freq_factors=None if freq_factors is None else tuple(float(v) for v in np.asarray(freq_factors).ravel()),
        ext_factor=ext_factor,
        attn_factor=attn_factor,
        beta_fast=hp.opt("rope.scaling.yarn_beta_fast", 32.0, float),
        beta_slow=hp.opt("rope.scaling.yarn_beta_slow", 1.0, float),
        n_ctx_orig=n_ctx_orig,
    )


def float_tensor(gguf, name: str) -> np.ndarray | None:
    """A small float tensor (e.g. rope_freqs) read to the host, or None if absent."""
    if name not in gguf.tensors:
        return None
    data = gguf.tensor_data(name)
    if data.dtype not in (np.float32, np.float16):
        raise ModelConfigError(f"{gguf.path}: tensor {name!r} should be F32 or F16, is {gguf.tensors[name].type_name}")
    return np.asarray(data, dtype=np.float32)
