"""The cera plugin module of cera-audio-diarizer.

Registers the GE2E speaker diarizer (GGUF architecture ``ge2e``) and the ``cera diarize``
and ``cera diarize-convert`` commands. It imports only cera and click: numpy and the model
load when a command runs or a file is opened.
"""

from __future__ import annotations

import cera

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_audio(register):
    register(
        cera.AudioComponent(
            name="ge2e-diarizer",
            kind="diarizer",
            architectures=("ge2e",),
            factory="cera_audio_diarizer.diarizer:SpeakerDiarizer",
            description="speaker diarization: Silero VAD segments, GE2E speaker embeddings (LSTM graph on a backend), online clustering",
        )
    )


@cera.hookimpl
def cera_register_commands(register):
    from .commands import diarize_command, diarize_convert_command

    register(diarize_command)
    register(diarize_convert_command)
