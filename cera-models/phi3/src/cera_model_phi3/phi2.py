"""phi2 (Phi-1.5, Phi-2): attention and a GELU feed-forward side by side on one LayerNorm.

Per layer, as llama.cpp's graph::

    h = LN(x)                                               (with bias)
    x = x + o(attention(rope(q(h)) / sqrt(d), rope(k(h)), v(h))) + down(gelu(up(h)))

with biases on every projection (q/k/v fused or not), RoPE over the first
`rope.dimension_count` dimensions of each head in NeoX pairs (partial rotary), the query
scaled before attention (llama.cpp scales Q rather than the scores, which matters where
Q is rounded to f16), then a final LayerNorm and an output projection with a bias.
"""

from __future__ import annotations

import math

import attrs
from gguf.constants import MODEL_TENSOR as T
from gguf.constants import Keys as K

from cera.blocks.decoder import DecoderConfig, DecoderModel, read_decoder_config
from cera.graph.builder import GraphBuilder, Tensor
from cera.blocks.layers import PlainFeedForwardWeights, tensor_name


class Phi2Model(DecoderModel):
    family = "phi2"
    neox_rope = True

    @classmethod
    def read_config(cls, gguf) -> DecoderConfig:
        config, hp = read_decoder_config(gguf, cls.family, neox=True, eps_key=K.Attention.LAYERNORM_EPS)
        hp.check_all_understood()
        return attrs.evolve(config, q_scale=1.0 / math.sqrt(config.attn.head_dim_k))

    def __init__(self, config: DecoderConfig, weights):
        super().__init__(config, weights)
        w = weights
        self.attn_norm_biases = [w[tensor_name(T.ATTN_NORM, i, "bias")] for i in range(config.n_layer)]
        self.output_norm_bias = w[tensor_name(T.OUTPUT_NORM, kind="bias")]

    def ffn_norm_name(self, w, i: int) -> str:
        # One norm feeds both branches: the decoder's "feed-forward norm" is the attention norm.
        return tensor_name(T.ATTN_NORM, i)

    def load_ffn(self, w, i: int) -> PlainFeedForwardWeights:
        return PlainFeedForwardWeights.load(w, i)

    def ffn(self, g: GraphBuilder, i: int, h: Tensor) -> Tensor:
        return self.layers[i].ffn.apply(g, h, "gelu")

    def forward(self, g: GraphBuilder) -> None:
        c = self.config
        x = g.embedding(self.tok_embd, g.tokens)
        for i, L in enumerate(self.layers):
            h = g.layer_norm(x, L.attn_norm, self.attn_norm_biases[i], c.eps)
            a = self.mixer(g, i, h)
            if i == c.n_layer - 1:  # the rest of the last layer: only the rows whose outputs are wanted
                x, h, a = g.output_rows(x), g.output_rows(h), g.output_rows(a)
            x = g.add(g.add(a, self.ffn(g, i, h)), x)
        h = g.layer_norm(g.output_rows(x), self.output_norm, self.output_norm_bias, c.eps)
        g.emit_hidden(h)
        if g.wants_logits:
            g.emit_logits(g.linear(h, self.output, self.output_bias))
