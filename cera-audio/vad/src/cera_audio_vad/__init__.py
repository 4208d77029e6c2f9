"""cera-audio-vad: Silero VAD for cera.

`SileroVad` runs the model from GGUF with numpy; `convert` writes that GGUF from the
official ONNX file; `default_model_path` gives the default model (converted from the
silero-vad package on first use and cached). The plugin module (`cera_audio_vad.plugin`)
registers the component and the `cera vad` command.
"""

from __future__ import annotations

__all__ = ["SileroVad", "convert", "default_model_path"]


def __getattr__(name):
    # Lazy, so that importing the package (as the plugin loader does) stays cheap.
    if name == "SileroVad":
        from .silero import SileroVad

        return SileroVad
    if name == "convert":
        from .convert import convert

        return convert
    if name == "default_model_path":
        from .default import default_model_path

        return default_model_path
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
