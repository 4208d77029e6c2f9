"""The typed events of the `cera.audio.AudioPipeline`, in one stream.

Times are seconds from the first sample pushed since the pipeline's last `reset`. Each
event has ``to_json()``: the objects ``cera listen --json`` prints, one per line.
"""

from __future__ import annotations

import enum

import attrs


class PipelineState(enum.Enum):
    """Where the pipeline is: waiting for the wake word, waiting for speech after it (or,
    without a keyword spotter, for any speech), inside an utterance, or waiting for the
    transcription of one (while listening on for the next)."""

    LISTENING_FOR_HOTWORD = "listening_for_hotword"
    LISTENING_FOR_SPEECH = "listening_for_speech"
    SPEECH_ACTIVE = "speech_active"
    TRANSCRIBING = "transcribing"


@attrs.frozen
class Hotword:
    time: float  # the end of the audio that completed the wake word
    wake_word: str
    probability: float

    def to_json(self) -> dict:
        return {"event": "hotword", "time": round(self.time, 3), "wake_word": self.wake_word,
                "probability": round(self.probability, 6)}  # fmt: skip


@attrs.frozen
class SpeechStart:
    time: float

    def to_json(self) -> dict:
        return {"event": "speech_start", "time": round(self.time, 3)}


@attrs.frozen
class SpeechEnd:
    time: float

    def to_json(self) -> dict:
        return {"event": "speech_end", "time": round(self.time, 3)}


@attrs.frozen
class Transcript:
    start: float
    end: float
    text: str
    speaker: str | None = None  # with a diarizer: its speaker label (SPEAKER_00, ...)

    def to_json(self) -> dict:
        doc = {"event": "transcript", "start": round(self.start, 3), "end": round(self.end, 3), "text": self.text}
        if self.speaker is not None:
            doc["speaker"] = self.speaker
        return doc


@attrs.frozen
class TranscriptCancelled:
    """The transcription of this utterance was cancelled (`AudioPipeline.cancel`)."""

    start: float
    end: float

    def to_json(self) -> dict:
        return {"event": "cancelled", "start": round(self.start, 3), "end": round(self.end, 3)}


PipelineEvent = Hotword | SpeechStart | SpeechEnd | Transcript | TranscriptCancelled
