"""The cera plugin module of cera-backend-metal: registers the backend name `metal`, with
the honest reason it cannot run (it is not implemented yet). See `cera.plugins.placeholder`."""

from __future__ import annotations

import cera
from cera.plugins.placeholder import placeholder_spec

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_backends(register):
    register(
        placeholder_spec(
            "metal", "cera-backend-metal", "cera_backend_metal.backend:MetalBackend", 10, "Apple GPUs through MLX"
        )
    )
