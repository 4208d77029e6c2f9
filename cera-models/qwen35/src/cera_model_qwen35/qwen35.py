"""qwen35: Qwen3.5's dense hybrid. Three gated delta-net layers per attention layer (the file
says which: ``attention.recurrent_layers``, else ``full_attention_interval``), each layer
pre-norm, ``x + mixer(attn_norm x)`` then ``x + ffn(post_attention_norm x)``, as llama.cpp's
llama_model_qwen35 graph.

The attention layers are gated: ``attn_q`` gives each head its query and a gate side by side;
queries and keys are RMS-normed per head and rotated over ``rope.dimension_count`` dims; the
attention output is multiplied by sigmoid(gate) before ``attn_output``. Qwen3.5 rotates with
interleaved multimodal RoPE (``rope.dimension_sections``); for text every section reads the
token's position, which is NeoX RoPE over the same dims, so cera admits the sections that
cover the rotated dims that way and refuses the rest. The linear-attention layers are
`delta_net.delta_net_mixer`. MTP layers (``nextn_predict_layers``) are not run.
"""

from __future__ import annotations

import attrs
import numpy as np
from gguf.constants import MODEL_TENSOR as T

from cera.blocks.decoder import DecoderConfig, DecoderModel, read_decoder_config
from cera.blocks.layers import AttentionWeights, tensor_name
from cera.errors import InvalidModelFile, ModelConfigError
from cera.graph.builder import GraphBuilder, Tensor

from .delta_net import (
    DeltaNetConfig,
    DeltaNetWeights,
    declare_delta_net_state,
    delta_net_mixer,
    read_delta_net_config,
    recurrent_layers,
)


@attrs.frozen
class Qwen35Config(DecoderConfig):
    delta: DeltaNetConfig | None = None


def check_text_rope_sections(hp, n_rot: int) -> None:
    """Interleaved M-RoPE on text positions (the 4th component 0) equals NeoX RoPE when
    every rotated pair's sector reads the t, h or w component, as ggml's imrope picks them."""
    key = hp.key("rope.dimension_sections")
    value = hp.gguf.metadata.get(key)
    hp.ignore("rope.dimension_sections")
    if value is None:
        return
    s = [int(v) for v in np.asarray(value).ravel()][:4]
    s += [0] * (4 - len(s))
    total = sum(s)
    if total <= 0:
        raise ModelConfigError(f"{hp.gguf.path}: {key} is {s}")
    for pair in range(n_rot // 2):
        sector = pair % total
        if not ((sector % 3 == 1 and sector < 3 * s[1]) or (sector % 3 == 2 and sector < 3 * s[2])
                or (sector % 3 == 0 and sector < 3 * s[0])):  # fmt: skip
            raise ModelConfigError(
                f"{hp.gguf.path}: {key} is {s}: rotated pair {pair} reads the fourth position component, "
                f"which cera's text-only RoPE does not provide"
            )


def read_qwen35_config(cls, gguf, dense_ffn: bool = True):
    config, hp = read_decoder_config(gguf, cls.family, neox=True, dense_ffn=dense_ffn)
    delta = read_delta_net_config(hp)
    recurrent = recurrent_layers(hp, config.n_layer)
    check_text_rope_sections(hp, config.rope.n_dims)
    if hp.opt("nextn_predict_layers", 0, int):
        raise ModelConfigError(
            f"{gguf.path}: {hp.key('nextn_predict_layers')} is set: files with multi-token-prediction layers are not "
            f"served yet (convert without them: --no-mtp)"
        )
    a = config.attn
    if a.head_dim_k != a.head_dim_v:
        raise ModelConfigError(f"{gguf.path}: {cls.family} attention needs keys and values of one head size")
    config = attrs.evolve(config, mixers=tuple("ssm" if r else "attention" for r in recurrent))
    return config, hp, delta


class Qwen35Model(DecoderModel):
    family = "qwen35"
    neox_rope = True

    @classmethod
    def read_config(cls, gguf) -> Qwen35Config:
        config, hp, delta = read_qwen35_config(cls, gguf)
        hp.check_all_understood()
        return Qwen35Config(**attrs.asdict(config, recurse=False), delta=delta)

    def __init__(self, config, weights):
        super().__init__(config, weights)
        a = config.attn
        for i, L in enumerate(self.layers):
            if config.mixer(i) != "attention":
                continue
            if L.attn.q is None or L.attn.q.shape[1] != 2 * a.n_head * a.head_dim_k:
                raise InvalidModelFile(
                    weights.source, None,
                    f"layer {i}: attn_q must give {a.n_head} heads of a query and a gate ({2 * a.n_head * a.head_dim_k} "
                    f"values), not {None if L.attn.q is None else L.attn.q.shape[1]}",
                )  # fmt: skip
            if L.attn.q_norm is None or L.attn.k_norm is None:
                raise InvalidModelFile(weights.source, None, f"layer {i}: attention lacks attn_q_norm/attn_k_norm")

    def load_mixer(self, w, i: int):
        if self.config.mixer(i) == "ssm":
            return DeltaNetWeights.load(w, i, self.config.delta)
        return AttentionWeights.load(w, i)

    def ffn_norm_name(self, w, i: int) -> str:
        return tensor_name(T.ATTN_POST_NORM, i)  # llama.cpp's attn_post_norm: the pre-FFN norm

    def declare_state(self, i: int):
        if self.config.mixer(i) == "ssm":
            return declare_delta_net_state(self, self.config.delta)
        return super().declare_state(i)

    grouped_heads = False  # Qwen3.5's converter orders value heads so that head h reads key head h mod key_heads

    def mixer(self, g: GraphBuilder, i: int, h: Tensor) -> Tensor:
        c = self.config
        L = self.layers[i]
        if c.mixer(i) == "ssm":
            return delta_net_mixer(g, h, L.attn, c.delta, *self.kv[i], c.eps, grouped=self.grouped_heads)
        return gated_attention(g, h, L.attn, self.kv[i], c, self.layer_rope(i), self.attn_specs[i])


def gated_attention(g: GraphBuilder, h: Tensor, w: AttentionWeights, kv, c, rope, spec) -> Tensor:
    """Qwen3-Next / Qwen3.5 attention: per head a query and a gate from attn_q; QK-norm per
    head, RoPE, attention, times sigmoid(gate), attn_output."""
    n = h.shape[0]
    a = c.attn
    H, Hkv, d = a.n_head, a.n_head_kv, a.head_dim_k
    qg = g.reshape(g.linear(h, w.q), (n, H, 2 * d))
    q, gate = (g.copy(t) for t in g.split(qg, (d, d)))
    q = g.rms_norm(q, w.q_norm, c.eps)
    k = g.rms_norm(g.reshape(g.linear(h, w.k), (n, Hkv, d)), w.k_norm, c.eps)
    v = g.reshape(g.linear(h, w.v), (n, Hkv, d))
    q = g.rope(q, g.positions, rope)
    k = g.rope(k, g.positions, rope)
    out = g.attention(q, k, v, kv, spec)
    out = g.mul(out, g.unary("sigmoid", g.reshape(gate, (n, H * d))))
    return g.linear(out, w.o)
