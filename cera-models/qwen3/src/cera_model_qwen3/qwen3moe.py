"""qwen3moe: qwen3 (NeoX RoPE, per-head QK-norm) with routed experts in every layer.

The feed-forward is llama.cpp's build_moe_ffn with Qwen3-MoE's settings: softmax router,
the top-k experts' weights renormalised to sum 1, SwiGLU experts; no shared expert.
"""

from __future__ import annotations

import attrs
from gguf.constants import MODEL_TENSOR as T

from cera.blocks.decoder import DecoderConfig, read_decoder_config
from cera.errors import InvalidModelFile, ModelConfigError
from cera.graph.builder import GraphBuilder, Tensor
from cera.blocks.layers import tensor_name

from .qwen3 import Qwen3Model


@attrs.frozen
class Qwen3MoeConfig(DecoderConfig):
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0


@attrs.define
class Experts:
    router: object
    gate: object
    up: object
    down: object


class Qwen3MoeModel(Qwen3Model):
    family = "qwen3moe"

    @classmethod
    def read_config(cls, gguf) -> Qwen3MoeConfig:
        config, hp = read_decoder_config(gguf, cls.family, neox=True)
        extra = dict(
            n_expert=hp.req("expert_count"),
            n_expert_used=hp.req("expert_used_count"),
            n_ff_exp=hp.req("expert_feed_forward_length"),
        )
        if not 0 < extra["n_expert_used"] <= extra["n_expert"]:
            raise ModelConfigError(
                f"{gguf.path}: {extra['n_expert_used']} experts per token out of {extra['n_expert']}"
            )
        hp.check_all_understood()
        return Qwen3MoeConfig(**attrs.asdict(config, recurse=False), **extra)

    def load_ffn(self, w, i: int):
        c = self.config
        e = Experts(
            router=w[tensor_name(T.FFN_GATE_INP, i)],
            gate=w[tensor_name(T.FFN_GATE_EXP, i)],
            up=w[tensor_name(T.FFN_UP_EXP, i)],
            down=w[tensor_name(T.FFN_DOWN_EXP, i)],
        )
        if e.gate.shape != (c.n_embd, c.n_ff_exp, c.n_expert):
            raise InvalidModelFile(
                w.source, None, f"layer {i}: ffn_gate_exps {e.gate.shape} for {c.n_expert} experts of {c.n_ff_exp}"
            )
        return e

    def ffn(self, g: GraphBuilder, i: int, h: Tensor) -> Tensor:
        e = self.layers[i].ffn
        return g.moe(h, e.router, e.gate, e.up, e.down, self.config.n_expert_used, gating="softmax", norm_topk=True)
