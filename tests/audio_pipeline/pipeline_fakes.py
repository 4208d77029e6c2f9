"""Small deterministic components for the pipeline's rule tests: an energy VAD, a keyword
spotter that fires at scripted times, transcribers that report the audio they were given,
and a diarizer with scripted turns. The rules are then checked against boundaries known
by construction (tones and silence)."""

from __future__ import annotations

import threading

import numpy as np

from cera.audio import Detection, Diarizer, KeywordSpotter, SpeakerTurn, Transcriber, TranscriptSegment, VoiceActivityDetector

RATE = 16000


def tone(seconds: float, amplitude: float = 0.3) -> np.ndarray:
    t = np.arange(int(round(seconds * RATE))) / RATE
    return (amplitude * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(round(seconds * RATE)), np.float32)


class EnergyVAD(VoiceActivityDetector):
    """Probability = frame RMS / 0.1, at most 1 (a 0.3 tone is speech, silence is not)."""

    sample_rate = RATE
    sample_rates = (RATE,)
    frame_samples = 512

    def __init__(self):
        super().__init__()
        self.resets = 0

    @classmethod
    def from_gguf(cls, gguf, sample_rate=None, **options):
        raise NotImplementedError

    def _reset_state(self):
        self.resets += 1

    def _forward(self, frames):
        rms = np.sqrt(np.mean(np.square(frames, dtype=np.float64), axis=1))
        return np.minimum(rms / 0.1, 1.0).astype(np.float32)


class ScriptedKWS(KeywordSpotter):
    """Detects "Okay Nabu" once the stream has passed each of ``times`` (seconds)."""

    sample_rate = RATE
    sample_rates = (RATE,)
    wake_words = ("Okay Nabu",)

    def __init__(self, times):
        self.times = list(times)
        self.reset()

    @classmethod
    def from_gguf(cls, gguf, sample_rate=None, **options):
        raise NotImplementedError

    def reset(self):
        self._seen = 0
        self._left = list(self.times)

    def push(self, pcm):
        self._seen += len(pcm)
        out = []
        while self._left and self._left[0] * RATE <= self._seen:
            out.append(Detection("Okay Nabu", self._left.pop(0), 0.99))
        return out


def describe(samples: np.ndarray) -> str:
    """What a `Reporter` says about its audio: its length and its first and last loud sample."""
    loud = np.nonzero(np.abs(samples) > 0.01)[0]
    first, last = (int(loud[0]), int(loud[-1])) if len(loud) else (-1, -1)
    return f"n={len(samples)} first={first} last={last}"


class Reporter(Transcriber):
    """Transcribes audio as `describe` of it; ``block_first``: the first call waits until cancelled."""

    sample_rate = RATE
    sample_rates = (RATE,)

    def __init__(self, block_first: bool = False, fail: bool = False):
        super().__init__()
        self.calls: list[np.ndarray] = []
        self.block_first = block_first
        self.fail = fail
        self.started = threading.Event()

    @classmethod
    def from_gguf(cls, gguf, sample_rate=None, **options):
        raise NotImplementedError

    def transcribe(self, samples, **options):
        self.calls.append(np.array(samples))
        if self.fail:
            raise RuntimeError("the model broke")
        if self.block_first and len(self.calls) == 1:
            self.started.set()
            while not self.cancelled:
                self._cancel.wait(0.01)
            return
        yield TranscriptSegment(0.0, len(samples) / RATE, " " + describe(samples))


class ScriptedDiarizer(Diarizer):
    """Hands out scripted turns; ``covered`` lags ``lag`` seconds behind the audio pushed."""

    sample_rate = RATE
    sample_rates = (RATE,)

    def __init__(self, turns, lag: float = 2.0):
        self.script, self.lag = list(turns), lag
        self.reset()

    @classmethod
    def from_gguf(cls, gguf, sample_rate=None, **options):
        raise NotImplementedError

    def reset(self):
        self._seen, self._left, self._flushed = 0, list(self.script), False

    @property
    def covered(self):
        return self._seen / RATE if self._flushed else max(0.0, self._seen / RATE - self.lag)

    def _release(self):
        out = []
        while self._left and self._left[0].end <= self.covered:
            out.append(self._left.pop(0))
        return out

    def push(self, pcm):
        self._seen += len(pcm)
        return self._release()

    def flush(self):
        self._flushed = True
        return self._release()


__all__ = ["EnergyVAD", "Reporter", "ScriptedDiarizer", "ScriptedKWS", "SpeakerTurn", "describe", "silence", "tone"]
