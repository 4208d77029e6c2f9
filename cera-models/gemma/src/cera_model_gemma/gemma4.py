"""gemma4 (text, dense): gemma3's sandwich-normed decoder with layers of two shapes.

Per layer::

    h = post_attn_norm(attention(attn_norm(x)));  x = x + h
    h = post_ffw_norm(geglu_ffn(ffn_norm(x)));     x = (x + h) * layer_output_scale

Sliding-window layers (the per-layer pattern of the file) and full layers differ in head
dimension (``attention.key_length_swa`` / ``key_length``), KV head count (one count per
layer), rotated dimensions and RoPE base (``rope.freq_base_swa``, no scaling). Queries and
keys are RMS-normed per head with weights, values without; attention logits are not
scaled (scale 1). Full layers may have no ``attn_v`` (values are the keys' projection,
normed as values). Full layers rotate with the file's ``rope_freqs``, whose factors of
1e30 leave the unrotated part of "proportional" RoPE in place. Norm weights are used as
stored (no "+1"). Embeddings are scaled by sqrt(n_embd), final logits soft-capped.

Refused with a clear error, as cera does not compute them yet: layers that reuse another
layer's KV cache (``attention.shared_kv_layers``, Gemma 4 E2B/E4B), per-layer embeddings
(``embedding_length_per_layer_input``) and expert layers (``expert_count``, 26B-A4B).
"""

from __future__ import annotations

import math

import attrs

from cera.blocks.decoder import DecoderConfig, DecoderModel, read_decoder_config, read_sliding_windows
from cera.blocks.layers import AttentionShape, AttentionWeights, read_rope, tensor_name
from cera.errors import ModelConfigError
from cera.graph.builder import GraphBuilder, Tensor
from cera.graph.ops import AttentionSpec
from cera.state import AttentionKV
from gguf.constants import MODEL_TENSOR as T

LAYER_OUTPUT_SCALE = "blk.{bid}.layer_output_scale.weight"


@attrs.frozen
class Gemma4Config(DecoderConfig):
    head_dim_swa: int = 0


