"""The cera plugin module of cera-audio-kws.

Registers the microWakeWord keyword spotter (GGUF architecture ``microwakeword``) and the
``cera kws`` and ``cera kws-convert`` commands. It imports only cera and click: numpy and
the model load when a command runs or a file is opened.
"""

from __future__ import annotations

import cera

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_audio(register):
    register(
        cera.AudioComponent(
            name="microwakeword",
            kind="kws",
            architectures=("microwakeword",),
            factory="cera_audio_kws.detector:HotwordDetector",
            description="microWakeWord streaming int8 wake-word models (micro front end + network), numpy",
        )
    )


@cera.hookimpl
def cera_register_commands(register):
    from .commands import kws_command, kws_convert_command

    register(kws_command)
    register(kws_convert_command)
