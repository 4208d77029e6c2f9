"""The cera plugin module of cera-backend-metal.

It registers the backend name `metal` so that users see it in `cera plugins` and
`cera inspect`, together with the honest reason it cannot run: it is not implemented yet.
It declares no tensor types and no ops, so no file is ever admitted to it.
"""

from __future__ import annotations

import cera

CERA_PLUGIN_API = ">=1,<2"

NOT_IMPLEMENTED = (
    "not implemented in this version of cera-backend-metal; "
    "choose another backend (`cera plugins` lists the usable ones)"
)


def available() -> str | None:
    """Why the backend cannot run here (None would mean it can)."""
    return NOT_IMPLEMENTED


@cera.hookimpl
def cera_register_backends(register):
    register(
        cera.BackendSpec(
            name="metal",
            factory="cera_backend_metal.backend:MetalBackend",
            tensor_types=(),
            ops=(),
            priority=10,  # above the CPU: a usable accelerator wins under --device auto
            description="Apple GPUs through MLX (not implemented yet)",
            available=available,
        )
    )
