"""lfm2 and lfm2moe: Liquid AI's hybrid of gated short convolutions and attention.

Each layer is pre-norm: ``x + mixer(norm(x))`` then ``x + ffn(norm(x))``. The mixer is
chosen by the file: a layer with KV heads (``attention.head_count_kv`` is an array) is
grouped-query attention with per-head RMS norm of queries and keys and NeoX RoPE; a layer
with none is the gated short convolution (`cera.blocks.layers.short_conv`) whose last inputs
are carried as conv state. The final norm is the tensor llama.cpp's LFM2 files call
``token_embd_norm``; the output head is tied to the embedding unless ``output.weight``
is present.

lfm2moe keeps the first ``leading_dense_block_count`` layers dense and gives the rest a
routed mixture of experts (sigmoid router, selection bias ``exp_probs_b``, the chosen
weights renormalised), as llama.cpp's build_moe_ffn with LFM2's settings.
"""

from __future__ import annotations

import attrs
from gguf.constants import MODEL_TENSOR as T

from cera.blocks.decoder import DecoderConfig, DecoderModel, read_decoder_config
from cera.errors import InvalidModelFile, ModelConfigError
from cera.graph.builder import GraphBuilder, Tensor
from cera.blocks.layers import tensor_name

# gguf's ExpertGatingFuncType values
GATINGS = {1: "softmax", 2: "sigmoid"}


def _read_lfm2(cls, gguf, extra=None):
    config, hp = read_decoder_config(gguf, cls.family, neox=True)
    # the kernel size is also the conv tensor's shape; the family checks the two agree
    kernel = hp.req("shortconv.l_cache")
    window = hp.opt("attention.sliding_window", 0, int) or None
    # LFM2 embedding variants (bidirectional attention, a dense projection after the
    # norm) change the forward pass: refused by check_all_understood, as is any other
    # key this family does not read.
    mixers = tuple("attention" if n else "shortconv" for n in config.kv_heads)
    windows = tuple(window if m == "attention" else None for m in mixers)
    config = attrs.evolve(config, mixers=mixers, windows=windows)
    more = extra(hp, config) if extra else {}
    hp.check_all_understood()
    return config, kernel, more


@attrs.frozen
class Lfm2Config(DecoderConfig):
    conv_kernel: int = 3


@attrs.frozen
class Lfm2MoeConfig(Lfm2Config):
    n_dense_lead: int = 0
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    gating: str = "sigmoid"


class Lfm2Model(DecoderModel):
    family = "lfm2"
    neox_rope = True
    output_norm_tensor = T.TOKEN_EMBD_NORM

    @classmethod
    def read_config(cls, gguf) -> Lfm2Config:
        config, kernel, _ = _read_lfm2(cls, gguf)
        return Lfm2Config(**attrs.asdict(config, recurse=False), conv_kernel=kernel)

    def __init__(self, config, weights):
        super().__init__(config, weights)
        for i, L in enumerate(self.layers):
            if config.mixer(i) == "shortconv":
                if L.attn.kernel != config.conv_kernel or L.attn.channels != config.n_embd:
                    raise InvalidModelFile(
                        weights.source, None,
                        f"layer {i}: shortconv.conv has GGML shape {L.attn.conv.shape}; the metadata says kernel "
                        f"{config.conv_kernel} over {config.n_embd} channels",
                    )  # fmt: skip
            elif L.attn.q_norm is None or L.attn.k_norm is None:
                raise InvalidModelFile(weights.source, None, f"lfm2 attention layer {i} lacks attn_q_norm/attn_k_norm")


@attrs.define
class ExpertWeights:
    router: object
    gate: object
    up: object
    down: object
    bias: object


class Lfm2MoeModel(Lfm2Model):
    family = "lfm2moe"

    @classmethod
    def read_config(cls, gguf) -> Lfm2MoeConfig:
        def extra(hp, config):
            gating = hp.req("expert_gating_func")
            if gating not in GATINGS:
                raise ModelConfigError(f"{gguf.path}: {hp.key('expert_gating_func')} is {gating}; cera knows {GATINGS}")
            return dict(
                n_dense_lead=hp.opt("leading_dense_block_count", 0, int),
                n_expert=hp.req("expert_count"),
                n_expert_used=hp.req("expert_used_count"),
                n_ff_exp=hp.req("expert_feed_forward_length"),
                gating=GATINGS[gating],
            )

        config, kernel, more = _read_lfm2(cls, gguf, extra)
        if not 0 < more["n_expert_used"] <= more["n_expert"]:
            raise ModelConfigError(f"{gguf.path}: {more['n_expert_used']} experts per token out of {more['n_expert']}")
        return Lfm2MoeConfig(**attrs.asdict(config, recurse=False), conv_kernel=kernel, **more)

    def load_ffn(self, w, i: int):
        c = self.config
        if i < c.n_dense_lead:
            return super().load_ffn(w, i)
        e = ExpertWeights(
            router=w[tensor_name(T.FFN_GATE_INP, i)],
            gate=w[tensor_name(T.FFN_GATE_EXP, i)],
            up=w[tensor_name(T.FFN_UP_EXP, i)],
            down=w[tensor_name(T.FFN_DOWN_EXP, i)],
            bias=w[tensor_name(T.FFN_EXP_PROBS_B, i, kind="bias")],
        )
        if e.router.shape[1] != c.n_expert or e.gate.shape != (c.n_embd, c.n_ff_exp, c.n_expert):
            raise InvalidModelFile(
                w.source, None, f"layer {i}: expert tensors {e.router.shape}, {e.gate.shape} do not match "
                f"{c.n_expert} experts of {c.n_ff_exp} over {c.n_embd}",
            )  # fmt: skip
        return e

    def ffn(self, g: GraphBuilder, i: int, h: Tensor) -> Tensor:
        e = self.layers[i].ffn
        if not isinstance(e, ExpertWeights):
            return super().ffn(g, i, h)
        c = self.config
        return g.moe(h, e.router, e.gate, e.up, e.down, c.n_expert_used, gating=c.gating, selection_bias=e.bias,
                     norm_topk=True)  # fmt: skip
