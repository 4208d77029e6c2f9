"""Registers the `serve` command. Cheap: click only; the server's modules load when it runs."""

from __future__ import annotations

import cera

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_commands(register):
    from .command import serve_cmd

    register(serve_cmd)
