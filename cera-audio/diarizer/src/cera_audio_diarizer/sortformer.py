"""`SortformerModel`: a Streaming Sortformer GGUF bound to a backend, offline and streaming.

The front end (`cera_audio_diarizer.sortformer_mel`) runs in numpy; the pre-encode and the
encoder are cera graphs (`cera_audio_diarizer.sortformer_graph`) compiled once per input
length and reused; the speaker cache and FIFO are `cera_audio_diarizer.sortformer_cache`.

`SortformerStream` is NeMo's ``forward_streaming`` for one stream that arrives in pieces:
mel frames are cut into chunks of ``chunk_len`` output frames (``chunk_len * factor`` mel
frames) with ``chunk_left_context`` and ``chunk_right_context`` output frames of context
on each side; a chunk runs as soon as its right context has arrived, and `finish` runs the
rest as NeMo does at the end of its input. Each chunk gives its frames' speaker
probabilities (one frame per ``factor * hop`` samples: 80 ms for the released model).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from cera.backend import StepInputs
from cera.errors import AudioError, ModelConfigError
from cera.graph.builder import Layout, Outputs
from cera.model import Weights

from .sortformer_cache import SpeakerCache
from .sortformer_convert import ARCHITECTURE
from .sortformer_graph import (
    COS_INPUT, EMB_INPUT, MEL_INPUT, SIN_INPUT, EncoderGraph, PreEncodeGraph, position_tables, read_config,
    subsampled_frames,
)  # fmt: skip
from .sortformer_mel import MelStream

OUT_HIDDEN = Outputs(("hidden",), rows="all")
OUT_LOGITS = Outputs(("logits",), rows="all")


def sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))).astype(np.float32)


class SortformerModel:
    def __init__(self, path: str | os.PathLike, device: str = "auto", threads: int | None = None, manager=None):
        from cera.engine import choose_backend
        from cera.formats.gguf import GGUFFile
        from cera.generation.runtime import Runner
        from cera.plugins.manager import get_manager

        self.path = Path(path)
        self.gguf = GGUFFile(self.path)
        try:
            self.config = cfg = read_config(self.gguf)
            weights = Weights.from_gguf(self.gguf)
            self.pre = PreEncodeGraph(cfg, weights)
            self.enc = EncoderGraph(cfg, weights)
            ops = self.pre.build(Layout((4 * cfg.factor,)), OUT_HIDDEN).ops_used()
            ops |= self.enc.build(Layout((4,)), OUT_LOGITS).ops_used()
            self.filters = weights.host("mel_filters")
            if self.filters is None or self.filters.shape != (cfg.n_mels, cfg.n_fft // 2 + 1):
                raise ModelConfigError(f"{self.path}: mel_filters is missing or has the wrong shape")
            weights.check_all_used(ARCHITECTURE)
            options = {"threads": threads} if threads is not None else {}
            self.backend, self.backend_notes = choose_backend(self.gguf, device, manager or get_manager(), ops=ops, **options)
            uploaded = {n: self.backend.upload(self.gguf, n) for n in sorted(weights.used) if n != "mel_filters"}
            self.pre_runner = Runner(self.pre, self.backend, uploaded)
            self.enc_runner = Runner(self.enc, self.backend, uploaded)
            self.state = self.enc_runner.new_state(1, n_slots=1, kv_type="f32", n_batch=1)
        except BaseException:
            self.gguf.close()
            raise

    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    @property
    def frame_seconds(self) -> float:
        """Seconds per output frame."""
        return self.config.factor * self.config.hop / self.config.sample_rate

    def mel_stream(self) -> MelStream:
        c = self.config
        return MelStream(self.filters, c.n_fft, c.win_length, c.hop, c.preemph)

    @staticmethod
    def _inputs(n: int, extra: dict) -> StepInputs:
        return StepInputs(
            tokens=np.zeros(n, np.int32), positions=np.arange(n, dtype=np.int32),
            slots=np.zeros(1, np.int32), starts=np.zeros(1, np.int32), extra=extra,
        )  # fmt: skip

    def pre_encode(self, mel: np.ndarray) -> np.ndarray:
        """The subsampling's output ``[T', d_model]`` for mel frames ``[T, n_mels]``."""
        mel = np.ascontiguousarray(mel, np.float32)
        if mel.ndim != 2 or mel.shape[1] != self.config.n_mels or len(mel) == 0:
            raise AudioError(f"mel frames must be [n > 0, {self.config.n_mels}], got {mel.shape}")
        exe = self.pre_runner.executable(Layout((len(mel),)), OUT_HIDDEN, self.state)
        out = np.asarray(exe.run(self.state, self._inputs(len(mel), {MEL_INPUT: mel}))["hidden"])
        return out.reshape(subsampled_frames(len(mel), self.config.factor), self.config.d)

    def encode(self, emb: np.ndarray) -> np.ndarray:
        """Speaker probabilities ``[N, n_speakers]`` of pre-encoded frames ``[N, d_model]``."""
        emb = np.ascontiguousarray(emb, np.float32)
        n = len(emb)
        sin, cos = position_tables(n, self.config.d)
        exe = self.enc_runner.executable(Layout((n,)), OUT_LOGITS, self.state)
        out = exe.run(self.state, self._inputs(n, {EMB_INPUT: emb, SIN_INPUT: sin, COS_INPUT: cos}))
        return sigmoid(np.asarray(out["logits"]).reshape(n, self.config.n_speakers))

    def offline(self, mel: np.ndarray) -> np.ndarray:
        """NeMo's ``forward_infer`` over a whole recording's mel frames (no speaker cache)."""
        return self.encode(self.pre_encode(mel))

    def streaming(self, mel: np.ndarray, **settings) -> np.ndarray:
        """NeMo's ``forward_streaming`` over a whole recording's mel frames."""
        s = SortformerStream(self, **settings)
        return np.concatenate([s.push(mel), s.finish()])

    def close(self) -> None:
        self.backend.close()
        self.gguf.close()


class SortformerStream:
    """Speaker probabilities of a stream of mel frames, chunk by chunk (see the module docstring).
    ``settings`` override the file's streaming settings (``chunk_len``, ``fifo_len``, ...)."""

    def __init__(self, model: SortformerModel, **settings):
        cfg = model.config
        s = dict(cfg.streaming)
        unknown = sorted(set(settings) - set(s))
        if unknown:
            raise AudioError(f"unknown streaming setting(s) {unknown}; known: {', '.join(sorted(s))}")
        s.update(settings)
        if s["chunk_len"] < 1 or s["spkcache_len"] < (1 + s["spkcache_sil_frames_per_spk"]) * cfg.n_speakers:
            raise AudioError(
                f"streaming settings: chunk_len {s['chunk_len']} must be at least 1 and spkcache_len "
                f"{s['spkcache_len']} at least (1 + spkcache_sil_frames_per_spk) * {cfg.n_speakers}"
            )
        if min(s["fifo_len"], s["chunk_left_context"], s["chunk_right_context"], s["spkcache_sil_frames_per_spk"]) < 0:
            raise AudioError("streaming settings: lengths and contexts must not be negative")
        self.model = model
        self.settings = s
        self.factor = cfg.factor
        self.cache = SpeakerCache(cfg.d, cfg.n_speakers, s)
        self.reset()

    def reset(self) -> None:
        self.cache.reset()
        self._mel = np.zeros((0, self.model.config.n_mels), np.float32)
        self._mel_start = 0  # stream frame of self._mel[0]
        self._stt = 0  # next chunk's first mel frame
        self.frames_out = 0

    def _step(self, total: int | None) -> np.ndarray | None:
        s, f = self.settings, self.factor
        have = self._mel_start + len(self._mel)
        end = self._stt + s["chunk_len"] * f
        if total is None:
            if end + s["chunk_right_context"] * f > have:
                return None
        else:
            if self._stt >= total:
                return None
            end = min(end, total)
        left = min(s["chunk_left_context"] * f, self._stt)
        right = min(s["chunk_right_context"] * f, have - end)
        a, b = self._stt - left - self._mel_start, end + right - self._mel_start
        emb = self.model.pre_encode(self._mel[a:b])
        lc, rc = round(left / f), math.ceil(right / f)
        preds = self.model.encode(np.concatenate([self.cache.context(), emb]))
        out = self.cache.update(emb, preds, lc, rc)
        self._stt = end
        keep = max(0, self._stt - s["chunk_left_context"] * f - self._mel_start)
        self._mel = self._mel[keep:]
        self._mel_start += keep
        self.frames_out += len(out)
        return out

    def _run(self, total: int | None) -> np.ndarray:
        out = []
        while (p := self._step(total)) is not None:
            out.append(p)
        return np.concatenate(out) if out else np.zeros((0, self.model.config.n_speakers), np.float32)

    def push(self, mel: np.ndarray) -> np.ndarray:
        """Feed mel frames; returns the probabilities of the frames now decided."""
        mel = np.asarray(mel, np.float32)
        if len(mel):
            self._mel = np.concatenate([self._mel, mel])
        return self._run(None)

    def finish(self) -> np.ndarray:
        return self._run(self._mel_start + len(self._mel))
