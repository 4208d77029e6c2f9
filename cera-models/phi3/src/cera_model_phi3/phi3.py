"""phi3: llama with fused projections and context-dependent RoPE frequency factors.

`attn_qkv` holds Q, K and V stacked, `ffn_up` holds gate and up stacked; the core's
blocks split them. Long-context files carry `rope_factors_short` and
`rope_factors_long`: like llama.cpp, cera uses the long ones only when the session's
context exceeds the original training context. llama.cpp disables Phi's sliding window,
and so does cera, to give the same results.
"""

from __future__ import annotations

import attrs
from gguf.constants import MODEL_TENSOR

from cera.blocks.decoder import DecoderConfig, DecoderModel, read_decoder_config
from cera.blocks.layers import tensor_name
from cera.graph.ops import RopeSpec


class Phi3Model(DecoderModel):
    family = "phi3"
    neox_rope = True

    @classmethod
    def read_config(cls, gguf) -> DecoderConfig:
        config, hp = read_decoder_config(gguf, cls.family, neox=True)
        hp.ignore("attention.sliding_window")  # disabled in llama.cpp (see module docstring)
        hp.check_all_understood()
        return config

    def __init__(self, config, weights):
        def factors(t):
            v = weights.host(tensor_name(t))
            return None if v is None else tuple(float(f) for f in v.ravel())

        rope = config.rope
        self.n_ctx_orig = rope.n_ctx_orig or config.n_ctx_train
        self.rope_short = attrs.evolve(rope, freq_factors=factors(MODEL_TENSOR.ROPE_FACTORS_SHORT))
        self.rope_long = attrs.evolve(rope, freq_factors=factors(MODEL_TENSOR.ROPE_FACTORS_LONG))
        super().__init__(config, weights)

    def layer_rope(self, i: int, n_ctx: int = 0) -> RopeSpec:
        return self.rope_long if n_ctx > self.n_ctx_orig else self.rope_short
