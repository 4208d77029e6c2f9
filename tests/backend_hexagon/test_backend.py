"""Where the Hexagon backend runs, what it refuses, and its cache of context binaries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cera.errors import BackendUnavailable, InvalidOptions, UnsupportedOperation

from .conftest import needs_simulator

TINY = Path(__file__).resolve().parent.parent / "models" / "reference" / "tiny"


def test_off_device_it_is_one_clear_line(monkeypatch):
    import platform

    from cera.plugins import registry

    monkeypatch.setattr(registry, "_probe_results", {})
    from cera_backend_hexagon import target

    monkeypatch.delenv("CERA_HEXAGON_TARGET", raising=False)
    if platform.machine().lower() in ("aarch64", "arm64"):
        pytest.skip("an ARM64 machine may have a Hexagon NPU")
    reason = target.unavailable_reason()
    assert reason is not None and "\n" not in reason
    assert "no Hexagon NPU" in reason or "not installed" in reason
    if "no Hexagon NPU" in reason:
        assert "CERA_HEXAGON_TARGET=simulator" in reason
    from cera_backend_hexagon.backend import HexagonBackend

    with pytest.raises(BackendUnavailable, match="hexagon"):
        HexagonBackend()


def test_auto_passes_over_it_with_the_reason(monkeypatch):
    import cera
    from cera.plugins import registry
    from cera.plugins.manager import get_manager

    monkeypatch.delenv("CERA_HEXAGON_TARGET", raising=False)
    monkeypatch.setattr(registry, "_probe_results", {})
    spec = get_manager().backend_spec("hexagon")
    reason = spec.unavailable_reason() if hasattr(spec, "unavailable_reason") else None
    import platform

    if platform.machine().lower() in ("aarch64", "arm64"):
        pytest.skip("an ARM64 machine may have a Hexagon NPU")
    assert reason
    m = cera.load(str(TINY / "tiny-mistral.gguf"), device="auto", quiet=True)
    try:
        assert m.backend.name != "hexagon"
        assert any(n.startswith("hexagon:") for n in m.backend_notes), m.backend_notes
    finally:
        m.close()


def test_soc_names():
    from cera_backend_hexagon.target import resolve_soc

    assert resolve_soc(None).name == "SM8650" or resolve_soc(None).name  # default (or $CERA_HEXAGON_SOC)
    assert (resolve_soc("SM8650").soc_model, resolve_soc("SM8650").htp_arch) == (57, 75)
    assert resolve_soc("8elite").name == "SM8750" and resolve_soc("69").htp_arch == 79
    with pytest.raises(InvalidOptions, match="SM8650"):
        resolve_soc("SM0000")


@needs_simulator
def test_the_simulator_is_passed_over_under_auto(simulator):
    import cera

    info = simulator.probe()
    assert info.usable and info.software and "simulator" in info.device
    m = cera.load(str(TINY / "tiny-mistral.gguf"), device="auto", quiet=True)
    try:
        assert m.backend.name != "hexagon"  # it computes on the CPU: only --device hexagon uses it
    finally:
        m.close()


@needs_simulator
def test_context_binaries_are_cached_and_reused(simulator, hexagon_cache):
    import cera

    m = cera.load(str(TINY / "tiny-mistral.gguf"), device="hexagon", quiet=True)
    try:
        s = m.new_session(n_ctx=32)
        s.append_tokens([1, 5, 9, 2])
        first = np.asarray(s.evaluate())
        built = [st for st in m.backend.stats if not st["cached"]]
        assert built and all(Path(st["path"]).exists() for st in built)
        assert all(st["context_bytes"] > 0 for st in built)
        assert all(st["soc"] == "SM8650" and st["htp_arch"] == 75 for st in built)
    finally:
        m.close()
    m = cera.load(str(TINY / "tiny-mistral.gguf"), device="hexagon", quiet=True)
    try:
        s = m.new_session(n_ctx=32)
        s.append_tokens([1, 5, 9, 2])
        again = np.asarray(s.evaluate())
        assert [st["cached"] for st in m.backend.stats] == [True]
        np.testing.assert_array_equal(first, again)  # the same binary gives the same numbers
    finally:
        m.close()


@needs_simulator
def test_an_op_qnn_refuses_is_named(simulator, monkeypatch, hexagon_cache):
    """A node the HTP cannot compile fails the graph with the cera op it came from (here
    gelu_erf lowered through ONNX Erf, which QNN's HTP does not take), never a CPU fallback."""
    from cera.testing import conformance
    from cera_backend_hexagon import lower

    def erf_act(self, kind, x):
        return self.op("Erf", [x])

    monkeypatch.setattr(lower._Lowering, "_act", erf_act)
    case = next(c for c in conformance.op_cases() if c.name == "unary[gelu_erf]")
    with pytest.raises(UnsupportedOperation, match=r"unary \(node \d+\) as ONNX Erf"):
        conformance.check_op(simulator, case)
    assert not [p for p in hexagon_cache.rglob("*") if p.name.endswith(".tmp")]  # nothing half-built is kept


def test_an_op_without_a_lowering_is_refused_by_name():
    from cera.graph.builder import GraphBuilder, Layout, Outputs, WeightRef
    from cera.state import SSMState, StateSpec
    from cera_backend_hexagon.lower import lower

    spec = StateSpec()
    ref = spec.add(SSMState(2, 4, 8))
    g = GraphBuilder(Layout((2,)), Outputs())
    x = g.embedding(WeightRef("e", "F32", (8, 16)), g.tokens)
    n = 2
    y = g.ssm_scan(g.reshape(x, (n, 2, 4)), g.embedding(WeightRef("d", "F32", (2, 16)), g.tokens), WeightRef("A", "F32", (2,)),
                   g.reshape(g.embedding(WeightRef("b", "F32", (8, 16)), g.tokens), (n, 1, 8)),
                   g.reshape(g.embedding(WeightRef("c", "F32", (8, 16)), g.tokens), (n, 1, 8)), ref)  # fmt: skip
    g.output("y", y)
    with pytest.raises(UnsupportedOperation, match="ssm_scan"):
        lower(g.finish(), {})


@needs_simulator
def test_kv_types_other_than_f16_are_refused(simulator):
    from cera.state import AttentionKV, StateSpec

    spec = StateSpec()
    spec.add(AttentionKV(2, 16, 16))
    with pytest.raises(UnsupportedOperation, match="kv_type f16"):
        simulator.new_state(spec, 16, kv_type="q8_0")


def test_refused_nodes_are_read_from_onnxruntimes_log():
    from cera_backend_hexagon.qnn import refused_ops

    log = "2026 [E:onnxruntime:, qnn_execution_provider.cc:2453 GetCapabilityImpl] Unsupported nodes in QNN EP: { name: n7_unary/Erf3, type: Erf }, "
    assert refused_ops(log) == ["unary (node 7) as ONNX Erf"]
