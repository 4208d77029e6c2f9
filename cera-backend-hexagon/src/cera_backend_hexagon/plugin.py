"""The cera plugin module of cera-backend-hexagon: registers the backend `hexagon` and the
``cera hexagon-compile`` command.

Imported by `cera plugins`, `cera --help` and backend selection, so it imports nothing
heavy (not onnxruntime): the availability check only looks for the packages, the machine
and the target (`cera_backend_hexagon.target`).
"""

from __future__ import annotations

import cera

from .capabilities import OPS, TENSOR_TYPES

CERA_PLUGIN_API = ">=2,<3"


def _available() -> str | None:
    from .target import unavailable_reason

    return unavailable_reason()


@cera.hookimpl
def cera_register_backends(register):
    register(
        cera.BackendSpec(
            name="hexagon",
            factory="cera_backend_hexagon.backend:HexagonBackend",
            tensor_types=TENSOR_TYPES,
            ops=OPS,
            priority=20,  # above the GPU and the CPU: on a Snapdragon the NPU wins under --device auto
            description="Qualcomm Hexagon NPUs (HTP) through QNN: float16 graphs compiled to cached context binaries",
            available=_available,
        )
    )


@cera.hookimpl
def cera_register_commands(register):
    from .commands import hexagon_compile

    register(hexagon_compile)
