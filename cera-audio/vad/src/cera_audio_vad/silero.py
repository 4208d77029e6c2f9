"""Silero VAD (v5/v6) in numpy, from a GGUF file written by `cera_audio_vad.convert`.

One frame (512 samples at 16 kHz, 256 at 8 kHz) goes through:

1. the input the silero-vad wrapper builds: the last 64 (32) samples of the previous input,
   then the frame, reflect-padded by 64 (32) samples at the end;
2. an STFT as a strided convolution with the stored basis (window 256 (128), hop 128 (64):
   4 time steps), and the magnitude of each bin;
3. four conv1d + ReLU layers (kernel 3, zero padding 1, strides 1, 2, 2, 1), down to one
   time step of 128 features;
4. one LSTM cell step (hidden 128) whose state carries over to the next frame;
5. ReLU, a 1x1 conv to one logit, sigmoid.

How it is computed, and why:

- Steps 1-3 do not depend on the recurrent state, so a batch of frames goes through them
  together as a few matrix products; only the LSTM step runs frame by frame, as about ten
  numpy calls on 512-element vectors with buffers made once.
- The encoder's inputs are tiny (4, then 2 and 1 time steps), so for a batch each conv
  layer is applied as one dense matrix over the flattened (time, channel) input, built at
  load time from the kernel with zero blocks where a tap falls into the padding. That costs
  a third more multiply-adds than a banded convolution but no copying, and halves the time
  of a batch.
- A single frame (streaming) has its own path through buffers made once, about 45 numpy
  calls in all. There the weights are read once per frame, so memory traffic counts: the
  two large conv layers are applied tap by tap (one product with the taps side by side,
  then shifted adds), reading 0.4 MB instead of the dense matrices' 1.5 MB.
- The encoder's later layers compute in float64. Their outputs are small differences of
  large sums, and in float32 the rounding reached 3e-5 in the final probability on speech
  (onnxruntime itself is about 1e-5 from a float64 evaluation); in float64 it stays below
  1e-6, for about a tenth of the multiply-adds. The STFT, the first layer and the LSTM stay
  float32.
- Sigmoids are computed as ``0.5 * tanh(0.5 x) + 0.5`` (the same function), which lets one
  ``tanh`` call serve all four LSTM gates: the rows of the input, forget and output gates
  are pre-scaled by 0.5 at load time and moved next to each other.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from cera.audio.vad import VoiceActivityDetector
from cera.errors import AudioError, InvalidModelFile, ModelConfigError
from cera.formats.gguf import GGUFFile
from cera.blocks.hparams import HParams

ARCHITECTURE = "silero-vad"
FAMILY = "silero-vad"
SUPPORTED_WEIGHT_TYPES = ("F32", "F16")
FRAMES_PER_BLOCK = 256  # frames through the batched front end at once (bounds memory on long clips)


@attrs.frozen
class _TapConv:
    """A conv layer for one frame, tap by tap: out[t] = bias + sum over taps of x[src] @ W_tap.

    ``weight`` is (C_in, kernel * C_out), the taps side by side, so one product gives every
    tap at every input step; ``shifts`` lists, per tap, the output steps it adds to and the
    input steps it reads (slices), where those fall inside the input.
    """

    weight: np.ndarray
    bias: np.ndarray  # (C_out,)
    shifts: tuple[tuple[slice, slice, slice], ...]  # (output steps, input steps, tap's columns)
    t_in: int
    t_out: int


@attrs.frozen
class _Network:
    """One sample rate's network, in the layouts the forward pass computes with."""

    sample_rate: int
    frame: int
    context: int
    filter_length: int
    hop: int
    pad_right: int
    n_freq: int
    steps: int  # STFT time steps per input
    stft: np.ndarray  # (filter_length, 2 * n_freq): real rows then imaginary rows of the basis
    layers: tuple[tuple[np.ndarray, np.ndarray], ...]  # per conv: dense (T_in*C_in, T_out*C_out), bias
    frame_layers: tuple  # per conv, for one frame: a _TapConv, or the dense pair where that is small
    w_x: np.ndarray  # (in, 4H) gates i, f, o, g; i, f, o pre-scaled by 0.5
    b_x: np.ndarray  # (4H,) b_ih + b_hh, same order and scaling
    w_h: np.ndarray  # (H, 4H)
    hidden: int
    w_out: np.ndarray  # (H,)
    b_out: float


