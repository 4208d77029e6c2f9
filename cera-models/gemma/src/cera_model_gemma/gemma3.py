"""gemma3 (text): gemma2's layout with per-head QK-norm, no attention soft-capping, and
five sliding-window layers for every global one.

Sliding layers use their own RoPE base (`rope.freq_base_swa`, default 10000) and no
frequency scaling; global layers use the file's base and scaling. The QK-norm needs no
code here: the core's attention block applies `attn_q_norm`/`attn_k_norm` per head.
"""

from __future__ import annotations

import attrs

from cera.blocks.hparams import HParams
from cera.graph.ops import RopeSpec

from .gemma2 import Gemma2Model


class Gemma3Model(Gemma2Model):
    family = "gemma3"
    default_swa_pattern = 6
    default_window = None  # no `sliding_window` key: every layer is global
    default_final_softcap = 0.0
    n_layer_27b = 62

    @classmethod
    def read_attn_softcap(cls, hp: HParams) -> float | None:
        hp.ignore("attn_logit_softcapping")  # llama.cpp's gemma3 never soft-caps attention
        return None

    @classmethod
    def local_rope(cls, hp: HParams, rope_global: RopeSpec) -> RopeSpec:
        return attrs.evolve(rope_global, base=hp.opt("rope.freq_base_swa", 10000.0, float), freq_scale=1.0)
