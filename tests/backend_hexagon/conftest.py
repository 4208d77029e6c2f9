"""The Hexagon backend's tests run on QNN's x86-64 HTP simulator (the onnxruntime-qnn wheel,
Linux x86-64): every test here sets CERA_HEXAGON_TARGET=simulator and keeps the context
binaries it compiles in a folder of its own. Elsewhere they skip, saying why."""

from __future__ import annotations

import importlib.util
import platform

import pytest


def _why_not() -> str | None:
    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return f"QNN's HTP simulator ships for Linux x86-64 only, this is {platform.system()} {platform.machine()}"
    for module, pip in (("onnxruntime_qnn", "onnxruntime-qnn==2.7.0"), ("onnx", "onnx")):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install '{pip}')"
    return None


WHY_NOT = _why_not()
needs_simulator = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


@pytest.fixture(scope="session")
def hexagon_cache(tmp_path_factory):
    """One folder of context binaries for the session's tests (not the user's cache)."""
    return tmp_path_factory.mktemp("hexagon-cache")


@pytest.fixture
def simulator(monkeypatch, hexagon_cache):
    """A HexagonBackend on the simulator, its context binaries under ``hexagon_cache``."""
    if WHY_NOT is not None:
        pytest.skip(WHY_NOT)
    from cera.plugins import registry
    from cera_backend_hexagon import cache

    monkeypatch.setenv("CERA_HEXAGON_TARGET", "simulator")
    monkeypatch.setattr(registry, "_probe_results", {})  # availability is kept per process: ask again
    monkeypatch.delenv("CERA_HEXAGON_SOC", raising=False)
    monkeypatch.setattr(cache, "cache_root", lambda: hexagon_cache)
    from cera_backend_hexagon.backend import HexagonBackend

    return HexagonBackend()
