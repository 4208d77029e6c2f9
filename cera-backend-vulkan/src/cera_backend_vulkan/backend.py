"""The factory named by the `vulkan` BackendSpec: it refuses, naming the reason.

There is no vulkan implementation in this version. Constructing the backend raises
`cera.BackendUnavailable`, so an explicit `--device vulkan` fails clearly instead of
falling back to another device or pretending to compute.
"""

from __future__ import annotations

from cera.errors import BackendUnavailable

from .plugin import NOT_IMPLEMENTED


class VulkanBackend:
    name = "vulkan"

    def __init__(self, *args, **kwargs):
        raise BackendUnavailable(f"backend {self.name!r} is unavailable: {NOT_IMPLEMENTED}")
