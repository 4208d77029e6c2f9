"""The llama-shaped decoder that most families are: config from GGUF, layers, forward.

Per layer, with the norm placement the family sets::

    pre (llama):          x = x + attn(norm(x));          x = x + ffn(norm(x))
    sandwich (gemma2/3):  x = x + norm(attn(norm(x)));    x = x + norm(ffn(norm(x)))
    post (olmo2):         x = x + norm(attn(x));          x = x + norm(ffn(x))

then a final RMS norm and the output head (tied to the token embedding when the file has
no ``output.weight``). Variations are config fields, read from the file by the family:
RoPE pairing and scaling, sliding-window layers (their own RoPE, and caches sized to the
window), QK-norm, attention and final soft-capping, the query pre-scale of gemma, and
granite's embedding, residual and logit multipliers. A family that differs by a flag is
a subclass with a few lines of `read_config`.
"""

from __future__ import annotations

import math

import attrs
import numpy as np
from gguf.constants import MODEL_TENSOR
from gguf.constants import Keys as K

from ..errors import ModelConfigError, UnsupportedOperation
from ..graph.builder import GraphBuilder, Tensor
from .hparams import HParams
from .layers import (
    AttentionShape,
    AttentionWeights,
    FeedForwardWeights,
    ShortConvWeights,
    feed_forward,
    read_rope,
    self_attention,
    short_conv,
    sliding_window_layers,
    tensor_name,
)
from ..model import Model, Weights
from ..graph.ops import AttentionSpec, RopeSpec
from ..state import AttentionKV, ShortConv

T = MODEL_TENSOR
NORM_PLACEMENTS = ("pre", "sandwich", "post")
MIXERS = ("attention", "shortconv", "ssm")  # "ssm": a state-space mixer the family provides


@attrs.frozen
class DecoderConfig:
    n_layer: int
    n_embd: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    attn: AttentionShape
    eps: float
    rope: RopeSpec  # full-attention layers
    rope_local: RopeSpec | None = None  # sliding-window layers (None: as the full ones)
    windows: tuple[int | None, ...] = ()  # per layer: the sliding window, or None
    attention_scale: float = 1.0  # of the attention logits
    q_scale: float | None = None  # scale the rotated queries instead (gemma)
    attn_softcap: float | None = None
    final_softcap: float | None = None
    embedding_scale: float = 1.0
    residual_scale: float = 1.0
    logit_scale: float = 1.0  # logits are divided by it
    norm: str = "pre"
    qk_norm: str = "head"
    activation: str = "swiglu"
    mixers: tuple[str, ...] = ()  # per layer: "attention" (default) or "shortconv"
    kv_heads: tuple[int, ...] = ()  # per layer, from the file (0: the layer does not attend)

    def __attrs_post_init__(self):
        if self.norm not in NORM_PLACEMENTS:
            raise ModelConfigError(f"norm placement {self.norm!r}; known: {', '.join(NORM_PLACEMENTS)}")
        bad = [m for m in self.mixers if m not in MIXERS]
        if bad or (self.mixers and len(self.mixers) != self.n_layer):
            raise ModelConfigError(f"mixers {self.mixers} for {self.n_layer} layers; each is one of {', '.join(MIXERS)}")


    def mixer(self, i: int) -> str:
        return self.mixers[i] if self.mixers else "attention"


