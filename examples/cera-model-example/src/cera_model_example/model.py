"""The "cera-example" architecture: a small pre-norm transformer decoder.

Per layer: LayerNorm -> multi-head attention with RoPE (NeoX pairing) and grouped KV
heads -> residual; LayerNorm -> GELU feed-forward -> residual. Then a final LayerNorm and
an untied output projection. It is deliberately plain, so that the file shows the four
things every family writes:

1. the config, read from the file's ``cera-example.*`` metadata keys (`read_config`, a
   classmethod: it reads nothing but metadata);
2. the weights, bound by GGUF tensor name (`__init__`): ``weights[name]`` hands out a
   graph reference, and a tensor of the file the family never asks for is refused;
3. the state each layer carries between forward passes (`self.state.add(...)`): here an
   attention KV cache per layer; the handle it returns is what the layer's attention op
   gets (a hybrid family declares `ShortConv` or `SSMState` entries the same way);
4. the forward pass (`forward`), written with the op vocabulary on a graph builder ``g``:
   nothing is computed there, the backend compiles the graph and runs it.

The model never imports a backend and never touches weight bytes.

Metadata keys (``cera-example.`` prefix): ``block_count``, ``embedding_length``,
``feed_forward_length``, ``attention.head_count``, ``attention.head_count_kv``
(optional, default: head_count), ``attention.layer_norm_epsilon``, ``rope.freq_base``
(optional, default 10000), ``context_length``.

Tensors: ``token_embd.weight``; per layer ``blk.N.attn_norm.{weight,bias}``,
``blk.N.attn_{q,k,v,output}.weight``, ``blk.N.ffn_norm.{weight,bias}``,
``blk.N.ffn_{up,down}.weight``; then ``output_norm.{weight,bias}`` and ``output.weight``.
"""

from __future__ import annotations

import math

import attrs

from cera.errors import ModelConfigError
from cera.graph.builder import GraphBuilder
from cera.blocks.hparams import HParams
from cera.model import Model
from cera.graph.ops import AttentionSpec, RopeSpec
from cera.state import AttentionKV

ARCHITECTURE = "cera-example"


@attrs.frozen
class ExampleConfig:
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    eps: float
    rope_base: float
    n_ctx_train: int

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


def read_config(gguf) -> ExampleConfig:
    """Map the file's metadata to a config; any key we do not understand is an error."""
    hp = HParams(gguf, "example")
    config = ExampleConfig(
        n_layer=hp.req("block_count"),
        n_embd=hp.req("embedding_length"),
        n_ff=hp.req("feed_forward_length"),
        n_head=hp.req("attention.head_count"),
        n_head_kv=hp.opt("attention.head_count_kv", hp.req("attention.head_count"), int),
        eps=hp.req("attention.layer_norm_epsilon", float),
        rope_base=hp.opt("rope.freq_base", 10000.0, float),
        n_ctx_train=hp.opt("context_length", 0, int),
    )
    if config.n_embd % config.n_head or config.n_head % config.n_head_kv:
        raise ModelConfigError(
            f"{gguf.path}: {config.n_head} heads do not divide an embedding of {config.n_embd} "
            f"or cannot be grouped onto {config.n_head_kv} KV heads"
        )
    # Refuse keys we did not read: one might change the maths, and guessing gives wrong tokens.
    hp.check_all_understood()
    return config


class ExampleModel(Model):
    family = "example"

    @classmethod
    def read_config(cls, gguf) -> ExampleConfig:
        return read_config(gguf)

    def __init__(self, config: ExampleConfig, weights):
        super().__init__(config, weights)
        c = config
        w = weights  # w[name]: a reference the graph uses; the backend uploads the tensor
        self.tok_embd = w["token_embd.weight"]
        self.layers = [
            {
                name: w[f"blk.{i}.{name}"]
                for name in (
                    "attn_norm.weight",
                    "attn_norm.bias",
                    "attn_q.weight",
                    "attn_k.weight",
                    "attn_v.weight",
                    "attn_output.weight",
                    "ffn_norm.weight",
                    "ffn_norm.bias",
                    "ffn_up.weight",
                    "ffn_down.weight",
                )
            }
            for i in range(c.n_layer)
        ]
        self.output_norm = (w["output_norm.weight"], w["output_norm.bias"])
        self.output = w["output.weight"]
        self.rope = RopeSpec(n_dims=c.head_dim, base=c.rope_base, neox=True)
        self.attn = AttentionSpec(scale=1.0 / math.sqrt(c.head_dim))
        # The state: one KV cache per layer. The backend stores it (for many sequences at
        # once); the layer's attention op gets the handle.
        self.kv = [self.state.add(AttentionKV(c.n_head_kv, c.head_dim, c.head_dim, rope=self.rope)) for _ in range(c.n_layer)]

    @property
    def n_vocab(self) -> int:
        return self.output.shape[1]  # GGML order: (ne0=n_embd, ne1=n_vocab)

    def forward(self, g: GraphBuilder) -> None:
        c = self.config
        n = g.layout.n_tokens
        x = g.embedding(self.tok_embd, g.tokens)  # [n, n_embd]
        for i, L in enumerate(self.layers):
            h = g.layer_norm(x, L["attn_norm.weight"], L["attn_norm.bias"], c.eps)
            q = g.reshape(g.linear(h, L["attn_q.weight"]), (n, c.n_head, c.head_dim))
            k = g.reshape(g.linear(h, L["attn_k.weight"]), (n, c.n_head_kv, c.head_dim))
            v = g.reshape(g.linear(h, L["attn_v.weight"]), (n, c.n_head_kv, c.head_dim))
            q = g.rope(q, g.positions, self.rope)
            k = g.rope(k, g.positions, self.rope)
            a = g.attention(q, k, v, self.kv[i], self.attn)  # [n, n_head * head_dim]
            x = g.add(x, g.linear(a, L["attn_output.weight"]))
            h = g.layer_norm(x, L["ffn_norm.weight"], L["ffn_norm.bias"], c.eps)
            h = g.linear(g.unary("gelu", g.linear(h, L["ffn_up.weight"])), L["ffn_down.weight"])
            x = g.add(x, h)
        # The head: the rows whose outputs the caller wants (each sequence's last, or all),
        # normed; then hand the hidden states and logits to the graph, which adds what was
        # asked for (logits, argmax or top-k computed on the device, hidden states, ...).
        x = g.layer_norm(g.output_rows(x), *self.output_norm, c.eps)
        g.emit_hidden(x)
        g.emit_logits(g.linear(x, self.output))
