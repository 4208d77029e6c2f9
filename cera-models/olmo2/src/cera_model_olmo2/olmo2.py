"""olmo2: post-norm residual blocks and full-width QK-norm.

Per layer::

    x = x + post_attn_norm(attention(x))      # q_norm/k_norm over all heads at once
    x = x + post_ffw_norm(swiglu_ffn(x))

With a `sliding_window` key (OLMo 3 files), the layers the pattern marks (three of every
four; the converter writes one boolean per layer) slide and rotate without YaRN, which
only the full layers use.
"""

from __future__ import annotations

import math

import attrs

from cera.blocks.decoder import DecoderConfig, DecoderModel, read_decoder_config, read_sliding_windows


class Olmo2Model(DecoderModel):
    family = "olmo2"
    neox_rope = True

    @classmethod
    def read_config(cls, gguf) -> DecoderConfig:
        config, hp = read_decoder_config(gguf, cls.family, neox=True)
        windows = read_sliding_windows(hp, config.n_layer, None, 4)
        local_base = hp.opt("rope.freq_base_swa", config.rope.base, float)
        # OLMo 3's converter stores YaRN's attention factor; llama.cpp's olmo2 never reads
        # it and derives the factor from the scaling factor (0.1 ln f + 1, the value HF
        # configs hold), as read_rope does.
        hp.ignore("rope.scaling.yarn_attn_factor")
        hp.check_all_understood()
        return attrs.evolve(
            config,
            norm="post",
            qk_norm="full",
            windows=windows,
            rope_local=attrs.evolve(config.rope, base=local_base, freq_scale=1.0, ext_factor=0.0, attn_factor=1.0),
            attention_scale=1.0 / math.sqrt(config.attn.head_dim_k),
        )
