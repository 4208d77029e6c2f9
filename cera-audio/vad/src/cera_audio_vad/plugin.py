"""The cera plugin module of cera-audio-vad.

Registers the Silero VAD audio component (GGUF architecture ``silero-vad``) and the
``cera vad`` and ``cera vad-convert`` commands. It imports only cera and click: numpy, the
model and onnx load when a command runs or a file is opened.
"""

from __future__ import annotations

import cera

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_audio(register):
    register(
        cera.AudioComponent(
            name="silero-vad",
            kind="vad",
            architectures=("silero-vad",),
            factory="cera_audio_vad.silero:SileroVad",
            description="Silero VAD v5/v6 (16 and 8 kHz), numpy",
        )
    )


@cera.hookimpl
def cera_register_commands(register):
    from .commands import vad_command, vad_convert_command

    register(vad_command)
    register(vad_convert_command)
