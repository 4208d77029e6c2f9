"""mamba2: Mamba-2 state-space layers, and the mixer that hybrid families share.

Each layer is ``x + mixer(rms_norm(x))``; the mixer, as llama.cpp's build_mamba2_layer:

    z, xBC, dt = split(ssm_in h)                     gate, conv input, time steps
    xBC = silu(causal_conv(xBC) + conv_bias)         kernel-1 inputs carried as conv state
    x, B, C = split(xBC)                             [heads, head_dim], [groups, d_state] x2
    y = ssm_scan(x, dt + dt_bias, A, B, C) + x * D   the recurrent state carried per head
    y = group_rms_norm(y * silu(z)) * norm           gated, normed per group
    out = ssm_out y

A is stored as -exp(A_log) by the converter. The conv and SSM state are declared per
layer (`cera.state.ShortConv`, `SSMState`): a session snapshots them where it cannot
rewind them.
"""

from __future__ import annotations

import attrs
from gguf.constants import MODEL_TENSOR as T
from gguf.constants import Keys as K

from cera.errors import InvalidModelFile, ModelConfigError
from cera.graph.builder import GraphBuilder, Tensor
from cera.blocks.hparams import HParams
from cera.blocks.layers import tensor_name
from cera.model import Model
from cera.state import ShortConv, SSMState


@attrs.frozen
class SSMConfig:
    d_conv: int
    d_inner: int
    d_state: int
    n_head: int  # ssm.time_step_rank: Mamba-2's head count
    n_group: int

    @property
    def head_dim(self) -> int:
        return self.d_inner // self.n_head

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.n_group * self.d_state


def read_ssm_config(hp: HParams) -> SSMConfig:
    c = SSMConfig(
        d_conv=hp.req(K.SSM.CONV_KERNEL),
        d_inner=hp.req(K.SSM.INNER_SIZE),
        d_state=hp.req(K.SSM.STATE_SIZE),
        n_head=hp.req(K.SSM.TIME_STEP_RANK),
        n_group=hp.req(K.SSM.GROUP_COUNT),
    )
    if min(c.d_conv - 1, c.d_inner, c.d_state, c.n_head, c.n_group) < 1 or c.d_inner % c.n_head or c.n_head % c.n_group:
        raise ModelConfigError(f"{hp.gguf.path}: SSM sizes {c} do not fit together")
    return c


@attrs.define
class Mamba2Weights:
    ssm_in: object
    conv: object
    conv_b: object
    dt_b: object
    A: object
    D: object
    norm: object
    out: object

    @classmethod
    def load(cls, w, i: int, c: SSMConfig) -> Mamba2Weights:
        m = cls(
            ssm_in=w[tensor_name(T.SSM_IN, i)],
            conv=w[tensor_name(T.SSM_CONV1D, i)],
            conv_b=w.get(tensor_name(T.SSM_CONV1D, i, "bias")),
            dt_b=w[tensor_name(T.SSM_DT, i, "bias")],
            A=w[tensor_name(T.SSM_A, i, kind="")],
            D=w[tensor_name(T.SSM_D, i, kind="")],
            norm=w.get(tensor_name(T.SSM_NORM, i)),
            out=w[tensor_name(T.SSM_OUT, i)],
        )
        want_in = 2 * c.d_inner + 2 * c.n_group * c.d_state + c.n_head
        if m.ssm_in.shape[1] != want_in or m.conv.shape != (c.d_conv, c.conv_dim) or m.A.shape != (1, c.n_head):
            raise InvalidModelFile(
                w.source, None, f"layer {i}: SSM tensors ssm_in {m.ssm_in.shape}, conv {m.conv.shape}, A {m.A.shape} "
                f"do not match the metadata {c}",
            )  # fmt: skip
        return m


