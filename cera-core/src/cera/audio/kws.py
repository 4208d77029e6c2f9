"""The streaming interface of a keyword spotter (wake-word detector).

A keyword spotter reads mono PCM at its sample rate in chunks of any size and reports each
detection of one of its wake words, carrying its state from chunk to chunk until
`reset`. Plugins register implementations as `cera.AudioComponent` of kind ``"kws"``;
`load_kws` opens a GGUF file with the one that serves its architecture.
"""

from __future__ import annotations

import abc
import os

import attrs

from ..errors import AudioError
from .component import StreamingAudioComponent, load_component


@attrs.frozen
class Detection:
    """One detection: which wake word, when (seconds from the start of the stream, at the
    end of the audio that completed it) and with what (averaged) probability."""

    wake_word: str
    time: float
    probability: float

    def to_json(self) -> dict:
        return {"wake_word": self.wake_word, "time": round(self.time, 3), "probability": round(self.probability, 6)}


class KeywordSpotter(StreamingAudioComponent):
    """Wake-word detections in a stream of mono PCM."""

    kind = "kws"
    wake_words: tuple[str, ...] = ()
    threshold: float = 0.5

    @abc.abstractmethod
    def push(self, pcm) -> list[Detection]:
        """Feed samples (float in -1..1, or int16); returns the detections they complete."""


def load_kws(path: str | os.PathLike, manager=None, **options) -> KeywordSpotter:
    """Open a keyword-spotting model file (GGUF) with the installed component for its architecture."""
    kws = load_component(path, "kws", manager=manager, **options)
    if not isinstance(kws, KeywordSpotter):
        raise AudioError(f"{path}: the component that loaded it is not a KeywordSpotter ({type(kws).__name__})")
    return kws
