"""starcoder2 (StarCoder2): a pre-norm decoder with LayerNorm and a plain GELU feed-forward.

Per layer, as llama.cpp's graph::

    x = x + o(attention(rope(q(LN(x))), rope(k(LN(x))), v(LN(x))))     biases on q, k, v, o
    x = x + down(gelu(up(LN(x))))                                          biases on up, down

then a final LayerNorm (with bias) and the output head, tied to the token embedding when
the file has no `output.weight`. RoPE pairs NeoX-style (the converter keeps the
checkpoint's rotate-half layout); the attention scale is 1/sqrt(head dimension).
"""

from __future__ import annotations

from gguf.constants import MODEL_TENSOR as T
from gguf.constants import Keys as K

from cera.blocks.decoder import DecoderConfig, DecoderModel, read_decoder_config
from cera.graph.builder import GraphBuilder, Tensor
from cera.blocks.layers import PlainFeedForwardWeights, tensor_name


class Starcoder2Model(DecoderModel):
    family = "starcoder2"
    neox_rope = True

    @classmethod
    def read_config(cls, gguf) -> DecoderConfig:
        config, hp = read_decoder_config(gguf, cls.family, neox=True, eps_key=K.Attention.LAYERNORM_EPS)
        hp.check_all_understood()
        return config

    def __init__(self, config: DecoderConfig, weights):
        super().__init__(config, weights)
        w = weights
        # the norms' biases (the decoder binds only their weights)
        self.norm_biases = [
            (w[tensor_name(T.ATTN_NORM, i, "bias")], w[tensor_name(T.FFN_NORM, i, "bias")])
            for i in range(config.n_layer)
        ]
        self.output_norm_bias = w[tensor_name(T.OUTPUT_NORM, kind="bias")]

    def load_ffn(self, w, i: int) -> PlainFeedForwardWeights:
        return PlainFeedForwardWeights.load(w, i)

    def ffn(self, g: GraphBuilder, i: int, h: Tensor) -> Tensor:
        return self.layers[i].ffn.apply(g, h, "gelu")

    def forward(self, g: GraphBuilder) -> None:
        c = self.config
        x = g.embedding(self.tok_embd, g.tokens)
        for i, L in enumerate(self.layers):
            attn_b, ffn_b = self.norm_biases[i]
            h = self.mixer(g, i, g.layer_norm(x, L.attn_norm, attn_b, c.eps))
            if i == c.n_layer - 1:  # the rest of the last layer: only the rows whose outputs are wanted
                x, h = g.output_rows(x), g.output_rows(h)
            x = g.add(x, h)
            x = g.add(x, self.ffn(g, i, g.layer_norm(x, L.ffn_norm, ffn_b, c.eps)))
        h = g.layer_norm(g.output_rows(x), self.output_norm, self.output_norm_bias, c.eps)
        g.emit_hidden(h)
        if g.wants_logits:
            g.emit_logits(g.linear(h, self.output, self.output_bias))
