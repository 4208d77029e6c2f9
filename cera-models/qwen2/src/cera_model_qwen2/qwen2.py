"""qwen2: llama with NeoX-style RoPE and Q/K/V projection biases.

The biases need no code: the core's attention block picks up `blk.N.attn_{q,k,v}.bias`
when the file has them. What differs from llama is the RoPE pairing.
"""

from cera.blocks.decoder import DecoderModel


class Qwen2Model(DecoderModel):
    family = "qwen2"
    neox_rope = True
