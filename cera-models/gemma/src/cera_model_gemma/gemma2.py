"""gemma2: a decoder with sandwich norms, GeGLU and alternating sliding-window layers.

Per layer::

    h = post_attn_norm(attention(attn_norm(x)));  x = x + h
    h = post_ffw_norm(geglu_ffn(ffn_norm(x)));     x = x + h

Embeddings are scaled by sqrt(n_embd). Layers follow a pattern of `swa_pattern` layers
of which all but the last use a sliding window (gemma2: every other layer). Attention
logits and final logits may be soft-capped. Norm weights in GGUF files already include
gemma's "+1".
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from cera.backend import AttentionSpec, RopeSpec
from cera.hparams import HParams
from cera.layers import AttentionShape, AttentionWeights, FeedForwardWeights, feed_forward, read_rope, self_attention
from cera.model import DecoderModel


@attrs.frozen
class GemmaConfig:
    n_layer: int
    n_embd: int
    n_ff: int
    attn: AttentionShape
    eps: float
    rope_global: RopeSpec
    rope_local: RopeSpec
    is_swa: tuple[bool, ...]
    window: int | None
    attention_scale: float
    attn_softcap: float | None
    final_softcap: float | None


class Gemma2Model(DecoderModel):
    family = "gemma2"
    required_ops = ("embedding", "linear", "rms_norm", "rope", "attention", "geglu", "add", "scale", "softcap")
    default_swa_pattern = 2
    default_window: int | None = 4096
    default_final_softcap = 30.0  # llama.cpp's default when the key is absent

    def __init__(self, gguf, backend):
        super().__init__(gguf, backend)
        hp = HParams(gguf, self.family)
        self.config = c = self.read_config(hp)
        hp.check_all_understood()
        self.load_head()
        w = self.weights
        self.layers = []
        for i in range(c.n_layer):
            norms = {
                n: w[f"blk.{i}.{n}.weight"] for n in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm")
            }
            self.layers.append((norms, AttentionWeights.load(w, i), FeedForwardWeights.load(w, i)))
        # The query is scaled before attention, not the logits, as in llama.cpp's graph.
        self.attn_specs = [
            AttentionSpec(scale=1.0, window=c.window if swa else None, softcap=c.attn_softcap) for swa in c.is_swa
        ]

    def read_config(self, hp: HParams) -> GemmaConfig:
        n_layer = hp.req("block_count")
        n_embd = hp.req("embedding_length")
        n_head = hp.req("attention.head_count")
        n_head_kv = hp.opt("attention.head_count_kv", n_head, int)
        head_dim = hp.opt("attention.key_length", n_embd // n_head, int)
        head_dim_v = hp.opt("attention.value_length", head_dim, int)
        n_rot = hp.opt("rope.dimension_count", head_dim, int)
        window = hp.opt("attention.sliding_window", self.default_window or 0, int) or None
        pattern = hp.opt("attention.sliding_window_pattern", self.default_swa_pattern, int)
        if window is None:
            is_swa = (False,) * n_layer
        else:
            # llama.cpp's set_swa_pattern: in each group of `pattern` layers, all but the last slide.
            is_swa = tuple(pattern == 0 or (i % pattern) < pattern - 1 for i in range(n_layer))
        rope_global = read_rope(hp, n_rot, neox=True)
        rope_local = self.local_rope(hp, n_rot, rope_global)
        # gemma's query_pre_attn_scalar: 1/sqrt(head_dim), except the 27B models (n_embd/n_head).
        scale = 1.0 / math.sqrt(n_embd / n_head if self.is_27b(n_layer) else head_dim)
        softcap = self.read_attn_softcap(hp)
        return GemmaConfig(
            n_layer=n_layer,
            n_embd=n_embd,
            n_ff=hp.req("feed_forward_length"),
            attn=AttentionShape(n_head, n_head_kv, head_dim, head_dim_v),
            eps=hp.req("attention.layer_norm_rms_epsilon", float),
            rope_global=rope_global,
            rope_local=rope_local,
            is_swa=is_swa,
            window=window,
            attention_scale=scale,
            attn_softcap=softcap,
            final_softcap=hp.opt("final_logit_softcapping", self.default_final_softcap, float) or None,
        )

    def is_27b(self, n_layer: int) -> bool:
        return n_layer == 46

    def read_attn_softcap(self, hp: HParams) -> float | None:
        return hp.opt("attn_logit_softcapping", 50.0, float) or None

    def local_rope(self, hp: HParams, n_rot: int, rope_global: RopeSpec) -> RopeSpec:
        """gemma2's sliding layers rotate like the global ones unless the file says otherwise."""
        base = hp.opt("rope.freq_base_swa", rope_global.base, float)
        return attrs.evolve(rope_global, base=base)

    def forward(self, state, tokens: np.ndarray, positions: np.ndarray, output: str = "last"):
        ops, c = self.backend, self.config
        x = ops.scale(ops.embedding(self.tok_embd, tokens), math.sqrt(c.n_embd))
        for i, (norms, attn, ffn) in enumerate(self.layers):
            rope = c.rope_local if c.is_swa[i] else c.rope_global
            h = ops.rms_norm(x, norms["attn_norm"], c.eps)
            h = self_attention(
                ops, h, attn, state, i, positions, c.attn, rope, self.attn_specs[i], c.eps, q_scale=c.attention_scale
            )
            x, h = self.last_layer_rows(i, output, x, h)
            if x is None:
                return None
            x = ops.add(x, ops.rms_norm(h, norms["post_attention_norm"], c.eps))
            h = feed_forward(ops, ops.rms_norm(x, norms["ffn_norm"], c.eps), ffn, "geglu")
            x = ops.add(x, ops.rms_norm(h, norms["post_ffw_norm"], c.eps))
        return self.head(x, output, c.eps, softcap=c.final_softcap)