class Gemma4Model(DecoderModel):
    family = "gemma4"
    neox_rope = True

    @classmethod
    def read_config(cls, gguf) -> Gemma4Config:
        config, hp = read_decoder_config(gguf, cls.family, neox=True, mixed_kv_heads=True)
        c = config
        for key in ("attention.shared_kv_layers", "embedding_length_per_layer_input", "expert_count"):
            if hp.opt(key, 0, int):
                raise ModelConfigError(
                    f"{gguf.path}: {hp.key(key)} is {hp.opt(key, 0, int)}; cera's gemma4 family computes the dense "
                    f"Gemma 4 models only (no shared KV caches, per-layer embeddings or experts yet)"
                )
        if c.attn.head_dim_k != c.attn.head_dim_v:
            raise ModelConfigError(f"{gguf.path}: gemma4 needs equal key and value head dimensions, the file has "
                                   f"{c.attn.head_dim_k} and {c.attn.head_dim_v}")  # fmt: skip
        hd_swa = hp.opt("attention.key_length_swa", c.attn.head_dim_k, int)
        if hp.opt("attention.value_length_swa", hd_swa, int) != hd_swa or hd_swa < 1:
            raise ModelConfigError(f"{gguf.path}: {hp.key('attention.key_length_swa')} and "
                                   f"{hp.key('attention.value_length_swa')} must be one positive head dimension")  # fmt: skip
        n_rot_swa = hp.opt("rope.dimension_count_swa", c.rope.n_dims, int)
        if n_rot_swa < 0 or n_rot_swa > hd_swa or n_rot_swa % 2:
            raise ModelConfigError(f"{gguf.path}: {hp.key('rope.dimension_count_swa')} is {n_rot_swa}; it must be "
                                   f"even and at most the sliding layers' head dimension {hd_swa}")  # fmt: skip
        # llama.cpp's gemma4 scales attention logits by 1 whatever the file says
        hp.ignore("attention.scale")
        for key in ("attention.sliding_window", "attention.sliding_window_pattern"):
            if not hp.has(key):
                raise ModelConfigError(f"{gguf.path}: the gemma4 family needs metadata key {hp.key(key)!r} (which "
                                       f"layers slide, and how far), which the file lacks")  # fmt: skip
        windows = read_sliding_windows(hp, c.n_layer, None, 0)
        config = Gemma4Config(
            **attrs.asdict(c, recurse=False) | dict(
                norm="sandwich",
                activation="geglu",
                windows=windows,
                rope_local=read_rope(hp, n_rot_swa, neox=True, base=hp.opt("rope.freq_base_swa", 10000.0, float),
                                     freq_scale=1.0),
                attention_scale=1.0,
                final_softcap=hp.opt("final_logit_softcapping", 0.0, float) or None,
                embedding_scale=math.sqrt(c.n_embd),
            ),
            head_dim_swa=hd_swa,
        )  # fmt: skip
        hp.check_all_understood()
        return config

    def __init__(self, config: Gemma4Config, weights):
        super().__init__(config, weights)
        self.out_scales = []
        for i in range(config.n_layer):
            s = weights.host(LAYER_OUTPUT_SCALE.format(bid=i))
            if s is not None and s.size != 1:
                raise ModelConfigError(f"{weights.source}: {LAYER_OUTPUT_SCALE.format(bid=i)} holds {s.size} values; it must hold one")
            self.out_scales.append(None if s is None else float(s.ravel()[0]))

    def shape(self, i: int) -> AttentionShape:
        c = self.config
        hd = c.head_dim_swa if c.windows[i] is not None else c.attn.head_dim_k
        return AttentionShape(c.attn.n_head, c.kv_heads[i], hd, hd)

    def load_mixer(self, w, i: int) -> AttentionWeights:
        def opt(t):
            return w.get(tensor_name(t, i))

        return AttentionWeights(
            q=w[tensor_name(T.ATTN_Q, i)], k=w[tensor_name(T.ATTN_K, i)], v=opt(T.ATTN_V), o=w[tensor_name(T.ATTN_OUT, i)],
            q_norm=w[tensor_name(T.ATTN_Q_NORM, i)], k_norm=w[tensor_name(T.ATTN_K_NORM, i)],
        )  # fmt: skip

    def declare_state(self, i: int):
        a = self.shape(i)
        return self.state.add(AttentionKV(a.n_head_kv, a.head_dim_k, a.head_dim_v, window=self.config.windows[i],
                                          rope=self.layer_rope(i)))  # fmt: skip

    def mixer(self, g: GraphBuilder, i: int, h: Tensor) -> Tensor:
        c, L, a = self.config, self.layers[i].attn, self.shape(i)
        n = h.shape[0]
        rope = self.layer_rope(i)
        q = g.rms_norm(g.reshape(g.linear(h, L.q), (n, a.n_head, a.head_dim_k)), L.q_norm, c.eps)
        k_proj = g.linear(h, L.k)
        v_proj = k_proj if L.v is None else g.linear(h, L.v)
        k = g.rms_norm(g.reshape(k_proj, (n, a.n_head_kv, a.head_dim_k)), L.k_norm, c.eps)
        v = g.rms_norm(g.reshape(v_proj, (n, a.n_head_kv, a.head_dim_v)), None, c.eps)
        q, k = g.rope(q, g.positions, rope), g.rope(k, g.positions, rope)
        out = g.attention(q, k, v, self.kv[i], AttentionSpec(scale=1.0, window=c.windows[i]))
        return g.linear(out, L.o)

    def forward(self, g: GraphBuilder) -> None:
        c = self.config
        x = g.scale(g.embedding(self.tok_embd, g.tokens), c.embedding_scale)
        for i, L in enumerate(self.layers):
            h = self.mixer(g, i, g.rms_norm(x, L.attn_norm, c.eps))
            if i == c.n_layer - 1:  # the rest of the last layer: only the rows whose outputs are wanted
                x, h = g.output_rows(x), g.output_rows(h)
            x = g.add(x, g.rms_norm(h, L.post_attn_norm, c.eps))
            h = self.ffn(g, i, g.rms_norm(x, L.ffn_norm, c.eps))
            x = g.add(x, g.rms_norm(h, L.post_ffw_norm, c.eps))
            if self.out_scales[i] is not None:
                x = g.scale(x, self.out_scales[i])
        self.head(g, x)
