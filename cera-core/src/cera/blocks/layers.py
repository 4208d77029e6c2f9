"""Blocks that transformer families share, written with the op vocabulary on a graph.

A family loads its per-layer weights with `AttentionWeights` and `FeedForwardWeights`
(GGUF tensor names from the `gguf` package's table), and chains these blocks, so a family
file shows its architecture (norm placement, residuals, scalings) and nothing else.
"""

from __future__ import annotations

import math

import attrs
import numpy as np
from gguf.constants import MODEL_TENSOR, TENSOR_NAMES

from ..errors import ModelConfigError
from ..graph.builder import GraphBuilder, Tensor, WeightRef
from .hparams import HParams
from ..graph.ops import AttentionSpec, RopeSpec
from ..state import StateRef


def tensor_name(tensor: MODEL_TENSOR, layer: int | None = None, kind: str = "weight") -> str:
    """The GGUF name of a tensor, from gguf's table: ``blk.3.attn_q.weight``."""
    base = TENSOR_NAMES[tensor]
    if layer is not None:
        base = base.format(bid=layer)
    return f"{base}.{kind}" if kind else base


T = MODEL_TENSOR


@attrs.define
class AttentionWeights:
    """One attention layer's tensors (`blk.N.attn_*`); absent ones are None."""

    q: WeightRef | None
    k: WeightRef | None
    v: WeightRef | None
    o: WeightRef
    qkv: WeightRef | None = None  # fused projection (phi3)
    q_bias: WeightRef | None = None
    k_bias: WeightRef | None = None
    v_bias: WeightRef | None = None
    o_bias: WeightRef | None = None
    qkv_bias: WeightRef | None = None
    q_norm: WeightRef | None = None
    k_norm: WeightRef | None = None

    @classmethod
    def load(cls, weights, layer: int) -> AttentionWeights:
        def opt(t, kind="weight"):
            return weights.get(tensor_name(t, layer, kind))

        fused = opt(T.ATTN_QKV)
        if fused is None:
            q, k, v = (weights[tensor_name(t, layer)] for t in (T.ATTN_Q, T.ATTN_K, T.ATTN_V))
        else:
            q = k = v = None
        return cls(
            q=q,
            k=k,
            v=v,
            o=weights[tensor_name(T.ATTN_OUT, layer)],
            qkv=fused,
            q_bias=opt(T.ATTN_Q, "bias"),
            k_bias=opt(T.ATTN_K, "bias"),
            v_bias=opt(T.ATTN_V, "bias"),
            o_bias=opt(T.ATTN_OUT, "bias"),
            qkv_bias=opt(T.ATTN_QKV, "bias"),
            q_norm=opt(T.ATTN_Q_NORM),
            k_norm=opt(T.ATTN_K_NORM),
        )


@attrs.define
class FeedForwardWeights:
    """A gated feed-forward layer: down(act(gate(x)) * up(x)); `gate_up` when fused (phi3)."""

    gate: WeightRef | None
    up: WeightRef
    down: WeightRef
    gate_up: bool = False  # `up` holds [gate; up] stacked

    @classmethod
    def load(cls, weights, layer: int) -> FeedForwardWeights:
        gate = weights.get(tensor_name(T.FFN_GATE, layer))
        return cls(
            gate=gate,
            up=weights[tensor_name(T.FFN_UP, layer)],
            down=weights[tensor_name(T.FFN_DOWN, layer)],
            gate_up=gate is None,
        )


@attrs.frozen
class PlainFeedForwardWeights:
    """An ungated feed-forward layer with optional biases: down(act(up(x) + up_b)) + down_b
    (starcoder2, phi2)."""

    up: WeightRef
    up_b: WeightRef | None
    down: WeightRef
    down_b: WeightRef | None

    @classmethod
    def load(cls, weights, layer: int) -> PlainFeedForwardWeights:
        return cls(
            up=weights[tensor_name(T.FFN_UP, layer)], up_b=weights.get(tensor_name(T.FFN_UP, layer, "bias")),
            down=weights[tensor_name(T.FFN_DOWN, layer)], down_b=weights.get(tensor_name(T.FFN_DOWN, layer, "bias")),
        )  # fmt: skip

    def apply(self, g, h, activation: str = "gelu"):
        return g.linear(g.unary(activation, g.linear(h, self.up, self.up_b)), self.down, self.down_b)


@attrs.frozen
class AttentionShape:
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int