def mamba2_mixer(g: GraphBuilder, h: Tensor, m: Mamba2Weights, c: SSMConfig, conv_state, ssm_state,
                 eps: float) -> Tensor:  # fmt: skip
    n = h.shape[0]
    gn = c.n_group * c.d_state
    # slices of one projection are strided views: the ops below want them contiguous
    z, xBC, dt = (g.copy(t) for t in g.split(g.linear(h, m.ssm_in), (c.d_inner, c.conv_dim, c.n_head)))
    xBC = g.conv1d_causal(xBC, m.conv, conv_state)
    if m.conv_b is not None:
        xBC = g.add(xBC, m.conv_b)
    xBC = g.unary("silu", xBC)
    x, B, C = (g.copy(t) for t in g.split(xBC, (c.d_inner, gn, gn)))
    x = g.reshape(x, (n, c.n_head, c.head_dim))
    B = g.reshape(B, (n, c.n_group, c.d_state))
    C = g.reshape(C, (n, c.n_group, c.d_state))
    dt = g.add(dt, m.dt_b)
    y = g.ssm_scan(x, dt, m.A, B, C, ssm_state)
    y = g.add(y, g.mul(x, m.D))  # D: one value per head
    y = g.glu("swiglu", z, g.reshape(y, (n, c.d_inner)))
    if m.norm is not None:
        if c.n_group == 1:
            y = g.rms_norm(y, m.norm, eps)
        else:  # each group normed over its own channels, then its own weights
            y = g.rms_norm(g.reshape(y, (n, c.n_group, c.d_inner // c.n_group)), None, eps)
            y = g.reshape(g.mul(y, m.norm), (n, c.d_inner))
    return g.linear(y, m.out)


def declare_ssm_state(model: Model, c: SSMConfig):
    conv = model.state.add(ShortConv(c.conv_dim, c.d_conv))
    ssm = model.state.add(SSMState(c.n_head, c.head_dim, c.d_state))
    return conv, ssm


@attrs.frozen
class Mamba2Config:
    n_layer: int
    n_embd: int
    n_vocab: int
    n_ctx_train: int
    eps: float
    ssm: SSMConfig


class Mamba2Model(Model):
    family = "mamba2"

    @classmethod
    def read_config(cls, gguf) -> Mamba2Config:
        hp = HParams(gguf, cls.family)
        tokens = gguf.get("tokenizer.ggml.tokens")
        config = Mamba2Config(
            n_layer=hp.req(K.LLM.BLOCK_COUNT),
            n_embd=hp.req(K.LLM.EMBEDDING_LENGTH),
            n_vocab=hp.opt(K.LLM.VOCAB_SIZE, len(tokens) if tokens is not None else 0, int),
            n_ctx_train=hp.opt(K.LLM.CONTEXT_LENGTH, 0, int),
            eps=hp.req(K.Attention.LAYERNORM_RMS_EPS, float),
            ssm=read_ssm_config(hp),
        )
        # the converter writes these as placeholders (a Mamba-2 layer has neither)
        if hp.opt(K.LLM.FEED_FORWARD_LENGTH, 0, int) or hp.opt(K.Attention.HEAD_COUNT, 0, int):
            raise ModelConfigError(f"{gguf.path}: a mamba2 file with a feed-forward or attention size is not Mamba-2")
        hp.check_all_understood()
        return config

    def __init__(self, config: Mamba2Config, weights):
        super().__init__(config, weights)
        w = weights
        self.tok_embd = w[tensor_name(T.TOKEN_EMBD)]
        self.output_norm = w[tensor_name(T.OUTPUT_NORM)]
        self.output = w.get(tensor_name(T.OUTPUT)) or self.tok_embd
        self.norms = [w[tensor_name(T.ATTN_NORM, i)] for i in range(config.n_layer)]
        self.mixers = [Mamba2Weights.load(w, i, config.ssm) for i in range(config.n_layer)]
        self.states = [declare_ssm_state(self, config.ssm) for _ in range(config.n_layer)]

    @property
    def n_vocab(self) -> int:
        return self.output.shape[1]

    def forward(self, g: GraphBuilder) -> None:
        c = self.config
        x = g.embedding(self.tok_embd, g.tokens)
        for i in range(c.n_layer):
            h = mamba2_mixer(g, g.rms_norm(x, self.norms[i], c.eps), self.mixers[i], c.ssm, *self.states[i], c.eps)
            if i == c.n_layer - 1:
                x, h = g.output_rows(x), g.output_rows(h)
            x = g.add(h, x)
        h = g.rms_norm(g.output_rows(x), self.output_norm, c.eps)
        g.emit_hidden(h)
        if g.wants_logits:
            g.emit_logits(g.linear(h, self.output))
