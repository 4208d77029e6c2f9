"""Fixtures of the CPU backend's tests.

The kernel variant under test follows $CERA_CPU_VARIANT like the backend itself, so
``CERA_CPU_VARIANT=scalar pytest tests/backend_cpu`` runs everything on the portable
path, as on a machine without SIMD. Tests that compare variants take every variant this
machine can run (only the forced one when the variable is set).
"""

from __future__ import annotations

import pytest

pytest.importorskip(
    "cera_backend_cpu._cpu", reason="cera-backend-cpu is not installed (pip install -e ./cera-backend-cpu)"
)


@pytest.fixture(scope="session")
def be():
    from cera_backend_cpu.backend import CpuBackend

    backend = CpuBackend(threads=2)
    yield backend
    backend.close()



@pytest.fixture(scope="session")
def scalar_be():
    from cera_backend_cpu.backend import CpuBackend

    backend = CpuBackend(threads=1, variant="scalar")
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def variant_backends():
    """{variant: single-threaded backend} for every SIMD variant under test."""
    from cpu_variants import simd_variants

    from cera_backend_cpu.backend import CpuBackend

    backends = {v: CpuBackend(threads=1, variant=v) for v in simd_variants()}
    yield backends
    for b in backends.values():
        b.close()