def self_attention(
    g: GraphBuilder,
    x: Tensor,
    w: AttentionWeights,
    kv: StateRef,
    shape: AttentionShape,
    rope: RopeSpec | None,
    spec: AttentionSpec,
    eps: float = 1e-6,
    qk_norm: str = "head",
    q_scale: float | None = None,
    q_factor: Tensor | None = None,
) -> Tensor:
    """Project to Q/K/V, optionally normalize Q and K, rotate, attend (storing K/V in the
    layer's cache ``kv``), project out.

    ``qk_norm``: "head" normalizes each head over its own dimension (qwen3, gemma3),
    "full" normalizes the concatenated heads before splitting (olmo2).
    ``q_scale``: multiply the rotated queries by it before attention (gemma's graph in
    llama.cpp does this instead of scaling the attention logits; the difference shows
    where the query is rounded to f16 for an f16 cache). ``spec.scale`` then should be 1.
    ``q_factor``: a tensor of the queries' shape ``[n, heads, head_dim]`` multiplying the
    rotated queries elementwise (mistral3's attention temperature, one value per row).
    """
    n = x.shape[0]
    H, Hkv, dk, dv = shape.n_head, shape.n_head_kv, shape.head_dim_k, shape.head_dim_v
    if w.qkv is not None:
        qkv = g.linear(x, w.qkv, w.qkv_bias)
        q, k, v = g.split(qkv, (H * dk, Hkv * dk, Hkv * dv))
    else:
        q = g.linear(x, w.q, w.q_bias)
        k = g.linear(x, w.k, w.k_bias)
        v = g.linear(x, w.v, w.v_bias)
    if qk_norm == "full":
        if w.q_norm is not None:
            q = g.rms_norm(q, w.q_norm, eps)
        if w.k_norm is not None:
            k = g.rms_norm(k, w.k_norm, eps)
    q = g.reshape(q, (n, H, dk))
    k = g.reshape(k, (n, Hkv, dk))
    v = g.reshape(v, (n, Hkv, dv))
    if qk_norm == "head":
        if w.q_norm is not None:
            q = g.rms_norm(q, w.q_norm, eps)
        if w.k_norm is not None:
            k = g.rms_norm(k, w.k_norm, eps)
    if rope is not None:
        q = g.rope(q, g.positions, rope)
        k = g.rope(k, g.positions, rope)
    if q_factor is not None:
        q = g.mul(q, q_factor)
    if q_scale is not None:
        q = g.scale(q, q_scale)
    out = g.attention(q, k, v, kv, spec)
    return g.linear(out, w.o, w.o_bias)


@attrs.define
class ShortConvWeights:
    """A short-convolution mixer (LFM2): `blk.N.shortconv.{in_proj,conv,out_proj}`."""

    in_proj: WeightRef
    conv: WeightRef
    out_proj: WeightRef

    @classmethod
    def load(cls, weights, layer: int) -> ShortConvWeights:
        return cls(
            in_proj=weights[tensor_name(T.SHORTCONV_INPROJ, layer)],
            conv=weights[tensor_name(T.SHORTCONV_CONV, layer)],
            out_proj=weights[tensor_name(T.SHORTCONV_OUTPROJ, layer)],
        )

    @property
    def channels(self) -> int:
        return self.conv.shape[1]  # GGML [kernel, channels]

    @property
    def kernel(self) -> int:
        return self.conv.shape[0]


def short_conv(g: GraphBuilder, x: Tensor, w: ShortConvWeights, conv: StateRef) -> Tensor:
    """LFM2's gated short convolution: B, C, h = split(in_proj x); y = C * conv(B * h),
    the convolution causal over each sequence's tokens with its last inputs carried in
    state ``conv``; then out_proj."""
    d = w.channels
    b, c, h = g.split(g.linear(x, w.in_proj), (d, d, d))
    y = g.conv1d_causal(g.mul(b, h), w.conv, conv)
    return g.linear(g.mul(c, y), w.out_proj)


def feed_forward(g: GraphBuilder, x: Tensor, w: FeedForwardWeights, act: str = "swiglu") -> Tensor:
    """``down(act(gate x) * (up x))``; act is "swiglu" or "geglu"."""
    if w.gate_up:
        both = g.linear(x, w.up)
        half = both.shape[-1] // 2
        gate, up = g.split(both, (half, half))
    else:
        gate = g.linear(x, w.gate)
        up = g.linear(x, w.up)
    return g.linear(g.glu(act, gate, up), w.down)


def sliding_window_layers(n_layer: int, pattern: int) -> tuple[bool, ...]:
    """llama.cpp's set_swa_pattern: in each group of ``pattern`` layers all but the last
    slide (pattern 0: all slide)."""
    return tuple(pattern == 0 or (i % pattern) < pattern - 1 for i in range(n_layer))


# -- RoPE from metadata --------------------------------------------------------------------

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
    if not train_base > 0:
        raise ModelConfigError(f"{hp.gguf.path}: {hp.key('rope.freq_base')} is {train_base}; it must be positive")
    factor = hp.opt("rope.scaling.factor", 0.0, float)
    if factor == 0.0:
        factor = hp.opt("rope.scale_linear", 0.0, float)
    if factor < 0:
        raise ModelConfigError(f"{hp.gguf.path}: {hp.key('rope.scaling.factor')} is {factor}; it must not be negative")
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
