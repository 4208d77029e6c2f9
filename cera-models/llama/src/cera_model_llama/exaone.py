"""exaone (EXAONE 3.0 / 3.5): llama's arithmetic with queries and keys rotated NeoX-style.

EXAONE's checkpoints rotate halves (as transformers' Llama) and llama.cpp's converter
keeps that layout for `exaone` (it does not permute q/k as it does for `llama`), so the
pairs are (i, i + d/2). llama3-style frequency factors come as a `rope_freqs` tensor,
which the core's decoder reads.
"""

from __future__ import annotations

from cera.blocks.decoder import DecoderModel


class ExaoneModel(DecoderModel):
    family = "exaone"
    neox_rope = True
