"""granite: llama with four multipliers, read from the file.

Embeddings are multiplied by `embedding_scale`, each residual branch by
`residual_scale`, attention scores use `attention.scale` instead of 1/sqrt(head_dim),
and logits are divided by `logit_scale`.
"""

from __future__ import annotations

import attrs

from cera.blocks.decoder import DecoderConfig, DecoderModel, read_decoder_config


class GraniteModel(DecoderModel):
    family = "granite"

    @classmethod
    def read_config(cls, gguf) -> DecoderConfig:
        config, hp = read_decoder_config(gguf, cls.family)
        config = attrs.evolve(
            config,
            embedding_scale=hp.opt("embedding_scale", 1.0, float),
            residual_scale=hp.opt("residual_scale", 1.0, float),
            logit_scale=hp.req("logit_scale", float),
        )
        hp.check_all_understood()
        return config
