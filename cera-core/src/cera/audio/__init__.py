"""Audio in cera: the interfaces of audio components, PCM checks, and speech segments.

- `StreamingAudioComponent` (every component) and `VoiceActivityDetector` (the streaming
  VAD interface), loaded from GGUF files with `load_vad` / `load_component` through the
  components that plugins register with ``cera_register_audio``;
- `Transcriber` (speech to text: whole recordings or chunks in, segments out) and
  `load_transcriber`;
- `KeywordSpotter` (wake words: chunks in, `Detection`s out) and `load_kws`;
- `Diarizer` (who spoke when: chunks in, `SpeakerTurn`s out) and `load_diarizer`;
- `AudioPipeline` and `PipelineParams` (wake word -> VAD -> transcription -> speaker, one
  stream of typed events: `Hotword`, `SpeechStart`, `SpeechEnd`, `Transcript`,
  `TranscriptCancelled`; its `PipelineState`);
- `SegmentParams`, `SpeechSegmenter`, `speech_segments`: per-frame speech probabilities
  to speech segments, the same for every VAD.

Importing this package imports numpy only. Reading audio files (libsndfile, libsoxr) is
the library `cera_audio_io` of the distribution cera-audio-io.
"""

from __future__ import annotations

from .component import StreamingAudioComponent, component_for, load_component
from .kws import Detection, KeywordSpotter, load_kws
from .diarizer import Diarizer, SpeakerTurn, load_diarizer
from .events import Hotword, PipelineEvent, PipelineState, SpeechEnd, SpeechStart, Transcript, TranscriptCancelled
from .pcm import as_pcm, downmix
from .segments import SegmentParams, SpeechSegment, SpeechSegmenter, iter_speech_segments, speech_segments
from .transcriber import Transcriber, TranscriptSegment, load_transcriber
from .vad import VoiceActivityDetector, load_vad
from .pipeline import AudioPipeline, PipelineParams

__all__ = [
    "AudioPipeline",
    "Hotword",
    "PipelineEvent",
    "PipelineParams",
    "PipelineState",
    "SpeechEnd",
    "SpeechStart",
    "Transcript",
    "TranscriptCancelled",
    "Detection",
    "KeywordSpotter",
    "Diarizer",
    "SegmentParams",
    "SpeechSegment",
    "SpeakerTurn",
    "SpeechSegmenter",
    "StreamingAudioComponent",
    "Transcriber",
    "TranscriptSegment",
    "VoiceActivityDetector",
    "as_pcm",
    "component_for",
    "downmix",
    "iter_speech_segments",
    "load_kws",
    "load_component",
    "load_diarizer",
    "load_transcriber",
    "load_vad",
    "speech_segments",
]
