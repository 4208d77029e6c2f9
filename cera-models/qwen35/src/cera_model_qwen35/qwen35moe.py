"""qwen35moe: Qwen3.5 with routed experts in every layer (`experts.routed_ffn`: softmax
router, renormalised top-k, a sigmoid-gated shared expert); the mixers are qwen35's."""

from __future__ import annotations

import attrs

from cera.graph.builder import GraphBuilder, Tensor

from .experts import ExpertsConfig, RoutedExperts, read_experts_config, routed_ffn
from .qwen35 import Qwen35Config, Qwen35Model, read_qwen35_config


@attrs.frozen
class Qwen35MoeConfig(Qwen35Config):
    experts: ExpertsConfig | None = None


class Qwen35MoeModel(Qwen35Model):
    family = "qwen35moe"

    @classmethod
    def read_config(cls, gguf) -> Qwen35MoeConfig:
        config, hp, delta = read_qwen35_config(cls, gguf, dense_ffn=False)
        experts = read_experts_config(hp)
        hp.check_all_understood()
        return Qwen35MoeConfig(**attrs.asdict(config, recurse=False), delta=delta, experts=experts)

    def load_ffn(self, w, i: int):
        return RoutedExperts.load(w, i, self.config.n_embd, self.config.experts)

    def ffn(self, g: GraphBuilder, i: int, h: Tensor) -> Tensor:
        return routed_ffn(g, h, self.layers[i].ffn, self.config.experts)
