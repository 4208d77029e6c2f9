"""qwen2: llama with NeoX-style RoPE and Q/K/V projection biases.

The biases need no code: `AttentionWeights` picks up `blk.N.attn_{q,k,v}.bias` when the
file has them. What differs from llama is the RoPE pairing.
"""

from cera_model_llama.llama import LlamaModel


class Qwen2Model(LlamaModel):
    family = "qwen2"
    neox_rope = True
