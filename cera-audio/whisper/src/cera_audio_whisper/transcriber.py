"""`WhisperTranscriber`: the `cera.audio.Transcriber` of Whisper GGUF files."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import attrs

from cera.audio import Transcriber, TranscriptSegment
from cera.audio.pcm import as_pcm
from cera.errors import InvalidOptions

from .transcribe import Segment, TranscribeOptions, Transcription

_OPTION_NAMES = {f.name for f in attrs.fields(TranscribeOptions)}


class WhisperTranscriber(Transcriber):
    sample_rates = (16000,)
    sample_rate = 16000

    def __init__(self, model, options: TranscribeOptions | None = None):
        super().__init__()
        self.model = model
        self.options = options or TranscribeOptions()
        self.last: Transcription | None = None  # the latest transcription (language, duration)

    @classmethod
    def from_gguf(cls, gguf, sample_rate: int | None = None, device: str = "auto", threads: int | None = None,
                  **options) -> WhisperTranscriber:  # fmt: skip
        from .model import WhisperModel

        if sample_rate not in (None, 16000):
            raise InvalidOptions(f"Whisper runs at 16000 Hz, not {sample_rate}; resample the audio (cera_audio_io.read_audio does)")
        return cls(WhisperModel(gguf.path, device=device, threads=threads), cls._options(None, options))

    @staticmethod
    def _options(base: TranscribeOptions | None, options: dict) -> TranscribeOptions:
        unknown = sorted(set(options) - _OPTION_NAMES)
        if unknown:
            raise InvalidOptions(f"unknown transcription option(s) {unknown}; known: {', '.join(sorted(_OPTION_NAMES))}")
        return attrs.evolve(base, **options) if base is not None else TranscribeOptions(**options)

    def segments(self, samples, progress: Callable[[float, float], None] | None = None, speech=None,
                 **options) -> Iterator[Segment]:  # fmt: skip
        """Whisper's own segments (with ids, seek, temperature, compression ratio).
        ``samples``: 16 kHz PCM, or features (`features.StreamedFeatures` for a recording
        streamed from a file); ``speech``: a voice activity gate (see `Transcription`)."""
        from .features import ArrayFeatures, StreamedFeatures

        x = samples if isinstance(samples, (ArrayFeatures, StreamedFeatures)) else as_pcm(
            samples, "samples", sample_rate=self.sample_rate)  # fmt: skip
        opts = self._options(self.options, options)
        self._cancel.clear()
        self.last = Transcription(self.model, x, opts, progress=progress, cancelled=lambda: self.cancelled,
                                  speech=speech)  # fmt: skip
        return iter(self.last)

    def transcribe(self, samples, **options) -> Iterator[TranscriptSegment]:
        for s in self.segments(samples, **options):
            yield TranscriptSegment(s.start, s.end, s.text, s.tokens, s.avg_logprob, s.no_speech_prob)

    def close(self) -> None:
        self.model.close()
