"""Opening MLX's device and describing it (MLX imported here; the cheap checks that need no
MLX are in plugin.py)."""

from __future__ import annotations

import os
import platform

from .plugin import ENV, wanted


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
    get = getattr(mx, "device_info", None) or getattr(mx.metal, "device_info", None)
    info = get() if get is not None else {}
    name = info.get("device_name", "Apple GPU")
    mem = info.get("max_recommended_working_set_size") or info.get("memory_size")
    return f"MLX {mx.__version__} Metal: {name}", int(mem) if mem else None, False
