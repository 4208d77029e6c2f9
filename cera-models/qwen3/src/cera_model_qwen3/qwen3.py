"""qwen3: llama with NeoX-style RoPE and per-head RMS norm of queries and keys (QK-norm).

The core's attention block normalizes each head over its own dimension before RoPE when
`blk.N.attn_{q,k}_norm.weight` are present; qwen3 requires them.
"""

from cera.blocks.decoder import DecoderModel
from cera.errors import InvalidModelFile


class Qwen3Model(DecoderModel):
    family = "qwen3"
    neox_rope = True

    def __init__(self, config, weights):
        super().__init__(config, weights)
        for i, layer in enumerate(self.layers):
            if layer.attn.q_norm is None or layer.attn.k_norm is None:
                raise InvalidModelFile(weights.source, None, f"qwen3 layer {i} lacks attn_q_norm/attn_k_norm tensors")
