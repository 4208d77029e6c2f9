"""The cera plugin module of cera-backend-metal: registers the backend `metal`.

Imported by `cera plugins`, `cera --help` and backend selection, so it imports nothing
heavy: not MLX. The availability check looks at the platform, the environment and whether
the mlx package is installed (`device.unavailable_reason`).
"""

from __future__ import annotations

import cera

from .capabilities import OPS, TENSOR_TYPES
from .device import details, unavailable_reason

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_backends(register):
    register(
        cera.BackendSpec(
            name="metal",
            factory="cera_backend_metal.backend:MetalBackend",
            tensor_types=TENSOR_TYPES,
            ops=OPS,
            priority=20,  # above Vulkan and the CPU: on a Mac, MLX's Metal is the fastest path
            description="Apple GPUs through MLX (GGUF blocks in MLX's quantized layout, compiled decode steps)",
            available=unavailable_reason,
            details=details,
        )
    )
