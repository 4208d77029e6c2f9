"""gemma: Gemma 1, the llama-shaped decoder with gemma's choices.

Embeddings scaled by sqrt(n_embd), NeoX RoPE, the query scaled by 1/sqrt(head_dim)
before attention (as llama.cpp's graph does, not the logits), GeGLU feed-forward, the
output tied to the embedding. Norm weights in GGUF files already include gemma's "+1".
"""

from __future__ import annotations

import math

import attrs

from cera.blocks.decoder import DecoderConfig, DecoderModel, read_decoder_config
from cera.errors import ModelConfigError


class GemmaModel(DecoderModel):
    family = "gemma"
    neox_rope = True

    @classmethod
    def read_config(cls, gguf) -> DecoderConfig:
        config, hp = read_decoder_config(gguf, cls.family, neox=True)
        if hp.has("attention.scale") or hp.has("attention.sliding_window"):
            raise ModelConfigError(f"{gguf.path}: a gemma (1) file carries no attention.scale or sliding window")
        config = attrs.evolve(
            config,
            activation="geglu",
            q_scale=1.0 / math.sqrt(config.attn.head_dim_k),
            embedding_scale=math.sqrt(config.n_embd),
        )
        hp.check_all_understood()
        return config
