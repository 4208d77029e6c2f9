"""The cera plugin module of cera-audio-whisper.

Registers the Whisper transcriber (GGUF architecture ``whisper``) and the ``cera
transcribe`` and ``cera convert`` commands. It imports only cera and click: numpy, the
model and the converter load when a command runs or a file is opened.
"""

from __future__ import annotations

import cera

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_audio(register):
    register(
        cera.AudioComponent(
            name="whisper",
            kind="transcriber",
            architectures=("whisper",),
            factory="cera_audio_whisper.transcriber:WhisperTranscriber",
            description="Whisper speech recognition (encoder-decoder graphs on a cera backend)",
        )
    )


@cera.hookimpl
def cera_register_commands(register):
    from .commands import convert_group, transcribe_command

    register(transcribe_command)
    register(convert_group)
