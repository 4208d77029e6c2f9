"""qwen3: llama with NeoX-style RoPE and per-head RMS norm of queries and keys (QK-norm).

`AttentionWeights` loads `blk.N.attn_{q,k}_norm.weight`, and the shared attention block
normalizes each head over its own dimension before RoPE when they are present.
"""

from cera.errors import InvalidModelFile
from cera_model_llama.llama import LlamaModel


class Qwen3Model(LlamaModel):
    family = "qwen3"
    neox_rope = True

    def __init__(self, gguf, backend):
        super().__init__(gguf, backend)
        for i, (_, attn, _, _) in enumerate(self.layers):
            if attn.q_norm is None or attn.k_norm is None:
                raise InvalidModelFile(gguf.path, None, f"qwen3 layer {i} lacks attn_q_norm/attn_k_norm tensors")
