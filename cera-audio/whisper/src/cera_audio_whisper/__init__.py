"""cera-audio-whisper: Whisper speech recognition on cera's backends.

- `convert` (``cera convert whisper SRC OUT.gguf``): CTranslate2 Whisper folders (the
  files faster-whisper loads) to GGUF;
- `WhisperTranscriber`: the `cera.audio.Transcriber` of GGUF architecture ``whisper``
  (``cera.audio.load_transcriber(path)``);
- ``cera transcribe --audio FILE``: the command, with tiny.en as its default model.

Importing this package imports nothing heavy; the model loads on first use.
"""

from __future__ import annotations

__all__ = ["WhisperTranscriber", "convert"]


def __getattr__(name):
    if name == "WhisperTranscriber":
        from .transcriber import WhisperTranscriber

        return WhisperTranscriber
    if name == "convert":
        from .convert import convert

        return convert
    raise AttributeError(name)