def _array_of_ints(gguf, hp: HParams, suffix: str, n: int | None = None) -> list[int]:
    value = hp.req(suffix, kind=object)
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "iu" or value.ndim != 1:
        raise ModelConfigError(f"{gguf.path}: {hp.key(suffix)} should be an array of integers, got {value!r}")
    if n is not None and len(value) != n:
        raise ModelConfigError(f"{gguf.path}: {hp.key(suffix)} has {len(value)} entries, expected {n} (one per sample rate)")
    return [int(v) for v in value]


def _tensor(gguf: GGUFFile, name: str, shape: tuple[int, ...] | None) -> np.ndarray:
    info = gguf.tensors.get(name)
    if info is None:
        raise InvalidModelFile(gguf.path, None, f"Silero VAD tensor {name!r} is missing")
    if info.type_name not in SUPPORTED_WEIGHT_TYPES:
        raise InvalidModelFile(
            gguf.path, info.offset, f"tensor {name!r} is {info.type_name}; Silero VAD weights must be F32 or F16"
        )
    if shape is not None and info.numpy_shape != shape:
        raise InvalidModelFile(gguf.path, info.offset, f"tensor {name!r} has shape {info.numpy_shape}, expected {shape}")
    return np.array(gguf.tensor_data(name), dtype=np.float32)  # a copy: the file may close


def _dense_conv(weight: np.ndarray, stride: int, t_in: int) -> tuple[np.ndarray, int]:
    """A conv1d (zero 'same' padding) over ``t_in`` steps as a dense (t_in*C_in, t_out*C_out) matrix."""
    c_out, c_in, kernel = weight.shape
    half = kernel // 2
    t_out = (t_in + 2 * half - kernel) // stride + 1
    dense = np.zeros((t_in, c_in, t_out, c_out), dtype=np.float32)
    for t in range(t_out):
        for tap in range(kernel):
            src = t * stride + tap - half
            if 0 <= src < t_in:
                dense[src, :, t, :] = weight[:, :, tap].T
    return dense.reshape(t_in * c_in, t_out * c_out), t_out


def _tap_conv(weight: np.ndarray, bias: np.ndarray, stride: int, t_in: int) -> _TapConv:
    c_out, c_in, kernel = weight.shape
    half = kernel // 2
    t_out = (t_in + 2 * half - kernel) // stride + 1
    shifts = []
    for tap in range(kernel):
        ts = [t for t in range(t_out) if 0 <= t * stride + tap - half < t_in]
        if ts:
            src0 = ts[0] * stride + tap - half
            shifts.append(
                (
                    slice(ts[0], ts[-1] + 1),
                    slice(src0, src0 + stride * (len(ts) - 1) + 1, stride),
                    slice(tap * c_out, (tap + 1) * c_out),
                )
            )
    taps = np.concatenate([weight[:, :, tap].T for tap in range(kernel)], axis=1)
    return _TapConv(np.ascontiguousarray(taps), bias, tuple(shifts), t_in, t_out)


# For one frame the layers' weights are read once per frame, so their size, not the copies
# of the batched path, sets the cost: matrices larger than this are applied tap by tap.
DENSE_FRAME_BYTES = 128 * 1024


