"""gemma2: a decoder with sandwich norms, GeGLU and alternating sliding-window layers.

Per layer::

    h = post_attn_norm(attention(attn_norm(x)));  x = x + h
    h = post_ffw_norm(geglu_ffn(ffn_norm(x)));     x = x + h

Embeddings are scaled by sqrt(n_embd). Layers follow a pattern of `swa_pattern` layers
of which all but the last use a sliding window (gemma2: every other layer). Attention
logits and final logits may be soft-capped. Norm weights in GGUF files already include
gemma's "+1". The query is scaled before attention (query_pre_attn_scalar), not the
logits, as in llama.cpp's graph.
"""

from __future__ import annotations

import math

import attrs

from cera.blocks.decoder import DecoderConfig, DecoderModel, read_decoder_config, read_sliding_windows
from cera.errors import ModelConfigError
from cera.blocks.hparams import HParams
from cera.blocks.layers import read_rope
from cera.graph.ops import RopeSpec


class Gemma2Model(DecoderModel):
    family = "gemma2"
    neox_rope = True
    default_swa_pattern = 2
    default_window: int | None = 4096
    default_final_softcap = 30.0  # llama.cpp's default when the key is absent
    n_layer_27b = 46

    @classmethod
    def read_config(cls, gguf) -> DecoderConfig:
        config, hp = read_decoder_config(gguf, cls.family, neox=True)
        c = config
        windows = read_sliding_windows(hp, c.n_layer, cls.default_window, cls.default_swa_pattern)
        rope_global = read_rope(hp, c.rope.n_dims, neox=True)
        n_head = c.attn.n_head
        # gemma's query_pre_attn_scalar: 1/sqrt(head_dim), except the 27B models (n_embd/n_head).
        q_scale = 1.0 / math.sqrt(c.n_embd / n_head if c.n_layer == cls.n_layer_27b else c.attn.head_dim_k)
        if hp.has("attention.scale"):
            raise ModelConfigError(f"{gguf.path}: {cls.family} files carry no attention.scale; this one does, so it is not a {cls.family} model cera understands")
        config = attrs.evolve(
            c,
            norm="sandwich",
            activation="geglu",
            windows=windows,
            rope=rope_global,
            rope_local=cls.local_rope(hp, rope_global),
            q_scale=q_scale,
            attn_softcap=cls.read_attn_softcap(hp),
            final_softcap=hp.opt("final_logit_softcapping", cls.default_final_softcap, float) or None,
            embedding_scale=math.sqrt(c.n_embd),
        )
        hp.check_all_understood()
        return config

    @classmethod
    def read_attn_softcap(cls, hp: HParams) -> float | None:
        return hp.opt("attn_logit_softcapping", 50.0, float) or None

    @classmethod
    def local_rope(cls, hp: HParams, rope_global: RopeSpec) -> RopeSpec:
        """gemma2's sliding layers rotate like the global ones unless the file says otherwise."""
        return attrs.evolve(rope_global, base=hp.opt("rope.freq_base_swa", rope_global.base, float))
