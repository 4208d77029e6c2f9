"""qwen3next: Qwen3-Next, the hybrid Qwen3.5 grew from. As qwen35moe, with three differences
(llama.cpp's llama_model_qwen3next graph): plain NeoX RoPE over ``rope.dimension_count``
dims (no sections), beta and alpha from one ``ssm_ba`` projection (per key head its group's
betas then alphas), and value heads paired with key heads in groups (head h reads key head
h // (value_heads / key_heads): the checkpoint's repeat-interleave, which Qwen3.5's
converter reorders away)."""

from __future__ import annotations

from cera.errors import ModelConfigError

from .qwen35moe import Qwen35MoeModel


class Qwen3NextModel(Qwen35MoeModel):
    family = "qwen3next"
    grouped_heads = True

    @classmethod
    def read_config(cls, gguf):
        if gguf.metadata.get("qwen3next.rope.dimension_sections") is not None:
            raise ModelConfigError(f"{gguf.path}: qwen3next.rope.dimension_sections: Qwen3-Next has no M-RoPE sections")
        return super().read_config(gguf)
