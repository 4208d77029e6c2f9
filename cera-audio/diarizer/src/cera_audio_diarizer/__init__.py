"""cera-audio-diarizer: who spoke when, for cera.

`SpeakerDiarizer` (a `cera.audio.Diarizer`) cuts the stream into speech segments with
Silero VAD, embeds them with the GE2E speaker encoder (`SpeakerEncoder`: numpy mel front
end, the LSTM as a cera graph on a backend) and clusters the embeddings online; `convert`
writes the encoder's GGUF from resemblyzer's checkpoint; `default_model_path` gives the
default model (converted on first use and cached); `der` scores turns against an RTTM.
"""

from __future__ import annotations

__all__ = ["SpeakerDiarizer", "SpeakerEncoder", "convert", "default_model_path"]


def __getattr__(name):
    # Lazy, so that importing the package (as the plugin loader does) stays cheap.
    if name == "SpeakerDiarizer":
        from .diarizer import SpeakerDiarizer

        return SpeakerDiarizer
    if name == "SpeakerEncoder":
        from .encoder import SpeakerEncoder

        return SpeakerEncoder
    if name == "convert":
        from .convert import convert

        return convert
    if name == "default_model_path":
        from .default import default_model_path

        return default_model_path
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
