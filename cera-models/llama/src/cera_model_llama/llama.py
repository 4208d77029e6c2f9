"""llama: pre-norm decoder, RMSNorm, RoPE (normal pairing), SwiGLU feed-forward.

Also the base of llama-shaped architectures: optional attention biases, llama3's
`rope_freqs` frequency factors, and the multipliers granite adds (see granite.py).
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from cera.backend import AttentionSpec, RopeSpec
from cera.errors import ModelConfigError
from cera.hparams import HParams
from cera.layers import (
    AttentionShape,
    AttentionWeights,
    FeedForwardWeights,
    feed_forward,
    float_tensor,
    read_rope,
    self_attention,
)
from cera.model import DecoderModel


@attrs.frozen
class LlamaConfig:
    n_layer: int
    n_embd: int
    n_ff: int
    n_vocab: int
    attn: AttentionShape
    eps: float
    rope: RopeSpec
    attention_scale: float
    # granite's multipliers (1.0 for llama)
    embedding_scale: float = 1.0
    residual_scale: float = 1.0
    logit_scale: float = 1.0


def read_llama_config(gguf, family: str, neox: bool = False, **extra) -> tuple[LlamaConfig, HParams]:
    hp = HParams(gguf, family)
    n_layer = hp.req("block_count")
    n_embd = hp.req("embedding_length")
    n_head = hp.req("attention.head_count")
    n_head_kv = hp.opt("attention.head_count_kv", n_head, int)
    head_dim = hp.opt("attention.key_length", n_embd // n_head, int)
    head_dim_v = hp.opt("attention.value_length", head_dim, int)
    n_rot = hp.opt("rope.dimension_count", head_dim, int)
    if n_head % n_head_kv:
        raise ModelConfigError(f"{gguf.path}: {n_head} attention heads cannot be grouped onto {n_head_kv} KV heads")
    tokens = gguf.get("tokenizer.ggml.tokens")
    n_vocab = hp.opt("vocab_size", len(tokens) if tokens is not None else 0, int)
    scale = hp.opt("attention.scale", 0.0, float)
    config = LlamaConfig(
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=hp.req("feed_forward_length"),
        n_vocab=n_vocab,
        attn=AttentionShape(n_head, n_head_kv, head_dim, head_dim_v),
        eps=hp.req("attention.layer_norm_rms_epsilon", float),
        rope=read_rope(hp, n_rot, neox=neox, freq_factors=float_tensor(gguf, "rope_freqs.weight")),
        attention_scale=scale if scale else 1.0 / math.sqrt(head_dim),
        **extra,
    )
    return config, hp


class LlamaModel(DecoderModel):
    family = "llama"
    neox_rope = False

    def __init__(self, gguf, backend):
        super().__init__(gguf, backend)
        self.config = self.read_config(gguf)
        self.load_head()
        w = self.weights
        self.layers = [
            (
                w[f"blk.{i}.attn_norm.weight"],
                AttentionWeights.load(w, i),
                w[f"blk.{i}.ffn_norm.weight"],
                FeedForwardWeights.load(w, i),
            )
            for i in range(self.config.n_layer)
        ]
        self.attn_spec = AttentionSpec(scale=self.config.attention_scale)

    def read_config(self, gguf) -> LlamaConfig:
        config, hp = read_llama_config(gguf, self.family, neox=self.neox_rope)
        hp.check_all_understood()
        return config

    def rope_for(self, state) -> RopeSpec:
        """The RoPE of this forward pass (phi3 picks frequency factors by context size)."""
        return self.config.rope

    def forward(self, state, tokens: np.ndarray, positions: np.ndarray, output: str = "last"):
        ops, c = self.backend, self.config
        x = ops.embedding(self.tok_embd, tokens)
        if c.embedding_scale != 1.0:
            x = ops.scale(x, c.embedding_scale)
        rope = self.rope_for(state)
        for i, (attn_norm, attn, ffn_norm, ffn) in enumerate(self.layers):
            h = ops.rms_norm(x, attn_norm, c.eps)
            h = self_attention(ops, h, attn, state, i, positions, c.attn, rope, self.attn_spec, c.eps)
            if c.residual_scale != 1.0:
                h = ops.scale(h, c.residual_scale)
            x, h = self.last_layer_rows(i, output, x, h)
            if x is None:
                return None
            x = ops.add(x, h)
            h = feed_forward(ops, ops.rms_norm(x, ffn_norm, c.eps), ffn, "swiglu")
            if c.residual_scale != 1.0:
                h = ops.scale(h, c.residual_scale)
            x = ops.add(x, h)
        return self.head(x, output, c.eps, logit_scale=c.logit_scale)
