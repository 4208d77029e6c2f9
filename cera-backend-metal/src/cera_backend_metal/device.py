"""Which MLX device the backend runs on, and what can be said about it cheaply.

On macOS with Apple silicon MLX's default device is the GPU, through Metal. Anywhere else
MLX (``pip install "mlx[cpu]"``) has only its CPU device, which runs the same programs
slowly: a correctness tool (tests, CI, checking a model without a Mac). It is used only
when asked for: ``CERA_METAL_DEVICE=cpu`` (also on a Mac, to compare the two).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys

ENV = "CERA_METAL_DEVICE"


def wanted() -> str:
    """"gpu" (the default) or "cpu" (``CERA_METAL_DEVICE=cpu``); anything else is refused."""
    v = os.environ.get(ENV, "").strip().lower()
    return v or "gpu"


def unavailable_reason() -> str | None:
    """None where the backend can run, else why not; imports nothing heavy."""
    v = wanted()
    if v not in ("gpu", "cpu"):
        return f"{ENV}={os.environ.get(ENV)!r} is not a device: use 'cpu' (MLX's CPU device) or leave it unset (the GPU)"
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


def open_device():
    """The MLX device to use (raises RuntimeError where Metal is wanted but absent)."""
    import mlx.core as mx

    if wanted() == "cpu":
        return mx.Device(mx.cpu)
    if not mx.metal.is_available():
        raise RuntimeError(f"MLX reports no Metal device here; {ENV}=cpu runs on MLX's CPU device")
    return mx.Device(mx.gpu)


def describe(dev) -> tuple[str, int | None, bool]:
    """(description, memory in bytes or None, whether it computes on the CPU)."""
    import mlx.core as mx

    if dev.type == mx.cpu:
        mem = None
        try:
            mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):
            pass
        return f"MLX {mx.__version__} CPU device ({platform.machine()}, {os.cpu_count()} cores)", mem, True
    info = mx.metal.device_info() if hasattr(mx.metal, "device_info") else {}
    name = info.get("device_name", "Apple GPU")
    mem = info.get("max_recommended_working_set_size") or info.get("memory_size")
    return f"MLX {mx.__version__} Metal: {name}", int(mem) if mem else None, False


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
