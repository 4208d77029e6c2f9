"""mistral3 (Ministral 3, the text model of Mistral 3): llama with YaRN and llama 4's
attention temperature.

YaRN's frequencies and magnitude come from the file's rope keys (`read_rope`, with the
``rope.scaling.yarn_log_multiplier`` the converter writes from ``mscale_all_dim``). With an
``attention.temperature_scale`` beta, the rotated queries of a row at position p are
multiplied by::

    1 + beta * ln(1 + floor(p / n_ctx_orig))

(``n_ctx_orig``: YaRN's original context), so the temperature is 1 within the original
context and grows by steps past it. The factor is a graph input the runtime computes from
the positions on the host, in llama.cpp's precision (float32 division, float64 logarithm).
"""

from __future__ import annotations

import attrs
import numpy as np
from gguf.constants import Keys as K

from cera.blocks.decoder import DecoderConfig, DecoderModel, read_decoder_config
from cera.errors import ModelConfigError
from cera.graph.builder import GraphBuilder, Tensor

TEMPERATURE_INPUT = "attn_temperature"


@attrs.frozen
class Mistral3Config(DecoderConfig):
    temperature_scale: float = 0.0  # beta; 0: no temperature
    temperature_floor: int = 0  # the positions per step of the temperature


class Mistral3Model(DecoderModel):
    family = "mistral3"

    @classmethod
    def read_config(cls, gguf) -> Mistral3Config:
        config, hp = read_decoder_config(gguf, cls.family)
        beta = hp.opt("attention.temperature_scale", 0.0, float)
        floor = config.rope.n_ctx_orig
        if beta != 0.0 and floor < 1:
            raise ModelConfigError(
                f"{gguf.path}: {hp.key('attention.temperature_scale')} is {beta}, which steps the attention "
                f"temperature every {hp.key('rope.scaling.original_context_length')} positions, but the file gives no "
                f"such context (nor {hp.key(K.LLM.CONTEXT_LENGTH)})"
            )
        hp.check_all_understood()
        return Mistral3Config(**attrs.asdict(config, recurse=False), temperature_scale=beta, temperature_floor=floor)

    def query_factor(self, g: GraphBuilder, i: int) -> Tensor | None:
        if self.config.temperature_scale == 0.0:
            return None
        if TEMPERATURE_INPUT not in g.inputs:
            a = self.config.attn
            g.input(TEMPERATURE_INPUT, (g.layout.n_tokens, a.n_head, a.head_dim_k))
        return g.inputs[TEMPERATURE_INPUT]

    def position_inputs(self, positions: np.ndarray) -> dict[str, np.ndarray]:
        c = self.config
        if c.temperature_scale == 0.0:
            return {}
        steps = np.floor(np.asarray(positions, np.float32) / np.float32(c.temperature_floor))
        beta = float(np.float32(c.temperature_scale))
        t = (np.log(steps.astype(np.float64) + 1.0) * beta + 1.0).astype(np.float32)
        return {TEMPERATURE_INPUT: np.broadcast_to(t[:, None, None], (len(t), c.attn.n_head, c.attn.head_dim_k))}
