"""The cera plugin entry point of the CPU backend (entry-point group "cera", name "cpu").

This module is imported by `cera plugins` and by backend selection, so it imports
nothing heavy: no numpy, no compiled module. The factory string names the class that
cera imports only when the backend is actually used.
"""

from __future__ import annotations

import importlib.util

import cera

from .capabilities import OPS, TENSOR_TYPES

CERA_PLUGIN_API = ">=2,<3"


def _available() -> str | None:
    # find_spec locates the compiled module without loading it.
    if importlib.util.find_spec("cera_backend_cpu._cpu") is None:
        return (
            "the compiled kernels (cera_backend_cpu._cpu) are missing: reinstall cera-backend-cpu "
            "with a C compiler present (pip install --force-reinstall --no-binary cera-backend-cpu cera-backend-cpu)"
        )
    return None


@cera.hookimpl
def cera_register_backends(register):
    register(
        cera.BackendSpec(
            name="cpu",
            factory="cera_backend_cpu.backend:CpuBackend",
            tensor_types=TENSOR_TYPES,
            ops=OPS,
            priority=0,
            description="CPU: quantized C kernels with run-time SIMD dispatch (AVX2, AVX-512, NEON), numpy",
            available=_available,
        )
    )
