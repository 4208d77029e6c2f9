"""Audio in cera: the interfaces of audio components, audio input, and speech segments.

- `StreamingAudioComponent` (every component) and `VoiceActivityDetector` (the streaming
  VAD interface), loaded from GGUF files with `load_vad` / `load_component` through the
  components that plugins register with ``cera_register_audio``;
- `read_audio`: audio files to mono float32 PCM at the rate a component needs (libsndfile
  and libsoxr; install ``cera-core[audio]``), and `open_audio` for the same in blocks, in
  memory that does not grow with the file;
- `Transcriber` (speech to text: whole recordings or chunks in, segments out) and
  `load_transcriber`;
- `KeywordSpotter` (wake words: chunks in, `Detection`s out) and `load_kws`;
- `SegmentParams`, `SpeechSegmenter`, `speech_segments`: per-frame speech probabilities
  to speech segments, the same for every VAD.

Importing this package imports numpy only; soundfile and soxr load on first use.
"""

from __future__ import annotations

from .component import StreamingAudioComponent, component_for, load_component
from .io import AudioClip, AudioInfo, AudioStream, choose_rate, open_audio, read_audio, resample
from .kws import Detection, KeywordSpotter, load_kws
from .pcm import as_pcm, downmix
from .segments import SegmentParams, SpeechSegment, SpeechSegmenter, iter_speech_segments, speech_segments
from .transcriber import Transcriber, TranscriptSegment, load_transcriber
from .vad import VoiceActivityDetector, load_vad

__all__ = [
    "AudioClip",
    "AudioInfo",
    "AudioStream",
    "Detection",
    "KeywordSpotter",
    "SegmentParams",
    "SpeechSegment",
    "SpeechSegmenter",
    "StreamingAudioComponent",
    "Transcriber",
    "TranscriptSegment",
    "VoiceActivityDetector",
    "as_pcm",
    "choose_rate",
    "component_for",
    "downmix",
    "iter_speech_segments",
    "load_kws",
    "load_component",
    "load_transcriber",
    "load_vad",
    "open_audio",
    "read_audio",
    "resample",
    "speech_segments",
]
