"""The placeholder backends (metal): registered, honest, and refusing.

Each distribution registers its backend name with cera so users can see it, declares no
tensor types and no ops (so admission never picks it), reports itself unusable with the
reason, and its factory raises `BackendUnavailable` with that same reason.
"""

from __future__ import annotations

import importlib
from importlib import metadata

import pytest

from cera.errors import BackendUnavailable
from cera.plugins import PluginManager
from cera.registry import load_factory

STUBS = ["metal"]  # vulkan and hexagon are implemented: tests/backend_vulkan/test_plugin.py, tests/backend_hexagon


@pytest.fixture(params=STUBS)
def stub(request):
    name = request.param
    dist = f"cera-backend-{name}"
    try:
        metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        pytest.skip(f"{dist} is not installed (pip install -e ./{dist})")
    return name, dist


def test_entry_point_names_the_plugin_module(stub):
    name, dist = stub
    eps = [ep for ep in metadata.distribution(dist).entry_points if ep.group == "cera"]
    assert [(ep.name, ep.value) for ep in eps] == [(name, f"cera_backend_{name}.plugin")]


def test_registers_an_unusable_backend_that_serves_nothing(stub):
    name, dist = stub
    plugin = importlib.import_module(f"cera_backend_{name}.plugin")
    m = PluginManager(allow=set())
    record = m.register_plugin(plugin, name, dist)
    assert (record.status, record.backends) == ("ok", [name])
    spec = m.backend_spec(name)
    assert spec.tensor_types == () and spec.ops == ()
    reason = spec.unavailable_reason()
    assert reason.startswith(f"not implemented in this version of {dist}")
    # The factory refuses with the same reason, whatever it is given.
    factory = load_factory(spec.factory)
    for args, kwargs in [((), {}), ((4,), {"device": 0})]:
        with pytest.raises(BackendUnavailable) as info:
            factory(*args, **kwargs)
        assert str(info.value) == f"backend {name!r} is unavailable: {reason}"