def _load_network(gguf: GGUFFile, sample_rate: int | None) -> tuple[_Network, tuple[int, ...]]:
    hp = HParams(gguf, FAMILY)
    rates = _array_of_ints(gguf, hp, "sample_rates")
    n = len(rates)
    if n == 0 or len(set(rates)) != n or min(rates) <= 0:
        raise ModelConfigError(f"{gguf.path}: {hp.key('sample_rates')} = {rates} is not a list of distinct positive rates")
    frames = _array_of_ints(gguf, hp, "frame_samples", n)
    contexts = _array_of_ints(gguf, hp, "context_samples", n)
    filters = _array_of_ints(gguf, hp, "stft.filter_length", n)
    hops = _array_of_ints(gguf, hp, "stft.hop_length", n)
    pads = _array_of_ints(gguf, hp, "stft.pad_right", n)
    strides = _array_of_ints(gguf, hp, "encoder.strides")
    prefixes = hp.req("tensor_prefixes", kind=object)
    if not isinstance(prefixes, list) or len(prefixes) != n or not all(isinstance(p, str) for p in prefixes):
        raise ModelConfigError(f"{gguf.path}: {hp.key('tensor_prefixes')} should be {n} strings, got {prefixes!r}")
    hidden = hp.req("lstm.hidden_size", int)
    gate_order = hp.req("lstm.gate_order", str)
    if gate_order != "ifgo":
        raise ModelConfigError(f"{gguf.path}: LSTM gate order {gate_order!r} is not supported (only 'ifgo', PyTorch's)")
    hp.check_all_understood()

    if sample_rate is None:
        sample_rate = rates[0]
    if sample_rate not in rates:
        raise AudioError(
            f"{gguf.path}: this Silero VAD model runs at {', '.join(map(str, rates))} Hz, not {sample_rate} Hz; "
            f"resample the audio to one of those rates"
        )
    i = rates.index(sample_rate)
    frame, context, k_stft, hop, pad, prefix = frames[i], contexts[i], filters[i], hops[i], pads[i], prefixes[i]
    length = context + frame
    if not (frame > 0 and context >= 0 and 0 < hop <= k_stft <= length + pad and 0 <= pad < length - 1 and hidden > 0):
        raise ModelConfigError(
            f"{gguf.path}: inconsistent Silero VAD front end at {sample_rate} Hz (frame {frame}, context {context}, "
            f"filter {k_stft}, hop {hop}, pad {pad}, hidden {hidden})"
        )
    n_freq = k_stft // 2 + 1
    steps = (length + pad - k_stft) // hop + 1

    def t(key, shape):
        return _tensor(gguf, f"{prefix}.{key}", shape)

    basis = t("stft.forward_basis_buffer", (2 * n_freq, 1, k_stft))
    stft = np.ascontiguousarray(basis[:, 0, :].T)

    layers, frame_layers = [], []
    channels, time = n_freq, steps
    for layer, stride in enumerate(strides):
        name = f"encoder.{layer}.reparam_conv.weight"
        w = t(name, None)
        if w.ndim != 3 or w.shape[1] != channels or w.shape[2] % 2 != 1 or stride <= 0:
            raise InvalidModelFile(
                gguf.path,
                gguf.tensors[f"{prefix}.{name}"].offset,
                f"tensor {prefix}.{name} has shape {w.shape}; expected (out, {channels}, odd kernel)",
            )
        b = t(f"encoder.{layer}.reparam_conv.bias", (w.shape[0],))
        dtype = np.float32 if layer == 0 else np.float64  # see the module docstring
        dense, t_out = _dense_conv(w, stride, time)
        dense, bias = dense.astype(dtype), np.tile(b, t_out).astype(dtype)
        layers.append((dense, bias))
        if dense.nbytes > DENSE_FRAME_BYTES:
            frame_layers.append(_tap_conv(w.astype(dtype), b.astype(dtype), stride, time))
        else:
            frame_layers.append((dense, bias))
        time = t_out
        channels = w.shape[0]
    if time != 1:
        raise ModelConfigError(f"{gguf.path}: the encoder leaves {time} time steps per frame; Silero VAD needs exactly 1")

    w_ih = t("decoder.rnn.weight_ih", (4 * hidden, channels))
    w_hh = t("decoder.rnn.weight_hh", (4 * hidden, hidden))
    b_ih = t("decoder.rnn.bias_ih", (4 * hidden,))
    b_hh = t("decoder.rnn.bias_hh", (4 * hidden,))
    w_out = t("decoder.decoder.2.weight", (1, hidden, 1))
    b_out = t("decoder.decoder.2.bias", (1,))

    # PyTorch rows i, f, g, o -> i, f, o, g with the three sigmoid gates halved (module doc).
    H = hidden
    order = np.r_[0 : 2 * H, 3 * H : 4 * H, 2 * H : 3 * H]
    scale = np.ones(4 * H, dtype=np.float32)
    scale[: 3 * H] = 0.5

    net = _Network(
        sample_rate=sample_rate,
        frame=frame,
        context=context,
        filter_length=k_stft,
        hop=hop,
        pad_right=pad,
        n_freq=n_freq,
        steps=steps,
        stft=stft,
        layers=tuple(layers),
        frame_layers=tuple(frame_layers),
        w_x=np.ascontiguousarray((w_ih[order] * scale[:, None]).T),
        b_x=np.ascontiguousarray((b_ih + b_hh)[order] * scale),
        w_h=np.ascontiguousarray((w_hh[order] * scale[:, None]).T),
        hidden=H,
        w_out=np.ascontiguousarray(w_out.reshape(H)),
        b_out=float(b_out[0]),
    )
    return net, tuple(rates)


