"""nanbeige (Nanbeige 4.x): llama whose stack of layers runs ``num_loops`` times over.

The file stores each layer once; pass j of layer i reuses its weights with a KV cache of
its own (llama.cpp's logical layer i + j * n_layer). Between passes the hidden state goes
through the final norm, unless ``skip_loop_final_norm``::

    for pass in range(num_loops):
        for layer in layers:  x = x + attn(norm(x));  x = x + ffn(norm(x))
        if pass is not the last and not skip_loop_final_norm:  x = output_norm(x)
    logits = output(output_norm(x))
"""

from __future__ import annotations

import attrs

from cera.blocks.decoder import DecoderConfig, DecoderModel, read_decoder_config
from cera.errors import ModelConfigError
from cera.graph.builder import GraphBuilder

MAX_LOGICAL_LAYERS = 512  # llama.cpp's LLAMA_MAX_LAYERS bounds layers x loops


@attrs.frozen
class NanbeigeConfig(DecoderConfig):
    n_loops: int = 1
    loop_norm: bool = True


class NanbeigeModel(DecoderModel):
    family = "nanbeige"

    @classmethod
    def read_config(cls, gguf) -> NanbeigeConfig:
        config, hp = read_decoder_config(gguf, cls.family)
        n_loops = hp.opt("num_loops", 1, int)
        skip = hp.opt("skip_loop_final_norm", False, bool)
        if not 1 <= n_loops or n_loops * config.n_layer > MAX_LOGICAL_LAYERS:
            raise ModelConfigError(
                f"{gguf.path}: {hp.key('num_loops')} is {n_loops}; it must be at least 1, and {config.n_layer} layers "
                f"run that many times at most {MAX_LOGICAL_LAYERS} layers in all"
            )
        hp.check_all_understood()
        return NanbeigeConfig(**attrs.asdict(config, recurse=False), n_loops=n_loops, loop_norm=not skip)

    def __init__(self, config: NanbeigeConfig, weights):
        super().__init__(config, weights)
        n = config.n_layer
        for _ in range(1, config.n_loops):  # later passes: the same weights, caches of their own
            for i in range(n):
                self.layers.append(self.layers[i])
                self.kv.append(self.declare_state(i))
                self.attn_specs.append(self.attn_specs[i])

    def layer_rope(self, i: int, n_ctx: int = 0):
        return super().layer_rope(i % self.config.n_layer, n_ctx)

    def forward(self, g: GraphBuilder) -> None:
        c = self.config
        x = g.embedding(self.tok_embd, g.tokens)
        last = len(self.layers) - 1
        for i, L in enumerate(self.layers):
            h = self.mixer(g, i, g.rms_norm(x, L.attn_norm, c.eps))
            if i == last:  # the rest of the last layer: only the rows whose outputs are wanted
                x, h = g.output_rows(x), g.output_rows(h)
            x = g.add(x, h)
            x = g.add(x, self.ffn(g, i, g.rms_norm(x, L.ffn_norm, c.eps)))
            if c.loop_norm and (i + 1) % c.n_layer == 0 and i < last:
                x = g.rms_norm(x, self.output_norm, c.eps)
        self.head(g, x)
