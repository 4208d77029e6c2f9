"""The GE2E speaker encoder as a cera graph on a backend, and utterance embeddings.

`GE2EGraph` writes the network with the op table: a batch of ``B`` partial utterances
(graph input "mel", ``[B, frames * 40]``, one row per partial) goes through a 3-layer
LSTM unrolled over its 160 frames, the last layer's final hidden state through the
linear projection, ReLU, and L2 normalization; output "hidden" is ``[B, 256]``.

The op table has no sigmoid or tanh, but ``softcap(x, c) = c * tanh(x / c)`` is tanh, and
``sigmoid(x) = 0.5 + 0.5 * tanh(x / 2) = 0.5 + 0.25 * softcap(x, 2)``. With u = softcap(gate,
2) for the input, forget and output gates, each LSTM step is written without a constant:

    c' = 0.5 * ((c + 0.5 * u_f * c) + (g + 0.5 * u_i * g)),   g = softcap(gate_g, 1)
    h' = 0.5 * (t + 0.5 * u_o * t),                           t = softcap(c', 1)

L2 normalization is ``rms_norm(x) / sqrt(256)``. At the first step the state is zero, so
the recurrent products are left out (their biases added alone). The graph has about 20
nodes per step and layer; it is compiled once per batch size and reused.

`SpeakerEncoder` loads a GGUF made by `cera_audio_diarizer.convert`, uploads the weights
to a backend (``device="auto"``: the best one that runs every op, normally cera's CPU
backend) and embeds audio the way resemblyzer's ``VoiceEncoder.embed_utterance`` does:
partial windows of 1.6 s at 1.3 per second (the last kept when at least 75% of it is
audio, the waveform zero-padded to cover it), each embedded, averaged, L2-normalized.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import attrs
import numpy as np

from cera.backend import StepInputs
from cera.errors import AudioError, ModelConfigError
from cera.graph.builder import GraphBuilder, Layout, Outputs
from cera.blocks.hparams import HParams
from cera.model import Model, Weights

from .convert import ARCHITECTURE
from .mel import mel_power

MEL_INPUT = "mel"
OUTPUTS = Outputs(("hidden",), rows="all")
# Partial utterances per pass: batches are padded up to one of these, so at most this many
# graphs are compiled.
BATCH_SIZES = (1, 4, 16)


@attrs.frozen
class GE2EConfig:
    sample_rate: int
    n_fft: int
    hop: int
    n_mels: int
    partial_frames: int
    layers: int
    hidden: int
    embedding: int


def read_config(gguf) -> GE2EConfig:
    if gguf.architecture != ARCHITECTURE:
        raise ModelConfigError(f"{gguf.path}: architecture {gguf.architecture!r} is not {ARCHITECTURE!r}")
    hp = HParams(gguf, ARCHITECTURE)
    cfg = GE2EConfig(
        sample_rate=hp.req("sample_rate", int), n_fft=hp.req("n_fft", int), hop=hp.req("hop_length", int),
        n_mels=hp.req("n_mels", int), partial_frames=hp.req("partial_frames", int),
        layers=hp.req("lstm.layer_count", int), hidden=hp.req("lstm.hidden_size", int),
        embedding=hp.req("embedding_length", int),
    )  # fmt: skip
    order = hp.req("lstm.gate_order", str)
    hp.check_all_understood()
    if order != "ifgo":
        raise ModelConfigError(f"{gguf.path}: LSTM gate order {order!r} is not supported (only 'ifgo', PyTorch's)")
    if (cfg.sample_rate, cfg.n_fft, cfg.hop) != (16000, 400, 160):
        raise ModelConfigError(
            f"{gguf.path}: a front end of {cfg.sample_rate} Hz / {cfg.n_fft} / {cfg.hop}; the GE2E encoder's is 16000 / 400 / 160"
        )
    if not (0 < cfg.layers <= 8 and 0 < cfg.hidden <= 4096 and 0 < cfg.partial_frames <= 1000 and 0 < cfg.n_mels <= 512):
        raise ModelConfigError(f"{gguf.path}: implausible GE2E sizes {cfg}")
    return cfg


class GE2EGraph(Model):
    """The encoder's forward pass over a batch of partial utterances (see the module docstring)."""

    family = ARCHITECTURE

    @classmethod
    def read_config(cls, gguf) -> GE2EConfig:
        return read_config(gguf)

    @property
    def n_vocab(self) -> int:
        return 0

    def _step(self, g: GraphBuilder, gates, c):
        H = self.config.hidden
        i, f, gg, o = g.split(gates, (H, H, H, H))
        u_i, u_o = g.softcap(i, 2.0), g.softcap(o, 2.0)
        gg = g.softcap(gg, 1.0)
        new = g.add(gg, g.scale(g.mul(u_i, gg), 0.5))
        if c is not None:
            u_f = g.softcap(f, 2.0)
            new = g.add(g.add(c, g.scale(g.mul(u_f, c), 0.5)), new)
        c = g.scale(new, 0.5)
        t = g.softcap(c, 1.0)
        h = g.scale(g.add(t, g.scale(g.mul(u_o, t), 0.5)), 0.5)
        return h, c

    def forward(self, g: GraphBuilder) -> None:
        cfg, w = self.config, self.weights
        B, T = g.layout.n_tokens, cfg.partial_frames
        mel = g.input(MEL_INPUT, (B, T * cfg.n_mels))
        xs = g.split(mel, (cfg.n_mels,) * T)
        for k in range(cfg.layers):
            w_ih, w_hh = w[f"lstm.weight_ih_l{k}"], w[f"lstm.weight_hh_l{k}"]
            b_ih, b_hh = w[f"lstm.bias_ih_l{k}"], w[f"lstm.bias_hh_l{k}"]
            h = c = None
            hs = []
            for x in xs:
                gates = g.linear(x, w_ih, b_ih)
                gates = g.add(gates, b_hh if h is None else g.linear(h, w_hh, b_hh))
                h, c = self._step(g, gates, c)
                hs.append(h)
            xs = hs
        e = g.unary("relu", g.linear(xs[-1], w["linear.weight"], w["linear.bias"]))
        e = g.scale(g.rms_norm(e, eps=1e-20), 1.0 / math.sqrt(cfg.embedding))
        g.output("hidden", e)


