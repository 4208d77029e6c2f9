"""The cera plugin module of cera-backend-hexagon.

It registers the backend name `hexagon` so that users see it in `cera plugins` and
`cera inspect`, together with the honest reason it cannot run: it is not implemented yet.
It declares no tensor types and no ops, so no file is ever admitted to it.
"""

from __future__ import annotations

import cera

CERA_PLUGIN_API = ">=1,<2"

NOT_IMPLEMENTED = (
    "not implemented in this version of cera-backend-hexagon; "
    "choose another backend (`cera plugins` lists the usable ones)"
)


def available() -> str | None:
    """Why the backend cannot run here (None would mean it can)."""
    return NOT_IMPLEMENTED


@cera.hookimpl
def cera_register_backends(register):
    register(
        cera.BackendSpec(
            name="hexagon",
            factory="cera_backend_hexagon.backend:HexagonBackend",
            tensor_types=(),
            ops=(),
            priority=5,  # above the CPU: a usable accelerator wins under --device auto
            description="Qualcomm Hexagon NPUs (HTP) through QNN (not implemented yet)",
            available=available,
        )
    )
