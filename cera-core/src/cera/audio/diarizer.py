"""The streaming interface of a speaker diarizer: who spoke when.

A diarizer reads mono float32 PCM at its rate in chunks of any size and hands out
`SpeakerTurn`s (start and end seconds from the first sample pushed since `reset`, and a
speaker index) as soon as they are final; `flush` ends the stream and returns the rest.
Speakers are numbered in order of arrival: the first voice heard is 0, the next new one 1,
and so on, up to the diarizer's ``max_speakers``. ``covered`` says up to what time every
turn has been handed out, so a consumer (the `cera.audio.AudioPipeline`) knows when it may
label a transcript. Plugins register implementations as `cera.AudioComponent` of kind
``"diarizer"``; `load_diarizer` opens a GGUF file with the one that serves its architecture.
"""

from __future__ import annotations

import abc
import os

import attrs

from ..errors import AudioError
from .component import StreamingAudioComponent, load_component


@attrs.frozen
class SpeakerTurn:
    start: float  # seconds
    end: float
    speaker: int  # 0, 1, ... in order of arrival

    @property
    def label(self) -> str:
        return f"SPEAKER_{self.speaker:02d}"

    def to_json(self) -> dict:
        return {"start": round(self.start, 3), "end": round(self.end, 3), "speaker": self.label}

    def rttm(self, file_id: str = "audio") -> str:
        """One line of NIST's RTTM format (SPEAKER, file, channel 1, onset, duration, speaker)."""
        return f"SPEAKER {file_id} 1 {self.start:.3f} {self.end - self.start:.3f} <NA> <NA> {self.label} <NA> <NA>"


class Diarizer(StreamingAudioComponent):
    """Speaker turns in a stream of mono float32 PCM (see the module docstring)."""

    kind = "diarizer"
    max_speakers: int = 0

    @abc.abstractmethod
    def push(self, pcm) -> list[SpeakerTurn]:
        """Feed samples; returns the turns that became final (possibly none)."""

    @abc.abstractmethod
    def flush(self) -> list[SpeakerTurn]:
        """End of the stream: the turns still open or waiting. `reset` starts a new one."""

    @property
    @abc.abstractmethod
    def covered(self) -> float:
        """Seconds up to which every turn has been handed out (after `flush`: all of it)."""

    def diarize(self, samples, chunk: int = 16000) -> list[SpeakerTurn]:
        """The turns of a whole recording, from a fresh state."""
        self.reset()
        turns: list[SpeakerTurn] = []
        for at in range(0, len(samples), chunk):
            turns += self.push(samples[at : at + chunk])
        turns += self.flush()
        self.reset()
        return turns


def load_diarizer(path: str | os.PathLike, manager=None, **options) -> Diarizer:
    """Open a speaker diarization model file (GGUF) with the installed component for its architecture."""
    d = load_component(path, "diarizer", manager=manager, **options)
    if not isinstance(d, Diarizer):
        raise AudioError(f"{path}: the component that loaded it is not a Diarizer ({type(d).__name__})")
    return d
