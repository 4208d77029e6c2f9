"""The cera plugin module of cera-backend-hexagon: registers the backend name `hexagon`, with
the honest reason it cannot run (it is not implemented yet). See `cera.plugins.placeholder`."""

from __future__ import annotations

import cera
from cera.plugins.placeholder import placeholder_spec

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_backends(register):
    register(
        placeholder_spec(
            "hexagon", "cera-backend-hexagon", "cera_backend_hexagon.backend:HexagonBackend", 5, "Qualcomm Hexagon NPUs (HTP) through QNN"
        )
    )
