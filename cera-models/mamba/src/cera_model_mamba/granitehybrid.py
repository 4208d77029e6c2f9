"""granitehybrid: IBM Granite 4.0 hybrids (and Bamba): Mamba-2 layers and attention layers
in one pre-norm decoder, with granite's multipliers and a dense or routed feed-forward.

The file says which layers attend (``attention.head_count_kv`` > 0); the others run the
Mamba-2 mixer (`mamba2.mamba2_mixer`). Attention layers rotate queries and keys only when
``rope.scaling.finetuned`` is true (Bamba); Granite 4.0's attention has no position
encoding. Embeddings are multiplied by ``embedding_scale``, each branch by
``residual_scale``, attention logits by ``attention.scale``, and logits divided by
``logit_scale``. With experts, each layer's feed-forward is a softmax-routed mixture
(weights renormalised) plus a shared expert when the file has one.
"""

from __future__ import annotations

import attrs
from gguf.constants import MODEL_TENSOR as T

from cera.blocks.decoder import DecoderConfig, DecoderModel, read_decoder_config
from cera.errors import InvalidModelFile, ModelConfigError
from cera.graph.builder import GraphBuilder, Tensor
from cera.blocks.layers import FeedForwardWeights, feed_forward, self_attention, tensor_name

from .mamba2 import Mamba2Weights, SSMConfig, declare_ssm_state, mamba2_mixer, read_ssm_config


@attrs.frozen
class GraniteHybridConfig(DecoderConfig):
    ssm: SSMConfig | None = None
    use_rope: bool = False
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_shexp: int = 0


@attrs.define
class GraniteExperts:
    router: object
    gate: object
    up: object
    down: object
    shared: FeedForwardWeights | None


class GraniteHybridModel(DecoderModel):
    family = "granitehybrid"

    @classmethod
    def read_config(cls, gguf) -> GraniteHybridConfig:
        config, hp = read_decoder_config(gguf, cls.family)
        ssm = read_ssm_config(hp)
        n_expert = hp.opt("expert_count", 0, int)
        extra = dict(
            ssm=ssm,
            use_rope=hp.opt("rope.scaling.finetuned", True, bool),  # llama.cpp: RoPE only where this is true
            n_expert=n_expert,
            n_expert_used=hp.opt("expert_used_count", 0, int),
            n_ff_shexp=hp.opt("expert_shared_feed_forward_length", 0, int),
        )
        if n_expert and not 0 < extra["n_expert_used"] <= n_expert:
            raise ModelConfigError(f"{gguf.path}: {extra['n_expert_used']} experts per token out of {n_expert}")
        config = attrs.evolve(
            config,
            mixers=tuple("attention" if k else "ssm" for k in config.kv_heads),
            embedding_scale=hp.opt("embedding_scale", 1.0, float) or 1.0,
            residual_scale=hp.opt("residual_scale", 1.0, float) or 1.0,
            logit_scale=hp.opt("logit_scale", 1.0, float) or 1.0,
        )
        hp.check_all_understood()
        return GraniteHybridConfig(**attrs.asdict(config, recurse=False), **extra)

    def load_mixer(self, w, i: int):
        if self.config.mixer(i) == "ssm":
            return Mamba2Weights.load(w, i, self.config.ssm)
        return super().load_mixer(w, i)

    def load_ffn(self, w, i: int):
        c = self.config
        if not c.n_expert:
            return super().load_ffn(w, i)
        shared = None
        if c.n_ff_shexp:
            shared = FeedForwardWeights(
                gate=w[tensor_name(T.FFN_GATE_SHEXP, i)], up=w[tensor_name(T.FFN_UP_SHEXP, i)],
                down=w[tensor_name(T.FFN_DOWN_SHEXP, i)],
            )  # fmt: skip
        e = GraniteExperts(
            router=w[tensor_name(T.FFN_GATE_INP, i)],
            gate=w[tensor_name(T.FFN_GATE_EXP, i)],
            up=w[tensor_name(T.FFN_UP_EXP, i)],
            down=w[tensor_name(T.FFN_DOWN_EXP, i)],
            shared=shared,
        )
        if e.gate.shape != (c.n_embd, c.n_ff, c.n_expert):
            raise InvalidModelFile(w.source, None, f"layer {i}: ffn_gate_exps {e.gate.shape} for {c.n_expert} experts")
        return e

    def declare_state(self, i: int):
        if self.config.mixer(i) == "ssm":
            return declare_ssm_state(self, self.config.ssm)
        return super().declare_state(i)

    def layer_rope(self, i: int, n_ctx: int = 0):
        return super().layer_rope(i, n_ctx) if self.config.use_rope else None

    def mixer(self, g: GraphBuilder, i: int, h: Tensor) -> Tensor:
        c = self.config
        L = self.layers[i]
        if c.mixer(i) == "ssm":
            return mamba2_mixer(g, h, L.attn, c.ssm, *self.kv[i], c.eps)
        return self_attention(g, h, L.attn, self.kv[i], c.attn, self.layer_rope(i), self.attn_specs[i], c.eps)

    def ffn(self, g: GraphBuilder, i: int, h: Tensor) -> Tensor:
        e = self.layers[i].ffn
        if not isinstance(e, GraniteExperts):
            return super().ffn(g, i, h)
        out = g.moe(h, e.router, e.gate, e.up, e.down, self.config.n_expert_used, gating="softmax", norm_topk=True)
        if e.shared is not None:
            out = g.add(out, feed_forward(g, h, e.shared))
        return out
