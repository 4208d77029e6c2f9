"""olmo2: post-norm residual blocks and full-width QK-norm.

Per layer::

    x = x + post_attn_norm(attention(x))      # q_norm/k_norm over all heads at once
    x = x + post_ffw_norm(swiglu_ffn(x))

With a `sliding_window` key (OLMo 3 files), three of every four layers slide and rotate
without frequency scaling.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from cera.backend import AttentionSpec
from cera.layers import AttentionWeights, FeedForwardWeights, feed_forward, self_attention
from cera.model import DecoderModel
from cera_model_llama.llama import LlamaConfig, read_llama_config


class Olmo2Model(DecoderModel):
    family = "olmo2"

    def __init__(self, gguf, backend):
        super().__init__(gguf, backend)
        config, hp = read_llama_config(gguf, self.family, neox=True)
        window = hp.opt("attention.sliding_window", 0, int) or None
        pattern = hp.opt("attention.sliding_window_pattern", 4, int)
        local_base = hp.opt("rope.freq_base_swa", config.rope.base, float)
        hp.check_all_understood()
        self.config: LlamaConfig = config
        self.is_swa = [
            window is not None and (pattern == 0 or i % pattern < pattern - 1) for i in range(config.n_layer)
        ]
        self.rope_local = attrs.evolve(config.rope, base=local_base, freq_scale=1.0, ext_factor=0.0, attn_factor=1.0)
        scale = 1.0 / math.sqrt(config.attn.head_dim_k)
        self.attn_specs = [AttentionSpec(scale=scale, window=window if swa else None) for swa in self.is_swa]
        self.load_head()
        w = self.weights
        self.layers = [
            (
                AttentionWeights.load(w, i),
                w[f"blk.{i}.post_attention_norm.weight"],
                FeedForwardWeights.load(w, i),
                w[f"blk.{i}.post_ffw_norm.weight"],
            )
            for i in range(config.n_layer)
        ]

    def forward(self, state, tokens: np.ndarray, positions: np.ndarray, output: str = "last"):
        ops, c = self.backend, self.config
        x = ops.embedding(self.tok_embd, tokens)
        for i, (attn, attn_post_norm, ffn, ffn_post_norm) in enumerate(self.layers):
            rope = self.rope_local if self.is_swa[i] else c.rope
            h = self_attention(
                ops, x, attn, state, i, positions, c.attn, rope, self.attn_specs[i], c.eps, qk_norm="full"
            )
            x, h = self.last_layer_rows(i, output, x, h)
            if x is None:
                return None
            x = ops.add(x, ops.rms_norm(h, attn_post_norm, c.eps))
            h = feed_forward(ops, x, ffn, "swiglu")
            x = ops.add(x, ops.rms_norm(h, ffn_post_norm, c.eps))
        return self.head(x, output, c.eps)
