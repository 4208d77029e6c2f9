"""A recording for `cera transcribe`: read whole when short, streamed when long.

A recording of up to `features.STREAM_MIN_SAMPLES` (10 minutes at 16 kHz) is read whole,
as `cera_audio_io.read_audio` reads it; a longer one goes through the file twice in blocks
(`features.StreamedFeatures`), so an hour takes the memory of a few windows, not of the
hour. On the first pass the speech gate (`vad_chunks.SpeechGate`) hears it too.
"""

from __future__ import annotations

import os

import attrs
import numpy as np

from cera.errors import AudioError

from . import mel as melmod
from .features import STREAM_MIN_SAMPLES, ArrayFeatures, StreamedFeatures


@attrs.define
class Recording:
    source_rate: int
    features: object  # ArrayFeatures or StreamedFeatures
    gate: object | None  # a SpeechGate, or None
    samples: np.ndarray | None  # the samples, when read whole

    @property
    def duration(self) -> float:
        return self.features.n_samples / melmod.SAMPLE_RATE


def _blocks(path):
    from cera_audio_io import open_audio

    with open_audio(path, melmod.SAMPLE_RATE) as stream:
        try:
            yield from stream
        except (RuntimeError, TypeError, ValueError) as e:  # libsndfile failing mid-file
            raise AudioError(f"{path}: reading the samples failed ({e}); the file is damaged") from None


def open_recording(path: str | os.PathLike, filters: np.ndarray, gate: bool = True, whole: bool = False,
                   stream_min: int = STREAM_MIN_SAMPLES) -> Recording:  # fmt: skip
    """``path`` as Whisper's features (and with ``gate``, where its speech is); ``whole``
    keeps the samples in memory whatever the length (for `--vad`, which joins them)."""
    from cera_audio_io import open_audio
    from cera.audio.pcm import as_pcm

    with open_audio(path, melmod.SAMPLE_RATE) as stream:
        source_rate = stream.info.source_rate
    speech = None
    if gate:
        from .vad_chunks import SpeechGate

        speech = SpeechGate()
    head, n, ended = [], 0, True
    blocks = _blocks(path)
    for block in blocks:
        head.append(block)
        n += len(block)
        if n > stream_min and not whole:
            ended = False
            break
    blocks.close()
    if ended:
        samples = np.concatenate(head) if head else np.zeros(0, np.float32)
        if len(samples) < 2:
            raise AudioError(f"{path}: holds too few samples to be a recording")
        samples = as_pcm(samples, str(path), sample_rate=melmod.SAMPLE_RATE)
        features = ArrayFeatures(melmod.log_mel(samples, filters), len(samples))
        if speech is not None:
            speech.feed(samples)
    else:
        del head
        features = StreamedFeatures(lambda: _blocks(path), filters, on_block=speech.feed if speech else None)
        samples = None
    return Recording(source_rate, features, speech.finish() if speech is not None else None, samples)
