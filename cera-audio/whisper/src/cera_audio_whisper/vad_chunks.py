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
