"""The cera plugin module of cera-backend-vulkan: registers the backend name `vulkan`, with
the honest reason it cannot run (it is not implemented yet). See `cera.placeholder`."""

from __future__ import annotations

import cera
from cera.placeholder import placeholder_spec

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_backends(register):
    register(
        placeholder_spec(
            "vulkan", "cera-backend-vulkan", "cera_backend_vulkan.backend:VulkanBackend", 10, "GPUs through wgpu (Vulkan, Metal, DX12)"
        )
    )
