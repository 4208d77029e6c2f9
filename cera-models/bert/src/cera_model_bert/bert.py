"""bert and nomic-bert: bidirectional encoders for text embeddings, as llama.cpp builds them.

    x = LN(tok_embd[ids] + token_types[0] (+ position_embd[pos] for bert))
    per layer:  x = LN(x + out(attention_full(q, k, v)));  x = LN(x + ffn(x))

Attention sees every token of its own text (no cache: each text is one pass). `bert`
projects with biases and uses a GELU feed-forward (tanh approximation, as ggml_gelu);
`nomic-bert` rotates queries and keys (NeoX RoPE over the whole head), has no biases and a
SwiGLU feed-forward. The head emits the last hidden states (no logits); the pooling the
file asks for (`pooling_type`) is the model's `pooling`, which `cera.generation.embedding` applies.
"""

from __future__ import annotations

import math

import attrs
from gguf.constants import MODEL_TENSOR as T
from gguf.constants import Keys as K

from cera.errors import ModelConfigError, UnsupportedOperation
from cera.graph.builder import GraphBuilder
from cera.blocks.hparams import HParams
from cera.blocks.layers import tensor_name
from cera.model import Model
from cera.graph.ops import AttentionSpec, RopeSpec

# gguf's PoolingType values
POOLINGS = {0: "none", 1: "mean", 2: "cls", 3: "last"}


@attrs.frozen
class BertConfig:
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    eps: float
    n_ctx_train: int
    pooling: str
    rope: RopeSpec | None  # nomic-bert


def read_bert_config(gguf, family: str, rope: bool) -> BertConfig:
    hp = HParams(gguf, family)
    n_layer = hp.req(K.LLM.BLOCK_COUNT)
    n_embd = hp.req(K.LLM.EMBEDDING_LENGTH)
    n_head = hp.req(K.Attention.HEAD_COUNT)
    n_head_kv = hp.opt(K.Attention.HEAD_COUNT_KV, n_head, int)
    if min(n_layer, n_embd, n_head, n_head_kv) < 1 or n_embd % n_head or n_head % n_head_kv:
        raise ModelConfigError(f"{gguf.path}: {n_layer} layers of {n_embd} with {n_head}/{n_head_kv} heads do not fit")
    if hp.opt(K.Attention.CAUSAL, False, bool):
        raise ModelConfigError(
            f"{gguf.path}: {hp.key('attention.causal')} is true; the {family} family is a bidirectional encoder"
        )
    pooling = hp.opt(K.LLM.POOLING_TYPE, 1, int)
    if pooling not in POOLINGS:
        raise ModelConfigError(f"{gguf.path}: {hp.key('pooling_type')} is {pooling}; cera pools by {POOLINGS}")
    head_dim = n_embd // n_head
    spec = None
    if rope:
        spec = RopeSpec(n_dims=head_dim, base=hp.opt("rope.freq_base", 10000.0, float), neox=True)
    config = BertConfig(
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=hp.req(K.LLM.FEED_FORWARD_LENGTH),
        eps=hp.req(K.Attention.LAYERNORM_EPS, float),
        n_ctx_train=hp.opt(K.LLM.CONTEXT_LENGTH, 512, int),
        pooling=POOLINGS[pooling],
        rope=spec,
    )
    hp.check_all_understood()
    return config


@attrs.define
class BertLayer:
    qkv: object
    qkv_b: object
    q: object
    q_b: object
    k: object
    k_b: object
    v: object
    v_b: object
    o: object
    o_b: object
    attn_norm: tuple
    up: object
    up_b: object
    gate: object
    down: object
    down_b: object
    out_norm: tuple


