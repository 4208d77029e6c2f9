"""Loading in steps: config (every key understood), tensors (every tensor understood),
admission (types, ops, memory; the same check for `load` and `cera inspect`), bind.

A backend that lacks an op the model uses is passed over under --device auto, with the
reason; named explicitly it is an error. Backend options are typed per backend.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from tiny_llama import write_llama  # noqa: E402

import cera  # noqa: E402
from cera.errors import BackendUnavailable, InvalidOptions, ModelConfigError  # noqa: E402
from cera.plugins.manager import PluginManager  # noqa: E402


def _manager_with(*plugins) -> PluginManager:
    m = PluginManager(allow={"cpu", "llama"})
    m.load_entry_points()
    for name, module in plugins:
        record = m.register_plugin(module, name)
        assert record.status == "ok", record.error
    return m


def _backend_plugin(name: str, priority: int, ops: tuple[str, ...]):
    """A plugin registering the CPU backend's factory under another name, declaring only
    ``ops`` (as a backend that lacks the others would)."""
    from cera_backend_cpu.capabilities import TENSOR_TYPES

    module = types.ModuleType(f"{name}_plugin")
    module.CERA_PLUGIN_API = f">={cera.PLUGIN_API_VERSION}"

    @cera.hookimpl
    def cera_register_backends(register):
        register(cera.BackendSpec(name=name, factory="cera_backend_cpu.backend:CpuBackend", tensor_types=TENSOR_TYPES,
                                  ops=ops, priority=priority))  # fmt: skip

    module.cera_register_backends = cera_register_backends
    return module


def test_a_tensor_the_family_does_not_know_is_refused_by_name(tmp_path):
    path = write_llama(tmp_path / "extra.gguf", extra_tensors={"blk.0.mystery_gate.weight": np.zeros(32)})
    with pytest.raises(ModelConfigError, match="does not understand tensor 'blk.0.mystery_gate.weight'"):
        cera.load(str(path), device="cpu", threads=1)


def test_auto_passes_over_a_backend_that_lacks_an_op_and_says_why(tmp_path):
    from cera.graph.ops import names

    path = write_llama(tmp_path / "m.gguf")
    lacking = tuple(o for o in names() if o != "attention")
    manager = _manager_with(("fastdev", _backend_plugin("fastdev", 50, lacking)))
    loaded = cera.load(str(path), manager=manager, threads=1)
    assert loaded.backend.name == "cpu"
    assert loaded.backend_notes == ["fastdev: lacks op attention that this model uses"]
    # asked for by name, the same backend is an error naming the op
    with pytest.raises(BackendUnavailable, match="backend 'fastdev' cannot run m.gguf: lacks op attention"):
        cera.load(str(path), device="fastdev", manager=manager)


def test_inspect_gives_the_same_answer_as_the_loader(tmp_path):
    from cera.graph.ops import names
    from cera_cli.commands.inspect import inspect_report

    path = write_llama(tmp_path / "m.gguf")
    lacking = tuple(o for o in names() if o != "rope")
    manager = _manager_with(("fastdev", _backend_plugin("fastdev", 50, lacking)))
    report = inspect_report(path, manager)
    by_name = {b["name"]: b for b in report["backends"]}
    assert by_name["fastdev"]["admission"] == "lacks op rope that this model uses"
    assert by_name["cpu"]["admission"] is None
    assert report["runs_on"] == ["cpu"]


def test_backend_options_are_typed(tmp_path):
    path = write_llama(tmp_path / "m.gguf")
    with pytest.raises(InvalidOptions, match="backend 'cpu' has no option.*frobnicate"):
        cera.load(str(path), device="cpu", frobnicate=3)
    loaded = cera.load(str(path), device="cpu", threads=1, memory_limit=2**40)
    assert loaded.backend.threads == 1


def test_a_model_larger_than_the_memory_limit_is_refused_with_sizes(tmp_path):
    path = write_llama(tmp_path / "m.gguf")
    with pytest.raises(BackendUnavailable, match=r"needs about .* GiB .* it has 0.0 GiB"):
        cera.load(str(path), device="cpu", threads=1, memory_limit=1000)


def test_config_is_pure_and_refuses_unknown_keys(tmp_path):
    from cera.formats.gguf import GGUFFile
    from cera_model_llama.llama import LlamaModel

    path = write_llama(tmp_path / "k.gguf", extra={"llama.rope.mystery": 1.5})
    with GGUFFile(path) as g, pytest.raises(ModelConfigError, match="llama.rope.mystery"):
        LlamaModel.read_config(g)