def partial_slices(n_samples: int, rate: float = 1.3, min_coverage: float = 0.75, frames: int = 160, hop: int = 160,
                   sample_rate: int = 16000) -> list[tuple[int, int]]:  # fmt: skip
    """Resemblyzer's partial windows of an utterance of ``n_samples``, as mel frame ranges."""
    if not 0 < min_coverage <= 1:
        raise AudioError(f"min_coverage {min_coverage} must be in (0, 1]")
    n_frames = int(np.ceil((n_samples + 1) / hop))
    step = int(np.round((sample_rate / rate) / hop))
    if not 0 < step <= frames:
        raise AudioError(f"a rate of {rate} partial windows per second is outside [{sample_rate / (hop * frames):.3f}, {sample_rate / hop}]")
    slices = [(i, i + frames) for i in range(0, max(1, n_frames - frames + step + 1), step)]
    start, stop = slices[-1][0] * hop, slices[-1][1] * hop
    if (n_samples - start) / (stop - start) < min_coverage and len(slices) > 1:
        slices = slices[:-1]
    return slices


class SpeakerEncoder:
    """A GE2E GGUF bound to a backend: speaker embeddings of mono 16 kHz float32 PCM."""

    def __init__(self, path: str | os.PathLike, device: str = "auto", threads: int | None = None, manager=None):
        from cera.engine import choose_backend
        from cera.formats.gguf import GGUFFile
        from cera.plugins.manager import get_manager
        from cera.generation.runtime import Runner

        self.path = Path(path)
        self.gguf = GGUFFile(self.path)
        try:
            self.config = read_config(self.gguf)
            weights = Weights.from_gguf(self.gguf)
            self.model = GE2EGraph(self.config, weights)
            ops = self.model.build(Layout((1,)), OUTPUTS).ops_used()
            self.filters = weights.host("mel_filters")
            if self.filters.shape != (self.config.n_mels, self.config.n_fft // 2 + 1):
                raise ModelConfigError(f"{self.path}: mel_filters has shape {self.filters.shape}")
            weights.check_all_used(ARCHITECTURE)
            options = {"threads": threads} if threads is not None else {}
            self.backend, self.backend_notes = choose_backend(self.gguf, device, manager or get_manager(), ops=ops, **options)
            uploaded = {n: self.backend.upload(self.gguf, n) for n in sorted(weights.used) if n != "mel_filters"}
            self.runner = Runner(self.model, self.backend, uploaded)
            self.state = self.runner.new_state(1, n_slots=1, kv_type="f32", n_batch=max(BATCH_SIZES))
        except BaseException:
            self.gguf.close()
            raise

    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    def mel(self, samples: np.ndarray) -> np.ndarray:
        return mel_power(samples, self.filters, self.config.n_fft, self.config.hop)

    def embed_partials(self, mels: np.ndarray) -> np.ndarray:
        """Embeddings ``[n, 256]`` of partial utterances ``[n, 160, 40]`` (mel power frames)."""
        cfg = self.config
        mels = np.asarray(mels, dtype=np.float32)
        if mels.ndim != 3 or mels.shape[1:] != (cfg.partial_frames, cfg.n_mels):
            raise AudioError(f"partial utterances must be [n, {cfg.partial_frames}, {cfg.n_mels}], got {mels.shape}")
        out = []
        at = 0
        while at < len(mels):
            left = len(mels) - at
            size = next((b for b in BATCH_SIZES if b >= left), BATCH_SIZES[-1])
            n = min(size, left)
            batch = np.zeros((size, cfg.partial_frames * cfg.n_mels), np.float32)
            batch[:n] = mels[at : at + n].reshape(n, -1)
            layout = Layout((size,))  # one "sequence" whose rows are the partials
            exe = self.runner.executable(layout, OUTPUTS, self.state)
            inputs = StepInputs(
                tokens=np.zeros(size, np.int32), positions=np.zeros(size, np.int32),
                slots=np.zeros(1, np.int32), starts=np.zeros(1, np.int32), extra={MEL_INPUT: batch},
            )  # fmt: skip
            out.append(np.asarray(exe.run(self.state, inputs)["hidden"])[:n])
            at += n
        return np.concatenate(out).astype(np.float32)

    def embed_utterance(self, samples: np.ndarray, rate: float = 1.3, min_coverage: float = 0.75,
                        return_partials: bool = False):  # fmt: skip
        """The L2-normalized mean of the partial windows' embeddings (resemblyzer's
        ``embed_utterance`` on the same waveform)."""
        cfg = self.config
        x = np.asarray(samples, dtype=np.float32)
        slices = partial_slices(len(x), rate, min_coverage, cfg.partial_frames, cfg.hop, cfg.sample_rate)
        need = slices[-1][1] * cfg.hop
        if need >= len(x):
            x = np.pad(x, (0, need - len(x)))
        mel = self.mel(x)
        partials = self.embed_partials(np.stack([mel[a:b] for a, b in slices]))
        raw = partials.mean(axis=0)
        embed = raw / np.linalg.norm(raw)
        return (embed, partials, slices) if return_partials else embed

    def close(self) -> None:
        self.backend.close()
        self.gguf.close()
