"""smollm3: llama with no position encoding in every fourth layer (NoPE).

llama.cpp rotates queries and keys in layer i unless (i + 1) % 4 == 0; the step is fixed
for the architecture (the file has no key for it). Everything else is llama's.
"""

from __future__ import annotations

from cera.blocks.decoder import DecoderModel

NO_ROPE_LAYER_STEP = 4


class SmolLM3Model(DecoderModel):
    family = "smollm3"

    def layer_rope(self, i: int, n_ctx: int = 0):
        return None if (i + 1) % NO_ROPE_LAYER_STEP == 0 else super().layer_rope(i, n_ctx)
