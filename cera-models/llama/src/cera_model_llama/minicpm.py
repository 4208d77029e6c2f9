"""minicpm (MiniCPM 1 and 2): llama with granite's multipliers under MiniCPM's defaults.

The embedding is multiplied by `embedding_scale` (default 12), each residual branch by
`residual_scale` (default 1.4 / sqrt(layers)), and logits are divided by `logit_scale`
(default 256 / embedding length): MiniCPM's scale_emb, scale_depth / sqrt(layers) and
hidden / dim_model_base. Older files lack the keys, so the defaults are llama.cpp's. The
attention scale is always 1/sqrt(head dimension), as llama.cpp's minicpm reads no
`attention.scale`.
"""

from __future__ import annotations

import math

import attrs

from cera.blocks.decoder import DecoderConfig, DecoderModel, read_decoder_config


class MiniCPMModel(DecoderModel):
    family = "minicpm"

    @classmethod
    def read_config(cls, gguf) -> DecoderConfig:
        config, hp = read_decoder_config(gguf, cls.family)
        config = attrs.evolve(
            config,
            embedding_scale=hp.opt("embedding_scale", 12.0, float),
            residual_scale=hp.opt("residual_scale", 1.4 / math.sqrt(config.n_layer), float),
            logit_scale=hp.opt("logit_scale", 256.0 / config.n_embd, float),
            attention_scale=1.0 / math.sqrt(config.attn.head_dim_k),
        )
        hp.check_all_understood()
        return config
