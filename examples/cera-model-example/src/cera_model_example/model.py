"""The "cera-example" architecture: a small pre-norm transformer decoder.

Per layer: LayerNorm -> multi-head attention with RoPE (NeoX pairing) and grouped KV
heads -> residual; LayerNorm -> GELU feed-forward -> residual. Then a final LayerNorm and
an untied output projection. It is deliberately plain, so that the file shows the three
things every family writes:

1. the config, read from the file's ``cera-example.*`` metadata keys (`read_config`);
2. the weights, looked up by GGUF tensor name (`ExampleModel.__init__`);
3. the forward pass, written only with the backend's op vocabulary (`forward`).

The model never imports a backend and never touches the weights' bytes: the backend it
is handed uploads them (keeping quantized types quantized) and runs the ops.

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
import numpy as np

from cera.backend import AttentionSpec, KVLayerSpec, RopeSpec
from cera.errors import ModelConfigError
from cera.hparams import HParams
from cera.model import Model

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
    required_ops = ("embedding", "linear", "layer_norm", "rope", "attention", "gelu", "add")

    def __init__(self, gguf, backend):
        super().__init__(gguf, backend)
        self.config = c = read_config(gguf)
        w = self.weights  # uploads each tensor to the backend on first use
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

    @property
    def n_vocab(self) -> int:
        return self.output.shape[1]  # GGML order: (ne0=n_embd, ne1=n_vocab)

    def state_layout(self) -> list[KVLayerSpec]:
        c = self.config
        return [KVLayerSpec(n_kv_heads=c.n_head_kv, k_dim=c.head_dim, v_dim=c.head_dim)] * c.n_layer

    def forward(self, state, tokens: np.ndarray, positions: np.ndarray, output: str = "last"):
        ops, c = self.backend, self.config
        n = len(tokens)
        x = ops.embedding(self.tok_embd, tokens)  # [n, n_embd]
        for i, L in enumerate(self.layers):
            h = ops.layer_norm(x, L["attn_norm.weight"], L["attn_norm.bias"], c.eps)
            q = ops.reshape(ops.linear(h, L["attn_q.weight"]), (n, c.n_head, c.head_dim))
            k = ops.reshape(ops.linear(h, L["attn_k.weight"]), (n, c.n_head_kv, c.head_dim))
            v = ops.reshape(ops.linear(h, L["attn_v.weight"]), (n, c.n_head_kv, c.head_dim))
            q = ops.rope(q, positions, self.rope)
            k = ops.rope(k, positions, self.rope)
            a = ops.attention(q, k, v, state, i, positions, self.attn)  # [n, n_head * head_dim]
            x = ops.add(x, ops.linear(a, L["attn_output.weight"]))
            h = ops.layer_norm(x, L["ffn_norm.weight"], L["ffn_norm.bias"], c.eps)
            h = ops.linear(ops.unary("gelu", ops.linear(h, L["ffn_up.weight"])), L["ffn_down.weight"])
            x = ops.add(x, h)
        if output == "none":
            return None
        if output == "last":
            x = ops.rows(x, slice(n - 1, n))
        x = ops.layer_norm(x, *self.output_norm, c.eps)
        return ops.to_numpy(ops.linear(x, self.output))
