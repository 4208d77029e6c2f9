"""falcon-h1: attention and a Mamba-2 mixer side by side in every layer.

Per layer, as llama.cpp's graph::

    h = rms_norm(x);  x = x + attention(h) + mamba2(h);  x = x + ffn(rms_norm(x))

Falcon-H1's muP multipliers (embedding, attention in/out, key, SSM in/out and per-slice
SSM multipliers, MLP, LM head) are folded into the weights by llama.cpp's converter, so
the forward pass has none of its own; a file that carries them as metadata keys is
refused by the key check. Each layer holds a KV cache and conv + SSM state.
"""

from __future__ import annotations

import attrs
from gguf.constants import MODEL_TENSOR as T

from cera.blocks.decoder import DecoderConfig, DecoderModel, read_decoder_config
from cera.graph.builder import GraphBuilder, Tensor
from cera.blocks.layers import AttentionWeights, self_attention, tensor_name

from .mamba2 import Mamba2Weights, SSMConfig, declare_ssm_state, mamba2_mixer, read_ssm_config


@attrs.frozen
class FalconH1Config(DecoderConfig):
    ssm: SSMConfig | None = None


@attrs.define
class ParallelMixers:
    attn: AttentionWeights
    ssm: Mamba2Weights


class FalconH1Model(DecoderModel):
    family = "falcon-h1"
    neox_rope = True

    @classmethod
    def read_config(cls, gguf) -> FalconH1Config:
        config, hp = read_decoder_config(gguf, cls.family, neox=True)
        ssm = read_ssm_config(hp)
        hp.check_all_understood()
        return FalconH1Config(**attrs.asdict(config, recurse=False), ssm=ssm)

    def ffn_norm_name(self, w, i: int) -> str:
        # llama.cpp's converter writes this one tensor without its ".weight" suffix
        bare = tensor_name(T.FFN_NORM, i, kind="")
        return bare if bare in w else super().ffn_norm_name(w, i)

    def load_mixer(self, w, i: int):
        return ParallelMixers(AttentionWeights.load(w, i), Mamba2Weights.load(w, i, self.config.ssm))

    def declare_state(self, i: int):
        return (super().declare_state(i), *declare_ssm_state(self, self.config.ssm))

    def mixer(self, g: GraphBuilder, i: int, h: Tensor) -> Tensor:
        c = self.config
        m = self.layers[i].attn
        kv, conv, ssm = self.kv[i]
        a = self_attention(g, h, m.attn, kv, c.attn, self.layer_rope(i), self.attn_specs[i], c.eps)
        return g.add(a, mamba2_mixer(g, h, m.ssm, c.ssm, conv, ssm, c.eps))
