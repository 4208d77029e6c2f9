"""gemma3 (text): gemma2's layout with per-head QK-norm, no attention soft-capping, and
five sliding-window layers for every global one.

Sliding layers use their own RoPE base (`rope.freq_base_swa`, default 10000) and no
frequency scaling; global layers use the file's base and scaling. The QK-norm needs no
code here: the shared attention block applies `attn_q_norm`/`attn_k_norm` per head.
"""

from __future__ import annotations

import attrs

from cera.backend import RopeSpec
from cera.hparams import HParams

from .gemma2 import Gemma2Model


class Gemma3Model(Gemma2Model):
    family = "gemma3"
    default_swa_pattern = 6
    default_window = None  # no `sliding_window` key: every layer is global
    default_final_softcap = 0.0

    def is_27b(self, n_layer: int) -> bool:
        return n_layer == 62

    def read_attn_softcap(self, hp: HParams) -> float | None:
        hp.ignore("attn_logit_softcapping")  # llama.cpp's gemma3 never soft-caps attention
        return None

    def local_rope(self, hp: HParams, n_rot: int, rope_global: RopeSpec) -> RopeSpec:
        base = hp.opt("rope.freq_base_swa", 10000.0, float)
        return attrs.evolve(rope_global, base=base, freq_scale=1.0)
