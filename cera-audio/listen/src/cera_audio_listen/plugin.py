"""The cera plugin module of cera-audio-listen: registers ``cera listen`` (imports only cera
and click; the components load when the command runs)."""

from __future__ import annotations

import cera

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_commands(register):
    from .commands import listen_command

    register(listen_command)
