"""The interface of a speech transcriber, and how one is loaded from a GGUF file.

A transcriber takes mono float32 PCM at its rate (16 kHz for Whisper) and gives
`TranscriptSegment`s: start and end seconds, text, and the model's tokens. Two ways in:

- `transcribe(samples)`: a whole recording, segments as they are decoded (an iterator, so
  a long file shows progress and can be cancelled between windows with `cancel()`);
- streaming: `push(chunk)` any number of times, then `flush()`. Audio is buffered until a
  model window is full; the buffer is transcribed, every segment but the last is final and
  returned, and the audio from the last segment's start stays buffered, so a word cut by
  a chunk boundary is heard whole. `flush()` transcribes what is left. Times count from the
  first sample pushed since the last `reset()`.

Implementations subclass `Transcriber` and implement `from_gguf` and `transcribe`; the
streaming half comes from here. A plugin registers one with ``cera_register_audio`` as a
`cera.AudioComponent` of kind ``"transcriber"``.
"""

from __future__ import annotations

import abc
import os
import threading
from collections.abc import Iterator

import attrs
import numpy as np

from ..errors import AudioError
from .component import StreamingAudioComponent, load_component
from .pcm import as_pcm


@attrs.frozen
class TranscriptSegment:
    start: float  # seconds from the start of the audio
    end: float
    text: str
    tokens: tuple[int, ...] = ()
    avg_logprob: float = 0.0
    no_speech_prob: float = 0.0

    def to_json(self) -> dict:
        return {"start": round(self.start, 3), "end": round(self.end, 3), "text": self.text, "tokens": list(self.tokens),
                "avg_logprob": self.avg_logprob, "no_speech_prob": self.no_speech_prob}  # fmt: skip


class Transcriber(StreamingAudioComponent):
    """Speech to text over mono float32 PCM at ``sample_rate``. See the module docstring."""

    kind = "transcriber"
    window_seconds: float = 30.0  # audio the model hears at once; streaming buffers this much

    def __init__(self) -> None:
        self._buffer = np.zeros(0, np.float32)
        self._buffer_start = 0  # samples pushed before the buffer's first
        self._cancel = threading.Event()

    @abc.abstractmethod
    def transcribe(self, samples, **options) -> Iterator[TranscriptSegment]:
        """Segments of a whole recording, in order, as they are decoded."""

    def cancel(self) -> None:
        """Stop a transcription in progress (from another thread) before its next window."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def reset(self) -> None:
        self._buffer = np.zeros(0, np.float32)
        self._buffer_start = 0
        self._cancel.clear()

    def _shifted(self, seg: TranscriptSegment) -> TranscriptSegment:
        at = self._buffer_start / self.sample_rate
        return attrs.evolve(seg, start=seg.start + at, end=seg.end + at)

    def push(self, chunk, **options) -> list[TranscriptSegment]:
        """Add audio; returns the segments that became final (possibly none)."""
        x = as_pcm(chunk, "chunk", offset=self._buffer_start + len(self._buffer), sample_rate=self.sample_rate)
        self._buffer = np.concatenate([self._buffer, x])
        out: list[TranscriptSegment] = []
        window = int(self.window_seconds * self.sample_rate)
        while len(self._buffer) >= window:
            segs = list(self.transcribe(self._buffer[:window], **options))
            if len(segs) >= 2:
                keep_from = int(segs[-1].start * self.sample_rate)
                final = segs[:-1]
            else:  # one long segment or silence: it is final, move on by the window
                keep_from = window
                final = segs
            keep_from = max(1, min(keep_from, window))
            out += [self._shifted(s) for s in final]
            self._buffer = self._buffer[keep_from:]
            self._buffer_start += keep_from
        return out

    def flush(self, **options) -> list[TranscriptSegment]:
        """Transcribe what is buffered; the stream then starts over at the current time."""
        if not len(self._buffer):
            return []
        segs = [self._shifted(s) for s in self.transcribe(self._buffer, **options)]
        self._buffer_start += len(self._buffer)
        self._buffer = np.zeros(0, np.float32)
        return segs


def load_transcriber(path: str | os.PathLike, manager=None, **options) -> Transcriber:
    """Open a speech recognition model file (GGUF) with the installed component for its architecture."""
    tr = load_component(path, "transcriber", manager=manager, **options)
    if not isinstance(tr, Transcriber):
        raise AudioError(f"{path}: the component that loaded it is not a Transcriber ({type(tr).__name__})")
    return tr
