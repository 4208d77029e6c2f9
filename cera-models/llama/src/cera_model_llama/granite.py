"""granite: llama with four multipliers, read from the file.

Embeddings are multiplied by `embedding_scale`, each residual branch by
`residual_scale`, attention scores use `attention.scale` instead of 1/sqrt(head_dim),
and logits are divided by `logit_scale`.
"""

from __future__ import annotations

import attrs

from .llama import LlamaConfig, LlamaModel, read_llama_config


class GraniteModel(LlamaModel):
    family = "granite"

    def read_config(self, gguf) -> LlamaConfig:
        config, hp = read_llama_config(gguf, self.family)
        config = attrs.evolve(
            config,
            embedding_scale=hp.opt("embedding_scale", 1.0, float),
            residual_scale=hp.opt("residual_scale", 1.0, float),
            logit_scale=hp.req("logit_scale", float),
        )
        hp.check_all_understood()
        return config
