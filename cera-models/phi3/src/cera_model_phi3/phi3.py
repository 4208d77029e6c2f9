"""phi3: llama with fused projections and context-dependent RoPE frequency factors.

`attn_qkv` holds Q, K and V stacked, `ffn_up` holds gate and up stacked; the shared
blocks split them. Long-context files carry `rope_factors_short` and
`rope_factors_long`: like llama.cpp, cera uses the long ones only when the session's
context exceeds the original training context. llama.cpp disables Phi's sliding window,
and so does cera, to give the same results.
"""

from __future__ import annotations

import attrs

from cera.backend import RopeSpec
from cera.layers import float_tensor
from cera_model_llama.llama import LlamaConfig, LlamaModel, read_llama_config


class Phi3Model(LlamaModel):
    family = "phi3"
    neox_rope = True

    def read_config(self, gguf) -> LlamaConfig:
        config, hp = read_llama_config(gguf, self.family, neox=True)
        hp.ignore("attention.sliding_window")  # disabled in llama.cpp (see module docstring)
        self.n_ctx_orig = hp.opt("rope.scaling.original_context_length", hp.opt("context_length", 0, int), int)
        short = float_tensor(gguf, "rope_factors_short.weight")
        long = float_tensor(gguf, "rope_factors_long.weight")
        self.rope_short = attrs.evolve(config.rope, freq_factors=None if short is None else tuple(map(float, short)))
        self.rope_long = attrs.evolve(config.rope, freq_factors=None if long is None else tuple(map(float, long)))
        hp.check_all_understood()
        return config

    def rope_for(self, state) -> RopeSpec:
        return self.rope_long if state.n_ctx > self.n_ctx_orig else self.rope_short
