"""cera-audio-kws: keyword spotting (wake words) for cera.

microWakeWord's streaming int8 models, converted from .tflite to GGUF (`convert`), run
with numpy: TensorFlow Lite Micro's audio front end (`MicroFrontend`), the streaming
network (`StreamingNetwork`) and the detector's sliding average (`HotwordDetector`);
`HotwordIterator` adds Silero VAD gating and gain control. The plugin module
(`cera_audio_kws.plugin`) registers the component and the `cera kws` commands.
"""

from __future__ import annotations

__all__ = [
    "Detection",
    "HotwordDetector",
    "HotwordIterator",
    "MicroFrontend",
    "StreamingNetwork",
    "convert",
    "load_hotword_detector",
    "model_path",
]

_WHERE = {
    "Detection": "detector",
    "HotwordDetector": "detector",
    "load_hotword_detector": "detector",
    "HotwordIterator": "gated",
    "MicroFrontend": "frontend",
    "StreamingNetwork": "network",
    "convert": "convert",
    "model_path": "models",
}


def __getattr__(name):
    # Lazy, so that importing the package (as the plugin loader does) stays cheap.
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
