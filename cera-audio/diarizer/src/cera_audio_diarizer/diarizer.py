"""`SpeakerDiarizer`: VAD segments, GE2E embeddings, online clustering.

The stream goes through Silero VAD (cera-audio-vad; its default model unless another is
given) and silero-vad's segment rules (`cera.audio.SpeechSegmenter`). Each speech segment,
once final, is cut into pieces of at most ``window_s`` seconds (equal lengths), each
piece's volume is raised to -30 dBFS where it is quieter (resemblyzer's own
preprocessing: the encoder reads mel power, not log mel), embedded as a whole utterance
(`SpeakerEncoder.embed_utterance`) and given a speaker by `OnlineClusters`. A piece
shorter than ``min_new_speaker_s`` never opens a speaker: its embedding is too noisy to
tell a new voice from a known one (thresholds.py has the measurement), so it goes to the
nearest known speaker. Neighbouring
pieces of one speaker are joined into one `SpeakerTurn`. Audio is kept only from the start
of the speech not yet handed out.
"""

from __future__ import annotations

import math

import numpy as np

from cera.audio import Diarizer, SegmentParams, SpeakerTurn, SpeechSegmenter, as_pcm, load_vad
from cera.errors import AudioError, InvalidOptions

from .cluster import DEFAULT_MAX_SPEAKERS, DEFAULT_THRESHOLD, OnlineClusters
from .thresholds import DEFAULT_MIN_NEW_SPEAKER_S

DEFAULT_WINDOW_S = 4.0
TARGET_DBFS = -30.0


def raise_volume(x: np.ndarray, target_dbfs: float = TARGET_DBFS) -> np.ndarray:
    """``x`` scaled up to ``target_dbfs`` RMS where it is quieter (never down): resemblyzer's
    ``normalize_volume(..., increase_only=True)``."""
    rms = float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if len(x) else 0.0
    if rms <= 0:
        return x
    change = target_dbfs - 20 * math.log10(rms)
    return x if change <= 0 else (x * 10 ** (change / 20)).astype(np.float32)


class SpeakerDiarizer(Diarizer):
    sample_rates = (16000,)
    sample_rate = 16000

    def __init__(self, encoder, vad=None, threshold: float = DEFAULT_THRESHOLD,
                 max_speakers: int = DEFAULT_MAX_SPEAKERS, window_s: float = DEFAULT_WINDOW_S,
                 segment_params: SegmentParams | None = None,
                 min_new_speaker_s: float = DEFAULT_MIN_NEW_SPEAKER_S):  # fmt: skip
        if not window_s >= 0.5:
            raise AudioError(f"window_s {window_s}: pieces shorter than 0.5 s give no usable speaker embedding")
        if vad is None:
            from cera_audio_vad.default import default_model_path

            vad = load_vad(default_model_path(quiet=True))
        if vad.sample_rate != self.sample_rate:
            raise AudioError(f"the diarizer's VAD runs at {vad.sample_rate} Hz, not {self.sample_rate} Hz")
        self.encoder = encoder
        self.vad = vad
        self.clusters = OnlineClusters(threshold, max_speakers)
        self.max_speakers = max_speakers
        self.window_s = float(window_s)
        if not (isinstance(min_new_speaker_s, (int, float)) and 0 <= min_new_speaker_s <= window_s):
            raise AudioError(
                f"min_new_speaker_s must be between 0 and window_s ({window_s} s), got {min_new_speaker_s!r}"
            )
        self.min_new_speaker_s = float(min_new_speaker_s)
        self.segment_params = segment_params or SegmentParams()
        self.reset()

    @classmethod
    def from_gguf(cls, gguf, sample_rate: int | None = None, device: str = "auto", threads: int | None = None,
                  **options) -> SpeakerDiarizer:  # fmt: skip
        from .encoder import SpeakerEncoder

        if sample_rate not in (None, 16000):
            raise InvalidOptions(f"the GE2E diarizer runs at 16000 Hz, not {sample_rate}; resample the audio")
        known = {"vad", "threshold", "max_speakers", "window_s", "segment_params", "min_new_speaker_s"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InvalidOptions(f"unknown diarizer option(s) {unknown}; known: {', '.join(sorted(known))}")
        return cls(SpeakerEncoder(gguf.path, device=device, threads=threads), **options)

    # -- streaming ----------------------------------------------------------------------

    def reset(self) -> None:
        self.vad.reset()
        self.clusters.reset()
        self._segmenter = SpeechSegmenter(
            sample_rate=self.sample_rate, frame_samples=self.vad.frame_samples, params=self.segment_params
        )
        self._buffer = np.zeros(0, np.float32)
        self._buffer_start = 0  # stream sample of the buffer's first
        self._seen = 0
        self._covered = 0
        self._flushed = False

    @property
    def covered(self) -> float:
        return self._covered / self.sample_rate

    def push(self, pcm) -> list[SpeakerTurn]:
        if self._flushed:
            raise AudioError("this diarizer was flushed; call reset() to start a new stream")
        x = as_pcm(pcm, "pcm", offset=self._seen, sample_rate=self.sample_rate)
        self._seen += len(x)
        self._buffer = np.concatenate([self._buffer, x])
        segments = self._segmenter.push_many(self.vad.process(x))
        return self._handle(segments, self._segmenter.settled)

    def flush(self) -> list[SpeakerTurn]:
        if self._flushed:
            return []
        self._flushed = True
        segments = self._segmenter.push_many(self.vad.flush())
        segments += self._segmenter.finish(self._seen) if self._seen else []
        return self._handle(segments, self._seen)

    def _handle(self, segments, settled: int) -> list[SpeakerTurn]:
        turns: list[SpeakerTurn] = []
        for s in segments:
            turns += self._turns_of(s.start, s.end)
        self._covered = max(self._covered, min(settled, self._seen))
        drop = min(self._covered, self._seen) - self._buffer_start
        if drop > 0:
            self._buffer = self._buffer[drop:]
            self._buffer_start += drop
        return turns

    def _turns_of(self, start: int, end: int) -> list[SpeakerTurn]:
        sr = self.sample_rate
        audio = self._buffer[max(0, start - self._buffer_start) : end - self._buffer_start]
        n = max(1, math.ceil(len(audio) / (self.window_s * sr)))
        bounds = np.linspace(0, len(audio), n + 1).astype(int)
        turns: list[SpeakerTurn] = []
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            piece = audio[a:b]
            if len(piece) < sr // 10:
                continue
            seconds = len(piece) / sr
            speaker = self.clusters.assign(self.encoder.embed_utterance(raise_volume(piece)), weight=seconds,
                                           may_open=seconds >= self.min_new_speaker_s)  # fmt: skip
            t0, t1 = (start + a) / sr, (start + b) / sr
            if turns and turns[-1].speaker == speaker:
                turns[-1] = SpeakerTurn(turns[-1].start, t1, speaker)
            else:
                turns.append(SpeakerTurn(t0, t1, speaker))
        return turns

    def close(self) -> None:
        self.encoder.close()
