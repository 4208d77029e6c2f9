"""The Streaming Sortformer's forward pass as two cera graphs.

`PreEncodeGraph` (layout: one sequence whose rows are the ``T`` mel frames of input
"mel" ``[T, n_mels]``; output "hidden" ``[T', d_model]``): NeMo's ``dw_striding``
subsampling. Its activations keep one row per (time, frequency) point and the channels
in the row, so that a 3x3 convolution of stride 2 is nine `rows` gathers (fixed indices;
the padding points read one appended zero row), each multiplied by that tap's weights
and summed: the first stage (one input channel) joins its nine gathers into ``[points,
9]`` and applies a linear map; later stages are depthwise (a weight vector per tap) and
pointwise (a linear map). The last stage's rows, reshaped to ``[T', frequencies *
channels]``, go through the output map (its inputs reordered by the converter).

`EncoderGraph` (layout: one sequence of ``N`` rows; inputs "emb" ``[N, d_model]`` (the
pre-encoded frames: speaker cache, FIFO and chunk), "pos_sin" and "pos_cos" ``[N,
d_model / 2]``; output "logits" ``[N, n_speakers]``): the FastConformer layers, the
projection, the Transformer and the speaker head before its sigmoid (applied by the
caller: ``1 / (1 + exp(-x))`` on four values per frame).

Relative-position attention without a matrix product of two activations: Transformer-XL's
score of query ``i`` and key ``j`` is ``(q_i + u) . k_j + (q_i + v) . P(i - j)``, where
``P(r) = W_pos pe(r)`` and ``pe(r)`` holds ``sin(r w_m)``, ``cos(r w_m)``. Per head,
``(q_i + v) . P(i - j) = a_i . pe(i - j)`` with ``a_i = W_pos,h^T (q_i + v)`` (the
converter stores ``W_pos,h^T`` with its sine rows first), and by the angle-difference
formulas ``a_i . pe(i - j) = b_i . [cos(j w); sin(j w)]`` with ``b_i = [a_s sin(i w) +
a_c cos(i w); a_c sin(i w) - a_s cos(i w)]``. So each head attends with queries
``[q_i + u; b_i]`` and keys ``[k_j; cos(j w); sin(j w)]`` (``d_head + d_model`` values)
through `attention_full`, scale ``1 / sqrt(d_head)`` as NeMo's. The convolution module's
GLU is ``a * sigmoid(b) = 0.5 a + 0.25 a softcap(b, 2)``; its depthwise convolution (batch
norm folded in) is a sum over taps of contiguous row views of the zero-padded input.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from cera.blocks.hparams import HParams
from cera.errors import ModelConfigError
from cera.graph.builder import GraphBuilder
from cera.graph.ops import AttentionSpec
from cera.model import Model

from .sortformer_convert import ARCHITECTURE, STREAMING_KEYS

MEL_INPUT, EMB_INPUT, SIN_INPUT, COS_INPUT = "mel", "emb", "pos_sin", "pos_cos"


@attrs.frozen
class SortformerConfig:
    sample_rate: int
    n_fft: int
    win_length: int
    hop: int
    n_mels: int
    preemph: float
    factor: int
    channels: int
    layers: int
    d: int
    heads: int
    ff: int
    kernel: int
    xscaling: bool
    tf_layers: int
    tf_d: int
    tf_heads: int
    tf_ff: int
    n_speakers: int
    streaming: dict = attrs.field(hash=False, eq=False)

    @property
    def stages(self) -> int:
        return int(math.log2(self.factor))


def read_config(gguf) -> SortformerConfig:
    if gguf.architecture != ARCHITECTURE:
        raise ModelConfigError(f"{gguf.path}: architecture {gguf.architecture!r} is not {ARCHITECTURE!r}")
    hp = HParams(gguf, ARCHITECTURE)
    cfg = SortformerConfig(
        sample_rate=hp.req("sample_rate"), n_fft=hp.req("n_fft"), win_length=hp.req("win_length"),
        hop=hp.req("hop_length"), n_mels=hp.req("n_mels"), preemph=hp.req("preemph", float),
        factor=hp.req("subsampling_factor"), channels=hp.req("subsampling_channels"),
        layers=hp.req("enc.layer_count"), d=hp.req("enc.d_model"), heads=hp.req("enc.head_count"),
        ff=hp.req("enc.ff_length"), kernel=hp.req("enc.conv_kernel"), xscaling=hp.req("enc.xscaling", bool),
        tf_layers=hp.req("tf.layer_count"), tf_d=hp.req("tf.d_model"), tf_heads=hp.req("tf.head_count"),
        tf_ff=hp.req("tf.ff_length"), n_speakers=hp.req("n_speakers"),
        streaming={k: hp.req(f"streaming.{k}", kind) for k, (_, kind) in STREAMING_KEYS.items()},
    )  # fmt: skip
    hp.check_all_understood()
    sane = (
        cfg.factor in (2, 4, 8, 16) and 0 < cfg.channels <= 4096 and 0 < cfg.layers <= 64 and 0 < cfg.heads <= 64
        and cfg.d % cfg.heads == 0 and cfg.d % 2 == 0 and cfg.kernel % 2 == 1 and 0 <= cfg.tf_layers <= 64
        and 0 < cfg.tf_heads and cfg.tf_d % cfg.tf_heads == 0 and 0 < cfg.n_speakers <= 64 and 0 < cfg.n_mels <= 512
        and 0 < cfg.hop <= cfg.win_length <= cfg.n_fft <= 8192 and cfg.n_mels >= cfg.factor
    )  # fmt: skip
    if not sane:
        raise ModelConfigError(f"{gguf.path}: implausible Sortformer sizes {cfg}")
    return cfg


def conv_out(n: int) -> int:
    """Length after a 3-tap convolution of stride 2 and padding 1."""
    return (n - 1) // 2 + 1


def subsampled_frames(n_mel_frames: int, factor: int) -> int:
    for _ in range(int(math.log2(factor))):
        n_mel_frames = conv_out(n_mel_frames)
    return n_mel_frames


def _taps(t_in: int, f_in: int) -> list[tuple[int, ...]]:
    """For each of the 9 taps (time offset major), the input point of every output point
    of a 3x3 stride-2 padding-1 convolution, ``t_in * f_in`` (the zero row) where it falls
    in the padding."""
    t_out, f_out = conv_out(t_in), conv_out(f_in)
    to = np.arange(t_out)[:, None]
    fo = np.arange(f_out)[None, :]
    out = []
    for i in range(3):
        for j in range(3):
            t, f = 2 * to + i - 1, 2 * fo + j - 1
            ok = (t >= 0) & (t < t_in) & (f >= 0) & (f < f_in)
            out.append(tuple(np.where(ok, t * f_in + f, t_in * f_in).reshape(-1).tolist()))
    return out


def position_tables(n: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """``sin(i w_m)`` and ``cos(i w_m)`` for rows ``i < n``, ``w_m = 10000^(-2m/d)`` (NeMo's
    sinusoids), computed in float64."""
    w = np.exp(np.arange(0, d, 2, dtype=np.float64) * -(math.log(10000.0) / d))
    angle = np.arange(n, dtype=np.float64)[:, None] * w[None, :]
    return np.sin(angle).astype(np.float32), np.cos(angle).astype(np.float32)


def _zeros_like_rows(g: GraphBuilder, x, n: int):
    return g.scale(g.rows(x, (0,) * n), 0.0)


class PreEncodeGraph(Model):
    family = ARCHITECTURE

    @classmethod
    def read_config(cls, gguf) -> SortformerConfig:
        return read_config(gguf)

    @property
    def n_vocab(self) -> int:
        return 0

    def forward(self, g: GraphBuilder) -> None:
        cfg, w = self.config, self.weights
        t, f = g.layout.n_tokens, cfg.n_mels
        mel = g.input(MEL_INPUT, (t, f))
        x = g.reshape(mel, (t * f, 1))
        x = g.concat(x, _zeros_like_rows(g, x, 1), axis=0)
        cols = [g.rows(x, idx) for idx in _taps(t, f)]
        h = cols[0]
        for c in cols[1:]:
            h = g.concat(h, c, axis=-1)
        x = g.unary("relu", g.linear(h, w["pre.conv0.weight"], w["pre.conv0.bias"]))
        t, f = conv_out(t), conv_out(f)
        for k in range(1, cfg.stages):
            xz = g.concat(x, _zeros_like_rows(g, x, 1), axis=0)
            acc = None
            for tap, idx in enumerate(_taps(t, f)):
                y = g.mul(g.rows(xz, idx), w[f"pre.dw{k}.{tap}.weight"])
                acc = y if acc is None else g.add(acc, y)
            acc = g.add(acc, w[f"pre.dw{k}.bias"])
            x = g.unary("relu", g.linear(acc, w[f"pre.pw{k}.weight"], w[f"pre.pw{k}.bias"]))
            t, f = conv_out(t), conv_out(f)
        x = g.reshape(x, (t, f * cfg.channels))
        g.output("hidden", g.linear(x, w["pre.out.weight"], w["pre.out.bias"]))


class EncoderGraph(Model):
    family = ARCHITECTURE

    @classmethod
    def read_config(cls, gguf) -> SortformerConfig:
        return read_config(gguf)

    @property
    def n_vocab(self) -> int:
        return 0

    def _ln(self, g, x, p):
        return g.layer_norm(x, self.weights[f"{p}.weight"], self.weights[f"{p}.bias"], eps=1e-5)

    def _lin(self, g, x, p):
        return g.linear(x, self.weights[f"{p}.weight"], self.weights.get(f"{p}.bias"))

    def _ff(self, g, x, p, name):
        h = self._ln(g, x, f"{p}.{name}_norm")
        h = self._lin(g, g.unary("silu", self._lin(g, h, f"{p}.{name}_up")), f"{p}.{name}_down")
        return g.add(x, g.scale(h, 0.5))

    def _rel_attention(self, g, x, p, sin, cos, neg_cos, cos_sin):
        cfg, w = self.config, self.weights
        n, H, dk, half = g.layout.n_tokens, cfg.heads, cfg.d // cfg.heads, cfg.d // 2
        h = self._ln(g, x, f"{p}.attn_norm")
        q, k, v = (self._lin(g, h, f"{p}.attn_{s}") for s in "qkv")
        qu, qv = g.add(q, w[f"{p}.attn_pos_u"]), g.add(q, w[f"{p}.attn_pos_v"])
        qu_heads, qv_heads, k_heads = (g.split(t, (dk,) * H) for t in (qu, qv, k))
        q_aug = k_aug = None
        for head in range(H):
            a = g.linear(qv_heads[head], w[f"{p}.attn_pos.{head}.weight"])
            a_s, a_c = g.split(a, (half, half))
            b_c = g.add(g.mul(a_s, sin), g.mul(a_c, cos))
            b_s = g.add(g.mul(a_c, sin), g.mul(a_s, neg_cos))
            qh = g.concat(g.concat(qu_heads[head], b_c), b_s)
            kh = g.concat(k_heads[head], cos_sin)
            q_aug = qh if q_aug is None else g.concat(q_aug, qh)
            k_aug = kh if k_aug is None else g.concat(k_aug, kh)
        width = dk + cfg.d
        spec = AttentionSpec(scale=1.0 / math.sqrt(dk), causal=False)
        att = g.attention_full(g.reshape(q_aug, (n, H, width)), g.reshape(k_aug, (n, H, width)), g.reshape(v, (n, H, dk)), spec)
        return g.add(x, self._lin(g, att, f"{p}.attn_out"))

    def _conv(self, g, x, p):
        cfg, w = self.config, self.weights
        n, d, K = g.layout.n_tokens, cfg.d, cfg.kernel
        h = self._lin(g, self._ln(g, x, f"{p}.conv_norm"), f"{p}.conv_pw1")
        a, b = g.split(h, (d, d))
        h = g.add(g.scale(a, 0.5), g.scale(g.mul(a, g.softcap(b, 2.0)), 0.25))  # GLU
        pad = K // 2
        if pad:
            zeros = _zeros_like_rows(g, h, pad)
            h = g.concat(g.concat(zeros, h, axis=0), zeros, axis=0)
        acc = None
        for tap in range(K):
            y = g.mul(g.rows(h, tuple(range(tap, tap + n))), w[f"{p}.conv_dw.{tap}.weight"])
            acc = y if acc is None else g.add(acc, y)
        acc = g.unary("silu", g.add(acc, w[f"{p}.conv_dw.bias"]))
        return g.add(x, self._lin(g, acc, f"{p}.conv_pw2"))

    def forward(self, g: GraphBuilder) -> None:
        cfg, w = self.config, self.weights
        n, half = g.layout.n_tokens, cfg.d // 2
        x = g.input(EMB_INPUT, (n, cfg.d))
        sin, cos = g.input(SIN_INPUT, (n, half)), g.input(COS_INPUT, (n, half))
        neg_cos = g.scale(cos, -1.0)
        cos_sin = g.concat(cos, sin)
        if cfg.xscaling:
            x = g.scale(x, math.sqrt(cfg.d))
        for i in range(cfg.layers):
            p = f"enc.blk.{i}"
            x = self._ff(g, x, p, "ff1")
            x = self._rel_attention(g, x, p, sin, cos, neg_cos, cos_sin)
            x = self._conv(g, x, p)
            x = self._ff(g, x, p, "ff2")
            x = self._ln(g, x, f"{p}.out_norm")
        if w.get("proj.weight") is not None:
            x = self._lin(g, x, "proj")
        dh = cfg.tf_d // cfg.tf_heads
        spec = AttentionSpec(scale=1.0 / math.sqrt(dh), causal=False)
        for i in range(cfg.tf_layers):
            p = f"tf.blk.{i}"
            q, k, v = (g.reshape(self._lin(g, x, f"{p}.attn_{s}"), (n, cfg.tf_heads, dh)) for s in "qkv")
            x = self._ln(g, g.add(x, self._lin(g, g.attention_full(q, k, v, spec), f"{p}.attn_out")), f"{p}.attn_norm")
            h = self._lin(g, g.unary("relu", self._lin(g, x, f"{p}.ffn_up")), f"{p}.ffn_down")
            x = self._ln(g, g.add(x, h), f"{p}.ffn_norm")
        h = self._lin(g, g.unary("relu", x), "head.hidden")
        g.output("logits", self._lin(g, g.unary("relu", h), "head.spk"))
