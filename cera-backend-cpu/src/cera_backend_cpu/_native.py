"""The compiled kernels (cffi module cera_backend_cpu._cpu), loaded on first use."""

from __future__ import annotations

from cera.errors import BackendUnavailable

try:
    from ._cpu import ffi, lib
except ImportError as e:  # pragma: no cover - depends on the install
    raise BackendUnavailable(
        f"the CPU backend's compiled kernels cannot be loaded ({e}); reinstall cera-backend-cpu "
        "with a C compiler present: pip install --force-reinstall --no-binary cera-backend-cpu cera-backend-cpu"
    ) from e

__all__ = ["ffi", "lib", "compiled_variants", "usable_variants", "best_variant", "cpu_features"]


def compiled_variants() -> list[str]:
    """Kernel variants built into this install, worst to best."""
    return ffi.string(lib.cera_compiled_variants()).decode().split(",")


def usable_variants() -> list[str]:
    """Compiled variants this CPU can run, worst to best."""
    return [v for v in compiled_variants() if lib.cera_variant_usable(v.encode())]


def best_variant() -> str:
    return ffi.string(lib.cera_best_variant()).decode()


def cpu_features() -> str:
    return ffi.string(lib.cera_cpu_features()).decode()