def read_decoder_config(
    gguf, family: str, neox: bool = False, eps_key: str = K.Attention.LAYERNORM_RMS_EPS, mixed_kv_heads: bool = False,
    dense_ffn: bool = True,
) -> tuple[DecoderConfig, HParams]:
    """The keys every llama-shaped decoder has. Returns the HParams so the family can read
    its own keys and then call ``hp.check_all_understood()``. ``eps_key``: the norm's
    epsilon (LayerNorm families such as starcoder2 store ``attention.layer_norm_epsilon``).
    ``mixed_kv_heads``: layers may have KV head counts of their own (gemma4's sliding and
    full layers); the family then declares each layer's cache itself. ``dense_ffn=False``:
    every layer's feed-forward is routed experts, so ``feed_forward_length`` may be absent
    (n_ff is then 0)."""
    hp = HParams(gguf, family)
    n_layer = hp.req(K.LLM.BLOCK_COUNT)
    n_embd = hp.req(K.LLM.EMBEDDING_LENGTH)
    n_head = hp.req(K.Attention.HEAD_COUNT)
    if n_layer < 1 or n_embd < 1 or n_head < 1:
        raise ModelConfigError(
            f"{gguf.path}: {hp.key('block_count')} ({n_layer}), {hp.key('embedding_length')} ({n_embd}) and "
            f"{hp.key('attention.head_count')} ({n_head}) must be positive"
        )
    # Every layer has tensors of its own: more layers than tensors is a lie (and would size
    # per-layer tables from it).
    if n_layer > len(gguf.tensors):
        raise ModelConfigError(
            f"{gguf.path}: {hp.key('block_count')} is {n_layer}, but the file has only {len(gguf.tensors)} tensors"
        )
    # one KV head count for all layers, or one per layer (0: a layer that does not attend)
    kv_heads = tuple(hp.per_layer(K.Attention.HEAD_COUNT_KV, n_layer, n_head))
    n_head_kv = max(kv_heads)
    if mixed_kv_heads:
        if any(k < 1 or n_head % k for k in kv_heads):
            raise ModelConfigError(
                f"{gguf.path}: {hp.key('attention.head_count_kv')} is {list(kv_heads)}; each layer's count must be "
                f"positive and divide {hp.key('attention.head_count')} ({n_head})"
            )
    elif n_head_kv < 1 or any(k not in (0, n_head_kv) for k in kv_heads):
        raise ModelConfigError(f"{gguf.path}: {hp.key('attention.head_count_kv')} is {list(kv_heads)}; cera needs one positive count (0 for layers that do not attend)")
    head_dim = hp.opt(K.Attention.KEY_LENGTH, n_embd // n_head, int)
    head_dim_v = hp.opt(K.Attention.VALUE_LENGTH, head_dim, int)
    n_rot = hp.opt(K.Rope.DIMENSION_COUNT, head_dim, int)
    if n_head % n_head_kv:
        raise ModelConfigError(
            f"{gguf.path}: {hp.key('attention.head_count')} ({n_head}) attention heads cannot be grouped onto "
            f"{hp.key('attention.head_count_kv')} ({n_head_kv}) KV heads"
        )
    if head_dim < 1 or head_dim_v < 1:
        raise ModelConfigError(
            f"{gguf.path}: a head dimension of {head_dim} (keys) / {head_dim_v} (values): "
            f"{hp.key('attention.key_length')}/{hp.key('attention.value_length')}, or "
            f"{hp.key('embedding_length')} ({n_embd}) over {hp.key('attention.head_count')} ({n_head}), must be positive"
        )
    if n_rot < 0 or n_rot > head_dim or n_rot % 2:
        raise ModelConfigError(
            f"{gguf.path}: {hp.key('rope.dimension_count')} is {n_rot}; it must be even and at most the head "
            f"dimension {head_dim}"
        )
    tokens = gguf.get_array("tokenizer.ggml.tokens", str)
    n_vocab = hp.opt(K.LLM.VOCAB_SIZE, len(tokens) if tokens is not None else 0, int)
    scale = hp.opt(K.Attention.SCALE, 0.0, float)
    n_ff = hp.req(K.LLM.FEED_FORWARD_LENGTH) if dense_ffn else hp.opt(K.LLM.FEED_FORWARD_LENGTH, 0, int)
    n_ctx_train = hp.opt(K.LLM.CONTEXT_LENGTH, 0, int)
    eps = hp.req(eps_key, float)
    if n_ff < (1 if dense_ffn else 0):
        raise ModelConfigError(f"{gguf.path}: {hp.key('feed_forward_length')} is {n_ff}; it must be positive")
    if not 0 <= n_ctx_train < 2**31:  # positions are int32
        raise ModelConfigError(f"{gguf.path}: {hp.key('context_length')} is {n_ctx_train}; it must be in [0, 2^31)")
    if not eps > 0:
        raise ModelConfigError(
            f"{gguf.path}: {hp.key(eps_key)} is {eps}; it must be positive"
        )
    if scale < 0:
        raise ModelConfigError(f"{gguf.path}: {hp.key('attention.scale')} is {scale}; it must not be negative")
    config = DecoderConfig(
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=n_ff,
        n_vocab=n_vocab,
        n_ctx_train=n_ctx_train,
        attn=AttentionShape(n_head, n_head_kv, head_dim, head_dim_v),
        eps=eps,
        rope=read_rope(hp, n_rot, neox=neox),
        windows=(None,) * n_layer,
        attention_scale=scale if scale else 1.0 / math.sqrt(head_dim),
        kv_heads=kv_heads,
    )
    return config, hp


def read_sliding_windows(hp: HParams, n_layer: int, default_window: int | None, default_pattern: int) -> tuple:
    """Per-layer windows from ``attention.sliding_window`` and its pattern key: a period
    (all but the last layer of each group slide) or, as the converter writes from a config's
    ``layer_types`` (OLMo 3, Gemma 3n/4), one boolean per layer."""
    window = hp.opt(K.Attention.SLIDING_WINDOW, default_window or 0, int) or None
    key = hp.key("attention.sliding_window_pattern")
    value = hp.gguf.metadata.get(key)
    if isinstance(value, np.ndarray):
        hp.ignore("attention.sliding_window_pattern")
        if value.dtype.kind != "b" or len(value) != n_layer:
            raise ModelConfigError(
                f"{hp.gguf.path}: {key} is an array of {len(value)} {value.dtype} values; it must hold one boolean "
                f"per layer ({n_layer})"
            )
        slides = tuple(bool(v) for v in value)
    else:
        pattern = hp.opt("attention.sliding_window_pattern", default_pattern, int)
        if pattern < 0:
            raise ModelConfigError(f"{hp.gguf.path}: {key} is {pattern}")
        slides = sliding_window_layers(n_layer, pattern)
    if window is not None and not 0 < window < 2**31:  # a window sizes ring caches; positions are int32
        raise ModelConfigError(f"{hp.gguf.path}: {hp.key('attention.sliding_window')} is {window}; it must be in [1, 2^31)")
    if window is None:
        return (None,) * n_layer
    return tuple(window if swa else None for swa in slides)


@attrs.define
class DecoderLayer:
    attn: AttentionWeights | ShortConvWeights
    ffn: FeedForwardWeights
    attn_norm: object = None
    ffn_norm: object = None
    post_attn_norm: object = None
    post_ffw_norm: object = None


class DecoderModel(Model):
    """A llama-shaped decoder: subclasses set ``family`` and ``neox_rope`` and, where the
    file has more keys, override `read_config`."""

    family = "llama"
    neox_rope = False
    output_norm_tensor = T.OUTPUT_NORM  # LFM2 files name the final norm token_embd_norm

    @classmethod
    def read_config(cls, gguf) -> DecoderConfig:
        config, hp = read_decoder_config(gguf, cls.family, neox=cls.neox_rope)
        hp.check_all_understood()
        return config

    def __init__(self, config: DecoderConfig, weights: Weights):
        super().__init__(config, weights)
        c = config
        for i, k in enumerate(c.kv_heads):
            if k == 0 and c.mixer(i) == "attention":
                raise ModelConfigError(
                    f"{weights.source}: layer {i} has no KV heads, so it does not attend; the {self.family} family "
                    f"does not say what it does instead (a hybrid file needs a family that knows its layers)"
                )
        w = weights
        self.tok_embd = w[tensor_name(T.TOKEN_EMBD)]
        self.output_norm = w[tensor_name(self.output_norm_tensor)]
        self.output = w.get(tensor_name(T.OUTPUT)) or self.tok_embd
        self.output_bias = w.get(tensor_name(T.OUTPUT, kind="bias"))
        pre = c.norm in ("pre", "sandwich")
        post = c.norm in ("post", "sandwich")
        self.layers = [
            DecoderLayer(
                attn=self.load_mixer(w, i),
                ffn=self.load_ffn(w, i),
                attn_norm=w[tensor_name(T.ATTN_NORM, i)] if pre else None,
                ffn_norm=w[self.ffn_norm_name(w, i)] if pre else None,
                post_attn_norm=w[tensor_name(T.ATTN_POST_NORM, i)] if post else None,
                post_ffw_norm=w[tensor_name(T.FFN_POST_NORM, i)] if post else None,
            )
            for i in range(c.n_layer)
        ]
        ff = w.host(tensor_name(T.ROPE_FREQS))
        self.rope = c.rope if ff is None else attrs.evolve(c.rope, freq_factors=tuple(float(v) for v in ff.ravel()))
        self.rope_local = c.rope_local or self.rope
        self.kv = [self.declare_state(i) for i in range(c.n_layer)]
        self.attn_specs = [
            AttentionSpec(scale=1.0 if c.q_scale is not None else c.attention_scale, window=c.windows[i], softcap=c.attn_softcap)
            for i in range(c.n_layer)
        ]

    def load_mixer(self, w: Weights, i: int):
        """Layer i's token-mixer weights: attention or a short convolution (a family with
        other mixers loads those here, and overrides `declare_state` and `mixer`)."""
        if self.config.mixer(i) == "attention":
            return AttentionWeights.load(w, i)
        return ShortConvWeights.load(w, i)

    def ffn_norm_name(self, w: Weights, i: int) -> str:
        """The name of layer i's feed-forward norm (falcon-h1 files store it without ".weight")."""
        return tensor_name(T.FFN_NORM, i)

    def load_ffn(self, w: Weights, i: int):
        """Layer i's feed-forward weights (a family with expert layers loads those here)."""
        return FeedForwardWeights.load(w, i)

    def ffn(self, g: GraphBuilder, i: int, h: Tensor) -> Tensor:
        """Layer i's feed-forward block on the normed ``h``."""
        return feed_forward(g, h, self.layers[i].ffn, self.config.activation)

    def declare_state(self, i: int):
        """Layer i's state: its KV cache, or a short convolution's carried inputs."""
        c = self.config
        if c.mixer(i) == "shortconv":
            L = self.layers[i].attn
            return self.state.add(ShortConv(L.channels, L.kernel))
        a = c.attn
        return self.state.add(AttentionKV(a.n_head_kv, a.head_dim_k, a.head_dim_v, window=c.windows[i], rope=self.layer_rope(i)))

    def mixer(self, g: GraphBuilder, i: int, h: Tensor) -> Tensor:
        """Layer i's token mixer: attention, or a short convolution."""
        c = self.config
        L = self.layers[i]
        if c.mixer(i) == "shortconv":
            return short_conv(g, h, L.attn, self.kv[i])
        return self_attention(
            g, h, L.attn, self.kv[i], c.attn, self.layer_rope(i, getattr(g, "n_ctx", 0)), self.attn_specs[i], c.eps,
            qk_norm=c.qk_norm, q_scale=c.q_scale, q_factor=self.query_factor(g, i),
        )  # fmt: skip

    def query_factor(self, g: GraphBuilder, i: int) -> Tensor | None:
        """A tensor multiplying layer i's rotated queries (a graph input the family fills
        through `position_inputs`), or None (here)."""
        return None

    @property
    def n_vocab(self) -> int:
        return self.output.shape[1]

    @property
    def limits_vocab(self) -> bool:
        return self.output_bias is None and type(self).head is DecoderModel.head  # a family's own head may not

    @property
    def n_ctx_train(self) -> int:
        return self.config.n_ctx_train

    def layer_rope(self, i: int, n_ctx: int = 0) -> RopeSpec:
        """The RoPE of layer i (phi3 picks frequency factors by context size)."""
        return self.rope_local if self.config.windows[i] is not None else self.rope

    def forward(self, g: GraphBuilder) -> None:
        c = self.config
        x = g.token_embeddings(self.tok_embd)
        if c.embedding_scale != 1.0:
            if g.layout.embeds:  # llama.cpp scales token rows only for some families, all for others
                raise UnsupportedOperation(
                    f"the {self.family} family scales its token embeddings; cera does not feed it image embeddings"
                )
            x = g.scale(x, c.embedding_scale)
        for i, L in enumerate(self.layers):
            h = g.rms_norm(x, L.attn_norm, c.eps) if L.attn_norm is not None else x
            h = self.mixer(g, i, h)
            if c.residual_scale != 1.0:
                h = g.scale(h, c.residual_scale)
            if i == c.n_layer - 1:  # the rest of the last layer: only the rows whose outputs are wanted
                x, h = g.output_rows(x), g.output_rows(h)
            if L.post_attn_norm is not None:
                h = g.rms_norm(h, L.post_attn_norm, c.eps)
            x = g.add(x, h)
            h = g.rms_norm(x, L.ffn_norm, c.eps) if L.ffn_norm is not None else x
            h = self.ffn(g, i, h)
            if L.post_ffw_norm is not None:
                h = g.rms_norm(h, L.post_ffw_norm, c.eps)
            if c.residual_scale != 1.0:
                h = g.scale(h, c.residual_scale)
            x = g.add(x, h)
        self.head(g, x)

    def head(self, g: GraphBuilder, x: Tensor) -> None:
        """Final norm and output projection of the wanted rows; logits divided by
        ``logit_scale`` and soft-capped when the config says so."""
        c = self.config
        h = g.rms_norm(g.output_rows(x), self.output_norm, c.eps)
        g.emit_hidden(h)
        if g.wants_logits:
            logits = g.linear(h, g.head_weight(self.output), self.output_bias)
            if c.logit_scale != 1.0:
                logits = g.scale(logits, 1.0 / c.logit_scale)
            if c.final_softcap:
                logits = g.softcap(logits, c.final_softcap)
            g.emit_logits(logits)


__all__ = ["DecoderConfig", "DecoderLayer", "DecoderModel", "read_decoder_config", "read_sliding_windows"]
