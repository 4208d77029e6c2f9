"""cera-audio-listen: ``cera listen``, the `cera.audio.AudioPipeline` from the command line.

`build_pipeline` assembles the pipeline from the installed components (cera-audio-kws,
cera-audio-vad, cera-audio-whisper and, for speaker labels, cera-audio-diarizer).
"""

from __future__ import annotations

__all__ = ["build_pipeline"]


def __getattr__(name):
    if name == "build_pipeline":
        from .assemble import build_pipeline

        return build_pipeline
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
