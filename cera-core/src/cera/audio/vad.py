"""The streaming interface of a voice activity detector (VAD).

A VAD reads mono float32 PCM at one of its sample rates in fixed frames and gives one
speech probability per frame, carrying its state from frame to frame until `reset`.
Subclasses implement only `_reset_state` and `_forward` (a batch of consecutive frames in,
their probabilities out; optionally `_forward_frame` for one); this class adds what every
VAD needs on top:

- `process_frame` (exactly one frame), `process` (any number of samples: a partial frame
  waits for the next call) and `flush` (the waiting partial frame, zero-padded);
- `probabilities`: a whole clip from a fresh state, the last frame zero-padded (the
  convention of silero-vad's ``get_speech_timestamps``);
- `speech_segments` (offline) and `stream_segments` (chunks in, segments out as soon as
  they are final), through the model-independent rules of `cera.audio.segments`.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Iterable, Iterator

import numpy as np

from ..errors import AudioError
from .component import StreamingAudioComponent, load_component
from .pcm import as_pcm
from .segments import SegmentParams, SpeechSegment, SpeechSegmenter


class VoiceActivityDetector(StreamingAudioComponent):
    """Speech probability per frame of mono float32 PCM, with state across frames."""

    kind = "vad"
    frame_samples: int = 0  # samples per frame at `sample_rate`

    def __init__(self) -> None:
        self._pending = np.zeros(0, dtype=np.float32)  # samples of a frame not yet complete
        self._samples_seen = 0

    # -- what a model implements ----------------------------------------------------

    @abc.abstractmethod
    def _reset_state(self) -> None:
        """Zero the model's recurrent state."""

    @abc.abstractmethod
    def _forward(self, frames: np.ndarray) -> np.ndarray:
        """Probabilities of ``frames`` (n, frame_samples) float32, in order, updating the state."""

    def _forward_frame(self, frame: np.ndarray) -> float:
        """The probability of one frame (frame_samples,); override where one frame has a faster path."""
        return float(self._forward(frame.reshape(1, -1))[0])

    # -- streaming --------------------------------------------------------------------

    @property
    def frame_seconds(self) -> float:
        return self.frame_samples / self.sample_rate

    def reset(self) -> None:
        self._reset_state()
        self._pending = np.zeros(0, dtype=np.float32)
        self._samples_seen = 0

    def process_frame(self, frame) -> float:
        """The speech probability of exactly one frame (``frame_samples`` samples)."""
        if len(self._pending):
            raise AudioError(
                f"{len(self._pending)} samples from an earlier process() call wait for the rest of their frame; "
                f"call flush() or reset() before process_frame()"
            )
        x = as_pcm(frame, "frame", offset=self._samples_seen, sample_rate=self.sample_rate)
        if len(x) != self.frame_samples:
            raise AudioError(
                f"a frame at {self.sample_rate} Hz has {self.frame_samples} samples, got {len(x)}; "
                f"use process() for chunks of any length"
            )
        self._samples_seen += len(x)
        return self._forward_frame(x)

    def process(self, samples) -> np.ndarray:
        """Probabilities of every frame completed by ``samples`` (any length; the rest waits)."""
        x = as_pcm(samples, "samples", offset=self._samples_seen, sample_rate=self.sample_rate)
        self._samples_seen += len(x)
        if len(self._pending):
            x = np.concatenate([self._pending, x])
        n = len(x) // self.frame_samples
        used = n * self.frame_samples
        self._pending = x[used:].copy()
        if n == 0:
            return np.zeros(0, dtype=np.float32)
        return self._forward(x[:used].reshape(n, self.frame_samples))

    def flush(self) -> np.ndarray:
        """The probability of the waiting partial frame, zero-padded (empty if none waits)."""
        if not len(self._pending):
            return np.zeros(0, dtype=np.float32)
        frame = np.zeros((1, self.frame_samples), dtype=np.float32)
        frame[0, : len(self._pending)] = self._pending
        self._pending = np.zeros(0, dtype=np.float32)
        return self._forward(frame)

    # -- whole clips ------------------------------------------------------------------

    def probabilities(self, samples) -> np.ndarray:
        """Per-frame probabilities of a whole clip, from a fresh state; the last frame zero-padded."""
        x = as_pcm(samples, "samples", sample_rate=self.sample_rate)
        self.reset()
        probs = np.concatenate([self.process(x), self.flush()])
        self.reset()
        return probs

    def speech_segments(self, samples, params: SegmentParams | None = None) -> list[SpeechSegment]:
        """Speech segments of a whole clip (silero-vad's ``get_speech_timestamps`` rules)."""
        x = as_pcm(samples, "samples", sample_rate=self.sample_rate)
        probs = self.probabilities(x)
        seg = SpeechSegmenter(sample_rate=self.sample_rate, frame_samples=self.frame_samples, params=params)
        return seg.push_many(probs) + seg.finish(len(x))

    def stream_segments(self, chunks: Iterable, params: SegmentParams | None = None) -> Iterator[SpeechSegment]:
        """Speech segments of a stream of PCM chunks, each yielded as soon as it is final.

        Starts from a fresh state. The segments are the same as `speech_segments` of all the
        chunks joined.
        """
        self.reset()
        seg = SpeechSegmenter(sample_rate=self.sample_rate, frame_samples=self.frame_samples, params=params)
        total = 0
        for chunk in chunks:
            before = self._samples_seen
            probs = self.process(chunk)
            total += self._samples_seen - before
            for p in probs:
                yield from seg.push(p)
        for p in self.flush():
            yield from seg.push(p)
        yield from seg.finish(total)
        self.reset()


def load_vad(path: str | os.PathLike, sample_rate: int | None = None, manager=None) -> VoiceActivityDetector:
    """Open a VAD model file (GGUF) with the installed component that serves its architecture.

    ``sample_rate`` picks one of the rates the file serves (None: its first, normally 16000).
    """
    vad = load_component(path, "vad", sample_rate=sample_rate, manager=manager)
    if not isinstance(vad, VoiceActivityDetector):
        raise AudioError(f"{path}: the component that loaded it is not a VoiceActivityDetector ({type(vad).__name__})")
    return vad
