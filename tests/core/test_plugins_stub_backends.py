"""Placeholder backends (`cera.plugins.placeholder`): a distribution may register a backend
name before its backend runs. Registered so users see it, it declares no tensor types and
no ops (so admission never picks it), reports itself unusable with the reason, and its
factory raises `BackendUnavailable` with that same reason. Every first-party backend is
implemented now, so the facility is tested through a plugin module made here.
"""

from __future__ import annotations

import sys
import types

import pytest

from cera.errors import BackendUnavailable
from cera.plugins.manager import PluginManager
from cera.plugins.placeholder import PlaceholderBackend, not_implemented, placeholder_spec
from cera.plugins.registry import load_factory


@pytest.fixture
def plugin(monkeypatch):
    """A plugin module `tp_npu.plugin` registering the placeholder backend `tp-npu`."""
    from cera.plugins.hookspecs import hookimpl

    backend = types.ModuleType("tp_npu.backend")

    class Factory(PlaceholderBackend):
        name = "tp-npu"
        distribution = "tp-npu"

    backend.Factory = Factory
    mod = types.ModuleType("tp_npu.plugin")

    @hookimpl
    def cera_register_backends(register):
        register(placeholder_spec("tp-npu", "tp-npu", "tp_npu.backend:Factory", 50, "a test NPU"))

    mod.cera_register_backends = cera_register_backends
    mod.CERA_PLUGIN_API = ">=2,<3"
    pkg = types.ModuleType("tp_npu")
    for name, m in (("tp_npu", pkg), ("tp_npu.backend", backend), ("tp_npu.plugin", mod)):
        monkeypatch.setitem(sys.modules, name, m)
    return mod


def test_registers_an_unusable_backend_that_serves_nothing(plugin):
    m = PluginManager(allow=set())
    record = m.register_plugin(plugin, "tp-npu", "tp-npu")
    assert (record.status, record.backends) == ("ok", ["tp-npu"])
    spec = m.backend_spec("tp-npu")
    assert spec.tensor_types == () and spec.ops == () and spec.placeholder
    reason = spec.unavailable_reason()
    assert reason == not_implemented("tp-npu") and reason.startswith("not implemented in this version of tp-npu")
    # The factory refuses with the same reason, whatever it is given.
    factory = load_factory(spec.factory)
    for args, kwargs in [((), {}), ((4,), {"device": 0})]:
        with pytest.raises(BackendUnavailable) as info:
            factory(*args, **kwargs)
        assert str(info.value) == f"backend 'tp-npu' is unavailable: {reason}"
