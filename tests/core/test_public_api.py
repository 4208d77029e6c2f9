"""The public API is the top of the package: the design's four interfaces and the names a
plugin or an application needs, importable from ``cera`` itself, lazily (importing cera
loads no numpy, no backend and no family)."""

from __future__ import annotations

import subprocess
import sys

import cera


def test_the_four_interfaces_come_from_the_top():
    from cera import Backend, Model, Session, Sink
    from cera.backend import Backend as backend_module_backend
    from cera.generation.session import Session as session_module_session
    from cera.generation.sink import Sink as sink_module_sink
    from cera.model import Model as model_module_model

    assert (Model, Backend, Session, Sink) == (
        model_module_model, backend_module_backend, session_module_session, sink_module_sink
    )


def test_every_public_name_resolves():
    for name in cera.__all__:
        assert getattr(cera, name) is not None, name
    assert set(cera.__all__) <= set(dir(cera))
    assert len(set(cera.__all__)) == len(cera.__all__)
    for name in ("Weights", "GraphBuilder", "StateSpec", "LocalModel", "HParams", "DecoderModel", "ChatSession"):
        assert name in cera.__all__


def test_an_unknown_name_is_an_attribute_error():
    try:
        cera.NoSuchThing  # noqa: B018
    except AttributeError as e:
        assert "NoSuchThing" in str(e)
    else:
        raise AssertionError("cera.NoSuchThing resolved")


def test_importing_cera_stays_light():
    code = "import sys, cera; print(sorted(m for m in ('numpy', 'jinja2', 'cera.engine', 'cera.backend') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    code = "import sys; from cera import Session; print('cera.generation.session' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "True"


def test_the_families_and_backends_implement_the_top_level_interfaces():
    from cera_backend_cpu.backend import CpuBackend
    from cera_model_llama.llama import LlamaModel

    assert issubclass(CpuBackend, cera.Backend)
    assert issubclass(LlamaModel, cera.Model) and issubclass(LlamaModel, cera.DecoderModel)
