"""The gated delta-net mixer of Qwen3.5 and Qwen3-Next, as llama.cpp's build_layer_attn_linear:

    qkv, z = attn_qkv h, attn_gate h
    beta = sigmoid(ssm_beta h); g = softplus(ssm_alpha h + ssm_dt.bias) * ssm_a
    qkv = silu(causal_conv(qkv))                     kernel-1 inputs carried as conv state
    q, k, v = split(qkv)                             [key_heads, dim] x2, [value_heads, dim]
    q, k = l2_norm(q), l2_norm(k)                    rms_norm(eps / dim) / sqrt(dim), as ggml
    y = gated_delta_net(q, k, v, g, beta)            the [value_heads, dim, dim] state carried
    out = ssm_out (rms_norm(y) * ssm_norm * silu(z)) normed per value head

``ssm_a`` is stored as -exp(A_log) by the converter. The conv state is a `cera.state.ShortConv`
and the delta-rule state an `SSMState` of ``[value_heads, dim, dim]``: a session snapshots
both where it cannot rewind them (checkpoints, speculation, prefix caches).
"""

from __future__ import annotations

import math

import attrs
from gguf.constants import MODEL_TENSOR as T
from gguf.constants import Keys as K

from cera.blocks.hparams import HParams
from cera.blocks.layers import tensor_name
from cera.errors import InvalidModelFile, ModelConfigError
from cera.graph.builder import GraphBuilder, Tensor
from cera.model import Model
from cera.state import ShortConv, SSMState


@attrs.frozen
class DeltaNetConfig:
    d_conv: int
    n_k_heads: int  # ssm.group_count
    n_v_heads: int  # ssm.time_step_rank
    dim: int  # ssm.state_size: the key and the value head dimension

    @property
    def key_dim(self) -> int:
        return self.n_k_heads * self.dim

    @property
    def value_dim(self) -> int:
        return self.n_v_heads * self.dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim


def read_delta_net_config(hp: HParams) -> DeltaNetConfig:
    c = DeltaNetConfig(
        d_conv=hp.req(K.SSM.CONV_KERNEL),
        n_k_heads=hp.req(K.SSM.GROUP_COUNT),
        n_v_heads=hp.req(K.SSM.TIME_STEP_RANK),
        dim=hp.req(K.SSM.STATE_SIZE),
    )
    d_inner = hp.req(K.SSM.INNER_SIZE)
    if min(c.d_conv - 1, c.n_k_heads, c.n_v_heads, c.dim) < 1 or c.n_v_heads % c.n_k_heads:
        raise ModelConfigError(f"{hp.gguf.path}: linear-attention sizes {c} do not fit together")
    if d_inner != c.value_dim:  # llama.cpp's kernel needs value heads as wide as key heads
        raise ModelConfigError(
            f"{hp.gguf.path}: {hp.key('ssm.inner_size')} is {d_inner}; gated delta-net needs value heads of the key "
            f"head size, {c.n_v_heads} x {c.dim} = {c.value_dim}"
        )
    return c


def recurrent_layers(hp: HParams, n_layer: int) -> tuple[bool, ...]:
    """Which layers are linear attention: ``attention.recurrent_layers`` when the file has it,
    else all but every ``full_attention_interval``-th (llama.cpp's rule, default 4)."""
    key = hp.key("attention.recurrent_layers")
    value = hp.gguf.metadata.get(key)
    interval = hp.opt("full_attention_interval", 4, int)
    hp.ignore("attention.recurrent_layers")
    if value is not None:
        if getattr(value, "dtype", None) is None or value.dtype.kind != "b" or len(value) < n_layer:
            raise ModelConfigError(f"{hp.gguf.path}: {key} must hold one boolean per layer ({n_layer})")
        return tuple(bool(v) for v in value[:n_layer])
    if interval < 1:
        raise ModelConfigError(f"{hp.gguf.path}: {hp.key('full_attention_interval')} is {interval}")
    return tuple((i + 1) % interval != 0 for i in range(n_layer))


