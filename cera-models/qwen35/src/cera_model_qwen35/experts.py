"""The routed feed-forward of Qwen3.5-MoE and Qwen3-Next, as llama.cpp's build_layer_ffn there:
a softmax router choosing ``expert_used_count`` of ``expert_count`` SwiGLU experts, their
weights renormalised (times ``expert_weights_scale`` when the file sets one), plus a shared
SwiGLU expert gated per token by sigmoid(ffn_gate_inp_shexp x)."""

from __future__ import annotations

import attrs
from gguf.constants import MODEL_TENSOR as T

from cera.blocks.layers import FeedForwardWeights, feed_forward, tensor_name
from cera.errors import InvalidModelFile, ModelConfigError
from cera.graph.builder import GraphBuilder, Tensor, WeightRef


@attrs.frozen
class ExpertsConfig:
    n_expert: int
    n_expert_used: int
    n_ff_exp: int
    n_ff_shexp: int
    weight_scale: float | None


def read_experts_config(hp) -> ExpertsConfig:
    scale = hp.opt("expert_weights_scale", 0.0, float)
    c = ExpertsConfig(
        n_expert=hp.req("expert_count"),
        n_expert_used=hp.req("expert_used_count"),
        n_ff_exp=hp.req("expert_feed_forward_length"),
        n_ff_shexp=hp.opt("expert_shared_feed_forward_length", 0, int),
        weight_scale=None if scale in (0.0, 1.0) else scale,  # llama.cpp scales only by other values
    )
    if not 0 < c.n_expert_used <= c.n_expert or c.n_ff_exp < 1:
        raise ModelConfigError(
            f"{hp.gguf.path}: {c.n_expert_used} experts of {c.n_ff_exp} per token out of {c.n_expert}"
        )
    hp.ignore("expert_gating_func")  # llama.cpp's qwen35moe and qwen3next graphs always take softmax
    return c


@attrs.define
class RoutedExperts:
    router: WeightRef
    gate: WeightRef
    up: WeightRef
    down: WeightRef
    shared: FeedForwardWeights | None
    shared_gate: WeightRef | None  # [n_embd, 1]: one gate value per token

    @classmethod
    def load(cls, w, i: int, n_embd: int, c: ExpertsConfig) -> RoutedExperts:
        shared = shared_gate = None
        if w.get(tensor_name(T.FFN_UP_SHEXP, i)) is not None:
            shared = FeedForwardWeights(
                gate=w[tensor_name(T.FFN_GATE_SHEXP, i)], up=w[tensor_name(T.FFN_UP_SHEXP, i)],
                down=w[tensor_name(T.FFN_DOWN_SHEXP, i)],
            )  # fmt: skip
            g = w[tensor_name(T.FFN_GATE_INP_SHEXP, i)]
            if g.shape not in ((n_embd,), (n_embd, 1)):
                raise InvalidModelFile(w.source, None, f"layer {i}: ffn_gate_inp_shexp {g.shape} for {n_embd} features")
            shared_gate = attrs.evolve(g, shape=(n_embd, 1))  # a one-output projection
        e = cls(
            router=w[tensor_name(T.FFN_GATE_INP, i)],
            gate=w[tensor_name(T.FFN_GATE_EXP, i)],
            up=w[tensor_name(T.FFN_UP_EXP, i)],
            down=w[tensor_name(T.FFN_DOWN_EXP, i)],
            shared=shared,
            shared_gate=shared_gate,
        )
        if e.gate.shape != (n_embd, c.n_ff_exp, c.n_expert) or e.router.shape != (n_embd, c.n_expert):
            raise InvalidModelFile(
                w.source, None, f"layer {i}: ffn_gate_inp {e.router.shape}, ffn_gate_exps {e.gate.shape} for "
                f"{c.n_expert} experts of {c.n_ff_exp} over {n_embd}",
            )  # fmt: skip
        return e


def routed_ffn(g: GraphBuilder, h: Tensor, e: RoutedExperts, c: ExpertsConfig) -> Tensor:
    out = g.moe(h, e.router, e.gate, e.up, e.down, c.n_expert_used, gating="softmax", norm_topk=True,
                weight_scale=c.weight_scale)  # fmt: skip
    if e.shared is not None:
        shared = feed_forward(g, h, e.shared)
        out = g.add(out, g.mul(shared, g.unary("sigmoid", g.linear(h, e.shared_gate))))
    return out