class BertModel(Model):
    family = "bert"
    rope = False  # nomic-bert rotates queries and keys
    positions = True  # bert learns absolute position embeddings

    @classmethod
    def read_config(cls, gguf) -> BertConfig:
        return read_bert_config(gguf, cls.family, cls.rope)

    def __init__(self, config: BertConfig, weights):
        super().__init__(config, weights)
        w = weights

        def opt(t, i=None, kind="weight"):
            return w.get(tensor_name(t, i, kind))

        def req(t, i=None, kind="weight"):
            return w[tensor_name(t, i, kind)]

        self.tok_embd = req(T.TOKEN_EMBD)
        self.type_embd = opt(T.TOKEN_TYPES)
        self.pos_embd = req(T.POS_EMBD) if self.positions else None
        self.embd_norm = (req(T.TOKEN_EMBD_NORM), req(T.TOKEN_EMBD_NORM, kind="bias"))
        self.layers = []
        for i in range(config.n_layer):
            fused = opt(T.ATTN_QKV, i)
            self.layers.append(BertLayer(
                qkv=fused, qkv_b=opt(T.ATTN_QKV, i, "bias"),
                q=None if fused else req(T.ATTN_Q, i), q_b=opt(T.ATTN_Q, i, "bias"),
                k=None if fused else req(T.ATTN_K, i), k_b=opt(T.ATTN_K, i, "bias"),
                v=None if fused else req(T.ATTN_V, i), v_b=opt(T.ATTN_V, i, "bias"),
                o=req(T.ATTN_OUT, i), o_b=opt(T.ATTN_OUT, i, "bias"),
                attn_norm=(req(T.ATTN_OUT_NORM, i), req(T.ATTN_OUT_NORM, i, "bias")),
                up=req(T.FFN_UP, i), up_b=opt(T.FFN_UP, i, "bias"),
                gate=self.load_gate(w, i),
                down=req(T.FFN_DOWN, i), down_b=opt(T.FFN_DOWN, i, "bias"),
                out_norm=(req(T.LAYER_OUT_NORM, i), req(T.LAYER_OUT_NORM, i, "bias")),
            ))  # fmt: skip
        head_dim = config.n_embd // config.n_head
        self.attn_spec = AttentionSpec(scale=1.0 / math.sqrt(head_dim), causal=False)
        self.pooling = config.pooling

    def load_gate(self, w, i):
        return None  # bert's feed-forward is up -> GELU -> down

    @property
    def n_vocab(self) -> int:
        return 0  # an encoder: no output head

    def forward(self, g: GraphBuilder) -> None:
        if g.wants_logits:
            raise UnsupportedOperation(f"{self.family} is an embedding encoder: it has no logits (use embed)")
        c = self.config
        n = g.tokens.shape[0]
        x = g.embedding(self.tok_embd, g.tokens)
        if self.type_embd is not None:
            # Every token is of type 0 ("sentence A"), as in llama.cpp: add row 0 of the
            # type table. The graph has no constant ids, so row 0 is looked up with ids
            # that are 0 by construction: the argmax of a one-column slice.
            zeros = g.argmax(g.copy(g.split(x, (1, c.n_embd - 1))[0]))
            x = g.add(x, g.embedding(self.type_embd, zeros))
        if self.pos_embd is not None:
            x = g.add(g.embedding(self.pos_embd, g.positions), x)
        x = g.layer_norm(x, *self.embd_norm, c.eps)
        H, Hkv, hd = c.n_head, c.n_head_kv, c.n_embd // c.n_head
        for i, L in enumerate(self.layers):
            if L.qkv is not None:
                q, k, v = g.split(g.linear(x, L.qkv, L.qkv_b), (H * hd, Hkv * hd, Hkv * hd))
            else:
                q, k, v = g.linear(x, L.q, L.q_b), g.linear(x, L.k, L.k_b), g.linear(x, L.v, L.v_b)
            q, k, v = g.reshape(q, (n, H, hd)), g.reshape(k, (n, Hkv, hd)), g.reshape(v, (n, Hkv, hd))
            if c.rope is not None:
                q, k = g.rope(q, g.positions, c.rope), g.rope(k, g.positions, c.rope)
            h = g.linear(g.attention_full(q, k, v, self.attn_spec), L.o, L.o_b)
            if i == c.n_layer - 1:
                x, h = g.output_rows(x), g.output_rows(h)
            x = g.layer_norm(g.add(h, x), *L.attn_norm, c.eps)
            if L.gate is not None:
                h = g.glu("swiglu", g.linear(x, L.gate), g.linear(x, L.up, L.up_b))
            else:
                h = g.unary("gelu", g.linear(x, L.up, L.up_b))
            h = g.linear(h, L.down, L.down_b)
            x = g.layer_norm(g.add(h, x), *L.out_norm, c.eps)
        g.emit_hidden(g.output_rows(x))


class NomicBertModel(BertModel):
    family = "nomic-bert"
    rope = True
    positions = False

    def load_gate(self, w, i):
        return w[tensor_name(T.FFN_GATE, i)]
