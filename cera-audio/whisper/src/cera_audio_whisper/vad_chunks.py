"""Transcribing only the speech: Silero VAD (cera-audio-vad) picks the spans, Whisper hears
them joined, and the segment times are mapped back onto the recording.

The span rules are faster-whisper's defaults for its ``vad_filter``: speech at probability
0.5, silences of 2 s or more split, 0.4 s of padding on each side.
"""

from __future__ import annotations

import attrs
import numpy as np

from cera.errors import AudioError

SAMPLE_RATE = 16000


def speech_spans(samples: np.ndarray) -> list[tuple[int, int]]:
    try:
        from cera_audio_vad.default import default_model_path
    except ImportError:
        raise AudioError("--vad needs the Silero VAD component: pip install cera-audio-vad") from None
    from cera.audio import SegmentParams, load_vad

    vad = load_vad(default_model_path(quiet=True), sample_rate=SAMPLE_RATE)
    params = SegmentParams(threshold=0.5, min_speech_duration_ms=0, min_silence_duration_ms=2000, speech_pad_ms=400)
    return [(s.start, s.end) for s in vad.speech_segments(samples, params)]


def transcribe_with_vad(tr, samples: np.ndarray, progress=None, **options):
    """Segments of the speech in ``samples``, with times on the original recording."""
    spans = speech_spans(samples)
    if not spans:
        return
    joined = np.concatenate([samples[a:b] for a, b in spans])
    # where each span starts in the joined audio, and in the recording
    starts = np.cumsum([0] + [b - a for a, b in spans])

    def original(t: float) -> float:
        i = int(t * SAMPLE_RATE)
        k = int(np.searchsorted(starts, i, side="right") - 1)
        k = min(max(k, 0), len(spans) - 1)
        return (spans[k][0] + (i - starts[k])) / SAMPLE_RATE

    for s in tr.segments(joined, progress=progress, **options):
        yield attrs.evolve(s, start=original(s.start), end=original(s.end))


class SpeechGate:
    """Which stretches of a recording hold speech, by Silero VAD with the span rules above,
    fed block by block (16 kHz): ``gate(start, end)`` says whether samples [start, end)
    overlap any speech. `cera transcribe` skips the 30 s windows it says have none, as
    faster-whisper's ``vad_filter`` leaves silence out, so silence is transcribed as nothing
    (Whisper's no-speech rule alone lets "You" through on digital silence: faster-whisper's
    base model does so on tests/audio_whisper/data/silence.flac with beam 5)."""

    def __init__(self):
        try:
            from cera_audio_vad.default import default_model_path
        except ImportError:
            raise AudioError(
                "the speech gate needs the Silero VAD component: pip install cera-audio-vad (or pass --no-vad-gate)"
            ) from None
        from cera.audio import SegmentParams, SpeechSegmenter, load_vad

        self.vad = load_vad(default_model_path(quiet=True), sample_rate=SAMPLE_RATE)
        self.vad.reset()
        params = SegmentParams(threshold=0.5, min_speech_duration_ms=0, min_silence_duration_ms=2000, speech_pad_ms=400)
        self.segmenter = SpeechSegmenter(sample_rate=SAMPLE_RATE, frame_samples=self.vad.frame_samples, params=params)
        self.spans: list[tuple[int, int]] = []
        self.n_samples = 0

    def feed(self, block: np.ndarray) -> None:
        self.n_samples += len(block)
        self.spans += [(s.start, s.end) for s in self.segmenter.push_many(self.vad.process(block))]

    def finish(self) -> SpeechGate:
        tail = self.segmenter.push_many(self.vad.flush()) + self.segmenter.finish(self.n_samples)
        self.spans += [(s.start, s.end) for s in tail]
        self.spans.sort()
        self._starts = [a for a, _ in self.spans]
        return self

    def __call__(self, start: int, end: int) -> bool:
        import bisect

        i = bisect.bisect_left(self._starts, end)  # the spans that start before `end`
        # they follow one another without overlapping: the last of them ends latest
        return i > 0 and self.spans[i - 1][1] > start
