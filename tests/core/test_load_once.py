"""A load does each of its steps once: the source is resolved once (also when the CLI
resolved it first to time it), the model's graphs are built once for the shape check and
admission, a candidate backend's ops are checked once (admission, against what it
registered) and its probe runs once, whether it is chosen or passed over."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from tiny_llama import write_llama  # noqa: E402

import cera  # noqa: E402
import cera.engine  # noqa: E402
import cera.sources  # noqa: E402
from cera.backend import DeviceInfo  # noqa: E402
from cera.plugins.manager import PluginManager  # noqa: E402

pytest.importorskip("cera_backend_cpu")
from cera_backend_cpu.backend import CpuBackend  # noqa: E402
from cera_backend_cpu.capabilities import OPS, TENSOR_TYPES  # noqa: E402

CALLS: dict[str, int] = {}


def _count(what: str) -> None:
    CALLS[what] = CALLS.get(what, 0) + 1


class CountingCpu(CpuBackend):
    """The CPU backend, counting what the loader asks of it."""

    def probe(self) -> DeviceInfo:
        _count("counting.probe")
        return super().probe()

    def missing_ops(self, ops) -> list[str]:
        _count("counting.missing_ops")
        return super().missing_ops(ops)


class EmulatedCpu(CountingCpu):
    """Reports itself a software-emulated device: passed over under auto."""

    def probe(self) -> DeviceInfo:
        _count("emulated.probe")
        return DeviceInfo(usable=True, device="an emulated GPU", memory_bytes=None, software=True)


def _plugin(name: str, factory: str, priority: int):
    module = types.ModuleType(f"{name}_plugin")
    module.CERA_PLUGIN_API = f">={cera.PLUGIN_API_VERSION}"

    @cera.hookimpl
    def cera_register_backends(register):
        register(cera.BackendSpec(name=name, factory=factory, tensor_types=TENSOR_TYPES, ops=OPS, priority=priority))

    module.cera_register_backends = cera_register_backends
    return module


@pytest.fixture
def manager() -> PluginManager:
    m = PluginManager(allow={"cpu", "llama"})
    m.load_entry_points()
    for name, factory, priority in [("emulated", f"{__name__}:EmulatedCpu", 60),
                                    ("counting", f"{__name__}:CountingCpu", 50)]:  # fmt: skip
        assert m.register_plugin(_plugin(name, factory, priority), name).status == "ok"
    return m


@pytest.fixture
def counted(monkeypatch):
    """Counts resolutions (sources that were not already a LocalModel) and graph builds."""
    CALLS.clear()
    resolve, model_ops = cera.sources.resolve, cera.engine.model_ops

    def counting_resolve(source, *args, **kwargs):
        if not isinstance(source, cera.sources.LocalModel):
            _count("resolve")
        return resolve(source, *args, **kwargs)

    def counting_model_ops(*args, **kwargs):
        _count("model_ops")
        return model_ops(*args, **kwargs)

    monkeypatch.setattr(cera.sources, "resolve", counting_resolve)
    monkeypatch.setattr(cera.engine, "model_ops", counting_model_ops)
    return CALLS


def test_a_load_does_each_step_once(tmp_path, manager, counted):
    path = write_llama(tmp_path / "m.gguf")
    with cera.load(str(path), manager=manager, threads=1) as loaded:
        assert loaded.backend.name == "cpu"  # CountingCpu, registered as "counting"
        assert isinstance(loaded.backend, CountingCpu) and not isinstance(loaded.backend, EmulatedCpu)
        assert loaded.backend_notes == []  # an emulated device passed over is no news
    assert counted == {"resolve": 1, "model_ops": 1, "emulated.probe": 1, "counting.probe": 1}


def test_the_cli_resolves_a_source_once_for_its_timing_and_the_load(tmp_path, monkeypatch, counted):
    from cera_cli.options import Console, load_model

    path = write_llama(tmp_path / "m.gguf")
    loaded = load_model(str(path), "cpu", 1, Console(quiet=True))
    try:
        assert loaded.path == path
    finally:
        loaded.close()
    assert counted == {"resolve": 1, "model_ops": 1}


def test_a_resolved_source_is_returned_as_it_is(tmp_path):
    path = write_llama(tmp_path / "m.gguf")
    local = cera.sources.resolve(str(tmp_path))  # a folder holding one GGUF file
    assert (local.path, local.kind, local.source) == (path, "file", str(tmp_path))
    assert cera.sources.resolve(local) is local
