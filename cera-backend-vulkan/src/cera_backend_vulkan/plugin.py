"""The cera plugin module of cera-backend-vulkan: registers the backend `vulkan`.

Imported by `cera plugins`, `cera --help` and backend selection, so it imports nothing
heavy: not wgpu (whose import loads the native library). The availability check only
locates the package; finding an adapter happens when the backend is built.
"""

from __future__ import annotations

import importlib.util

import cera

from .capabilities import OPS, TENSOR_TYPES

CERA_PLUGIN_API = ">=2,<3"


def _available() -> str | None:
    if importlib.util.find_spec("wgpu") is None:
        return "the wgpu package is missing: pip install 'wgpu>=0.32,<0.33'"
    return None


@cera.hookimpl
def cera_register_backends(register):
    register(
        cera.BackendSpec(
            name="vulkan",
            factory="cera_backend_vulkan.backend:VulkanBackend",
            tensor_types=TENSOR_TYPES,
            ops=OPS,
            priority=10,  # above the CPU: a usable GPU wins under --device auto
            description="GPUs through wgpu (Vulkan, Metal, DX12): WGSL kernels on GGUF blocks, one submission per token",
            available=_available,
        )
    )