@attrs.define
class DeltaNetWeights:
    qkv: object
    gate: object
    beta: object  # None with a fused ssm_ba (qwen3next)
    alpha: object
    ba: object
    conv: object
    dt_b: object
    A: object
    norm: object
    out: object

    @classmethod
    def load(cls, w, i: int, c: DeltaNetConfig) -> DeltaNetWeights:
        m = cls(
            qkv=w.get(tensor_name(T.ATTN_QKV, i)),
            gate=w.get(tensor_name(T.ATTN_GATE, i)),
            beta=w.get(tensor_name(T.SSM_BETA, i)),
            alpha=w.get(tensor_name(T.SSM_ALPHA, i)),
            ba=w.get(tensor_name(T.SSM_BETA_ALPHA, i)),
            conv=w[tensor_name(T.SSM_CONV1D, i)],
            dt_b=w[tensor_name(T.SSM_DT, i, "bias")],
            A=w[tensor_name(T.SSM_A, i, kind="")],
            norm=w[tensor_name(T.SSM_NORM, i)],
            out=w[tensor_name(T.SSM_OUT, i)],
        )
        if m.qkv is None or m.gate is None:
            raise InvalidModelFile(
                w.source, None, f"layer {i}: linear attention needs attn_qkv and attn_gate (files with one fused "
                f"ssm_in are from an older converter: convert the model again)",
            )  # fmt: skip
        if (m.beta is None or m.alpha is None) and m.ba is None:
            raise InvalidModelFile(w.source, None, f"layer {i}: linear attention needs ssm_beta and ssm_alpha, or ssm_ba")
        bad = []
        if m.qkv.shape[1] != c.conv_dim:
            bad.append(f"attn_qkv {m.qkv.shape}")
        if m.gate.shape[1] != c.value_dim:
            bad.append(f"attn_gate {m.gate.shape}")
        if m.conv.shape != (c.d_conv, c.conv_dim):
            bad.append(f"ssm_conv1d {m.conv.shape}")
        if math.prod(m.A.shape) != c.n_v_heads or math.prod(m.dt_b.shape) != c.n_v_heads:
            bad.append(f"ssm_a {m.A.shape} / ssm_dt {m.dt_b.shape}")
        if math.prod(m.norm.shape) != c.dim or m.out.shape[0] != c.value_dim:
            bad.append(f"ssm_norm {m.norm.shape} / ssm_out {m.out.shape}")
        if m.ba is not None and m.ba.shape[1] != 2 * c.n_v_heads:
            bad.append(f"ssm_ba {m.ba.shape}")
        if bad:
            raise InvalidModelFile(w.source, None, f"layer {i}: {', '.join(bad)} do not match the metadata {c}")
        return m


def declare_delta_net_state(model: Model, c: DeltaNetConfig):
    conv = model.state.add(ShortConv(c.conv_dim, c.d_conv))
    rule = model.state.add(SSMState(c.n_v_heads, c.dim, c.dim))
    return conv, rule


def _l2_norm(g: GraphBuilder, x: Tensor, eps: float) -> Tensor:
    """llama.cpp's build_gdn_l2_norm: x / sqrt(sum x^2 + eps), as rms_norm(eps / n) / sqrt(n)."""
    n = x.shape[-1]
    return g.scale(g.rms_norm(x, None, eps / n), 1.0 / math.sqrt(n))


def beta_alpha(g: GraphBuilder, h: Tensor, m: DeltaNetWeights, c: DeltaNetConfig) -> tuple[Tensor, Tensor]:
    """The per-head beta and alpha projections: two tensors, or Qwen3-Next's ssm_ba, which
    holds per key head its group's betas then its alphas."""
    if m.ba is None:
        return g.linear(h, m.beta), g.linear(h, m.alpha)
    n, r = h.shape[0], c.n_v_heads // c.n_k_heads
    ba = g.reshape(g.linear(h, m.ba), (n, c.n_k_heads, 2 * r))
    b, a = (g.reshape(g.copy(t), (n, c.n_v_heads)) for t in g.split(ba, (r, r)))
    return b, a


def delta_net_mixer(g: GraphBuilder, h: Tensor, m: DeltaNetWeights, c: DeltaNetConfig, conv_state, rule_state,
                    eps: float, grouped: bool = False) -> Tensor:  # fmt: skip
    n = h.shape[0]
    qkv = g.linear(h, m.qkv)
    z = g.linear(h, m.gate)
    b, a = beta_alpha(g, h, m, c)
    beta = g.unary("sigmoid", b)
    decay = g.mul(g.unary("softplus", g.add(a, m.dt_b)), m.A)
    qkv = g.unary("silu", g.conv1d_causal(qkv, m.conv, conv_state))
    # slices of one tensor are strided views: the ops below want them contiguous
    q, k, v = (g.copy(t) for t in g.split(qkv, (c.key_dim, c.key_dim, c.value_dim)))
    q = _l2_norm(g, g.reshape(q, (n, c.n_k_heads, c.dim)), eps)
    k = _l2_norm(g, g.reshape(k, (n, c.n_k_heads, c.dim)), eps)
    v = g.reshape(v, (n, c.n_v_heads, c.dim))
    y = g.gated_delta_net(q, k, v, decay, beta, rule_state, grouped=grouped)
    y = g.rms_norm(y, m.norm, eps)
    y = g.glu("swiglu", g.reshape(z, (n, c.n_v_heads, c.dim)), y)
    return g.linear(g.reshape(y, (n, c.value_dim)), m.out)
