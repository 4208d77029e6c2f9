"""The Vulkan backend's tests need a Vulkan adapter (in CI: Mesa's lavapipe, installed by
.ci/run); without one they skip, saying why."""

from __future__ import annotations

import importlib.util

import pytest


def _why_not() -> str | None:
    if importlib.util.find_spec("wgpu") is None:
        return "wgpu is not installed (pip install 'wgpu>=0.32,<0.33')"
    try:
        from cera_backend_vulkan import device

        if not device.adapters():
            return "no Vulkan adapter here (Debian: apt-get install mesa-vulkan-drivers gives lavapipe)"
    except Exception as e:  # noqa: BLE001 - any failure to find a device is a reason to skip
        return f"no usable Vulkan adapter here: {e}"
    return None


WHY_NOT = _why_not()
needs_vulkan = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


@pytest.fixture(scope="session")
def vulkan():
    if WHY_NOT is not None:
        pytest.skip(WHY_NOT)
    from cera_backend_vulkan.backend import VulkanBackend

    return VulkanBackend()