def _frame_buffers(layer):
    """Output buffers of one layer on the single-frame path: (taps product, output) or output."""
    if isinstance(layer, _TapConv):
        dtype = layer.weight.dtype
        return np.empty((layer.t_in, layer.weight.shape[1]), dtype), np.empty((layer.t_out, len(layer.bias)), dtype)
    _, bias = layer
    return np.empty(bias.shape, bias.dtype)


class SileroVad(VoiceActivityDetector):
    """Silero VAD running from GGUF with numpy; see the module docstring for the maths."""

    def __init__(self, net: _Network, sample_rates: tuple[int, ...], source: str = ""):
        super().__init__()
        self._net = net
        self.sample_rates = sample_rates
        self.sample_rate = net.sample_rate
        self.frame_samples = net.frame
        self.context_samples = net.context
        self.source = source
        H = net.hidden
        # Recurrent state, the previous input's tail, and the LSTM step's buffers and views.
        self._h = np.zeros(H, dtype=np.float32)
        self._c = np.zeros(H, dtype=np.float32)
        g = np.empty(4 * H, dtype=np.float32)
        self._gates = g
        self._gate_views = (g[: 3 * H], g[:H], g[H : 2 * H], g[2 * H : 3 * H], g[3 * H :])
        self._tmp = np.empty(H, dtype=np.float32)
        self._tmp4 = np.empty(4 * H, dtype=np.float32)
        # One frame's network input, laid out as [previous tail | frame | reflect padding];
        # its first `context` samples are also where the batched path keeps the tail.
        C, W, P, K, hop, F, T = net.context, net.frame, net.pad_right, net.filter_length, net.hop, net.n_freq, net.steps
        self._input = np.zeros(C + W + P, dtype=np.float32)
        self._ctx = self._input[:C]
        item = self._input.itemsize
        self._steps = np.ndarray((T, K), np.float32, buffer=self._input, strides=(hop * item, item))
        self._spec = np.empty((T, 2 * F), dtype=np.float32)
        self._mag = np.empty((T, F), dtype=np.float32)
        self._frame_buffers = tuple(_frame_buffers(layer) for layer in net.frame_layers)
        self._feat = np.empty(net.w_x.shape[0], dtype=np.float32)

    @classmethod
    def from_gguf(cls, gguf: GGUFFile, sample_rate: int | None = None, **options) -> SileroVad:
        if options:
            raise AudioError(f"SileroVad takes no options besides sample_rate; got {sorted(options)}")
        if gguf.architecture != ARCHITECTURE:
            raise AudioError(f"{gguf.path}: architecture {gguf.architecture!r} is not {ARCHITECTURE!r}")
        net, rates = _load_network(gguf, sample_rate)
        return cls(net, rates, str(gguf.path))

    @classmethod
    def open(cls, path, sample_rate: int | None = None) -> SileroVad:
        with GGUFFile(path) as gguf:
            return cls.from_gguf(gguf, sample_rate=sample_rate)

    def _reset_state(self) -> None:
        self._h[:] = 0
        self._c[:] = 0
        self._ctx[:] = 0

    def _features(self, frames: np.ndarray) -> np.ndarray:
        """LSTM inputs of a batch of frames: front end and encoder, (n, features)."""
        net = self._net
        n, W = frames.shape
        C, P, K, hop, F, T = net.context, net.pad_right, net.filter_length, net.hop, net.n_freq, net.steps
        L = C + W
        # Each network input is the previous input's last C samples followed by the frame:
        # overlapping windows of one flat buffer, with a stride of one frame. (Views come from
        # the ndarray constructor: as_strided costs more than the maths for a single frame.)
        flat = np.concatenate([self._ctx, frames.reshape(-1)])
        item = flat.itemsize
        windows = np.ndarray((n, L), np.float32, buffer=flat, strides=(W * item, item))
        padded = np.empty((n, L + P), dtype=np.float32)
        padded[:, :L] = windows
        padded[:, L:] = windows[:, L - 2 : L - 2 - P : -1]  # reflect padding (the edge sample not repeated)
        self._ctx[:] = flat[len(flat) - C :]
        # The STFT's input windows, hop apart within each frame's input (a copy).
        steps = np.ndarray((n, T, K), np.float32, buffer=padded, strides=((L + P) * item, hop * item, item))
        steps = steps.reshape(n * T, K)
        spec = steps @ net.stft  # (n*T, 2F): real parts, then imaginary parts
        spec *= spec
        x = spec[:, :F] + spec[:, F:]
        np.sqrt(x, out=x)
        x = x.reshape(n, T * F)  # time-major, as the dense conv matrices expect
        for dense, bias in net.layers:
            x = x.astype(dense.dtype, copy=False) @ dense
            x += bias
            np.maximum(x, 0, out=x)
        return x.astype(np.float32)

    def _forward_frame(self, frame: np.ndarray) -> float:
        """One frame, with every buffer made in advance: about 45 numpy calls in all."""
        net = self._net
        C, W, P, F = net.context, net.frame, net.pad_right, net.n_freq
        L = C + W
        buf = self._input
        buf[C:L] = frame
        buf[L:] = buf[L - 2 : L - 2 - P : -1]  # reflect padding (the edge sample not repeated)
        spec = np.matmul(self._steps, net.stft, out=self._spec)
        buf[:C] = buf[W:L]  # this input's tail is the next one's context
        spec *= spec
        x = np.add(spec[:, :F], spec[:, F:], out=self._mag)
        np.sqrt(x, out=x)
        for layer, buffers in zip(net.frame_layers, self._frame_buffers):
            if isinstance(layer, _TapConv):
                z, y = buffers
                np.matmul(x.reshape(layer.t_in, -1), layer.weight, out=z)
                y[:] = layer.bias
                for dst, src, cols in layer.shifts:
                    y[dst] += z[src, cols]
            else:
                dense, bias = layer
                y = np.matmul(x.reshape(-1), dense, out=buffers)
                y += bias
            np.maximum(y, 0, out=y)
            x = y
        feat = self._feat
        feat[:] = x.reshape(-1)
        h, c, tmp = self._h, self._c, self._tmp
        g = np.matmul(feat, net.w_x, out=self._gates)
        g += net.b_x
        g += np.dot(h, net.w_h, out=self._tmp4)
        sig, gate_i, gate_f, gate_o, cand = self._gate_views
        np.tanh(g, out=g)
        sig *= 0.5
        sig += 0.5
        c *= gate_f
        np.multiply(gate_i, cand, out=tmp)
        c += tmp
        np.tanh(c, out=tmp)
        np.multiply(gate_o, tmp, out=h)
        logit = float(np.dot(np.maximum(h, 0, out=tmp), net.w_out)) + net.b_out
        return 0.5 * math.tanh(0.5 * logit) + 0.5

    def _forward(self, frames: np.ndarray) -> np.ndarray:
        net = self._net
        n = frames.shape[0]
        if n == 1:
            return np.array([self._forward_frame(frames[0])], dtype=np.float32)
        H = net.hidden
        h, c, w_h, g, tmp = self._h, self._c, net.w_h, self._gates, self._tmp
        sig, gate_i, gate_f, gate_o, cand = self._gate_views
        hs = np.empty((n, H), dtype=np.float32)
        for first in range(0, n, FRAMES_PER_BLOCK):
            gx = self._features(frames[first : first + FRAMES_PER_BLOCK]) @ net.w_x
            gx += net.b_x
            for j, gx_j in enumerate(gx, first):
                np.dot(h, w_h, out=g)
                g += gx_j
                np.tanh(g, out=g)
                sig *= 0.5  # sigmoid(x) = 0.5 * tanh(x / 2) + 0.5; the halving is in the weights
                sig += 0.5
                c *= gate_f
                np.multiply(gate_i, cand, out=tmp)
                c += tmp
                np.tanh(c, out=tmp)
                np.multiply(gate_o, tmp, out=h)
                hs[j] = h
        logits = np.maximum(hs, 0) @ net.w_out
        logits += net.b_out
        return (0.5 * np.tanh(0.5 * logits) + 0.5).astype(np.float32)
