"""The cera plugin module of cera-backend-metal: registers the backend `metal`.

Imported by `cera plugins`, `cera --help` and backend selection, so it imports nothing
heavy: not MLX. The availability check looks at the platform, the environment and whether
the mlx package is installed (`unavailable_reason`).

Which device: on macOS with Apple silicon MLX's default device is the GPU, through Metal.
Anywhere else MLX (``pip install "mlx[cpu]"``) has only its CPU device, which runs the same
programs slowly: a correctness tool (tests, CI, checking a model without a Mac). It is used
only when asked for: ``CERA_METAL_DEVICE=cpu`` (also on a Mac, to compare the two).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys

import cera

from .capabilities import OPS, TENSOR_TYPES

CERA_PLUGIN_API = ">=2,<3"
ENV = "CERA_METAL_DEVICE"


def wanted() -> str:
    """ "gpu" (the default) or "cpu" (``CERA_METAL_DEVICE=cpu``); anything else is refused."""
    v = os.environ.get(ENV, "").strip().lower()
    return v or "gpu"


def unavailable_reason() -> str | None:
    """None where the backend can run, else why not; imports nothing heavy."""
    v = wanted()
    if v not in ("gpu", "cpu"):
        return (
            f"{ENV}={os.environ.get(ENV)!r} is not a device: use 'cpu' (MLX's CPU device) or leave it unset (the GPU)"
        )
    if importlib.util.find_spec("mlx") is None:
        extra = "mlx" if sys.platform == "darwin" else "'mlx[cpu]'"
        return f"the mlx package is missing: pip install {extra}"
    if v == "cpu":
        return None
    if sys.platform != "darwin" or platform.machine() != "arm64":
        return (
            f"no Metal device on this machine ({sys.platform} {platform.machine()}: MLX drives Apple GPUs "
            f"under macOS); {ENV}=cpu runs the backend on MLX's CPU device instead (slow: for checking)"
        )
    return None


def details() -> dict:
    """What `cera plugins --json` shows, without importing MLX: the device this machine
    would give (or none, and why), its memory, and how each tensor type runs."""
    from .capabilities import TYPES

    why = unavailable_reason()
    if why:
        device = None
    elif wanted() == "cpu":
        device = f"MLX CPU device ({ENV}=cpu)"
    else:
        device = "Apple GPU through Metal (MLX)"
    mem = None
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")  # unified memory on Apple silicon
    except (AttributeError, ValueError, OSError):
        pass
    return {
        "device": device,
        "unavailable_reason": why,
        "memory_bytes": mem,
        "types": {t: {"how": how, "values": exact} for t, (how, exact) in TYPES.items()},
    }


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
