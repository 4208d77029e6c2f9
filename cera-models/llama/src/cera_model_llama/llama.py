"""llama: pre-norm decoder, RMSNorm, RoPE (normal pairing), SwiGLU feed-forward.

Everything is the core's llama-shaped decoder (`cera.blocks.decoder`): optional attention
biases and llama3's `rope_freqs` frequency factors need no code here.
"""

from __future__ import annotations

from cera.blocks.decoder import DecoderModel


class LlamaModel(DecoderModel):
    family = "llama"
