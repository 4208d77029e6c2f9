"""The Metal backend's tests run on MLX's CPU device where there is no Metal (Linux, CI:
``pip install "mlx[cpu]"``), set here before any plugin is asked whether it can run (the
answer is kept), and on the GPU on a Mac. Without mlx they skip, saying why."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

if sys.platform != "darwin":
    os.environ.setdefault("CERA_METAL_DEVICE", "cpu")

WHY_NOT = None if importlib.util.find_spec("mlx") is not None else "mlx is not installed (pip install 'mlx[cpu]')"
needs_mlx = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


@pytest.fixture(scope="session")
def metal():
    if WHY_NOT is not None:
        pytest.skip(WHY_NOT)
    from cera_backend_metal.backend import MetalBackend

    return MetalBackend()
