"""The Vulkan compiler's fusions fire where they should: a decode step's dispatches on the
tiny families (their results are checked against the reference by test_conformance's
test_tiny_family; here, that the fused forms are the ones that ran)."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from .conftest import needs_vulkan

TINY = Path(__file__).resolve().parent.parent / "models" / "reference" / "tiny"


def _decode_labels(name: str) -> collections.Counter:
    import cera
    from cera.graph import ARGMAX, Layout
    from cera.runtime import SeqStep

    m = cera.load(TINY / f"{name}.gguf", device="vulkan", quiet=True)
    st = m.runner.new_state(64)
    slot = st.acquire()
    m.runner.forward(st, [SeqStep(slot, [1, 2, 3], range(3))], ARGMAX)
    exe = m.runner.executable(Layout((1,)), ARGMAX, st)
    return collections.Counter(d.label for d in exe.dispatches)


@needs_vulkan
@pytest.mark.parametrize(
    ("name", "fused", "absent"),
    [
        # qwen3: per-head q/k norms, both rotations and the cache stores in one dispatch
        ("tiny-qwen3", {"norm+rope+kv_store": 3}, ("rms_norm", "rope", "kv_store")),
        # gemma2: sandwich norms with their residual adds; the query's scale with the rotations
        ("tiny-gemma2", {"rms_norm+add": 8, "rope+scale+kv_store": 4}, ("add", "rope", "kv_store")),
        # olmo2: post-norms with their adds (its q/k norms span all heads: not per head)
        ("tiny-olmo2", {"rms_norm+add": 6, "rope+kv_store": 3}, ("add", "kv_store")),
        # a llama-shaped model: rotations and cache stores in one dispatch, nothing else apart
        ("tiny-mistral", {"rope+kv_store": 3}, ("rms_norm", "add", "rope", "kv_store", "scale")),
    ],
)
def test_decode_step_fusions(name, fused, absent):
    labels = _decode_labels(name)
    for label, count in fused.items():
        assert labels[label] == count, f"{name}: {label!r} {labels[label]} times, not {count}: {dict(labels)}"
    for label in absent:
        assert labels[label] == 0, f"{name}: {label!r} ran apart {labels[label]} times: {dict(labels)}"


@needs_vulkan
@pytest.mark.parametrize("ggml_type", ["Q8_0", "Q4_0"])
def test_sandwich_adds_in_the_unit_kernel(ggml_type, tmp_path, monkeypatch):
    """Under the GPUs' row kernel, a sandwich norm's residual add that feeds a fused norm
    runs inside the products' unit kernel (wgsl.matvec_unit's pre_add): tiny-gemma2 with
    quantized products, against the reference, and those norms no longer apart."""
    from cera.testing import conformance

    from .test_conformance import _quantized_copy

    monkeypatch.setenv("CERA_VULKAN_ROW_KERNEL", "unit-auto")
    path = _quantized_copy(TINY / "tiny-gemma2.gguf", tmp_path / f"tiny-gemma2-{ggml_type}.gguf", ggml_type)
    from cera_backend_vulkan.backend import VulkanBackend

    b = VulkanBackend()
    if not b.ctx.subgroups:
        pytest.skip("this adapter has no subgroup operations (the unit kernel needs them)")
    conformance.check_model(b, path, tolerance=conformance.TOL_F16_TABLE)

    import cera
    from cera.graph import ARGMAX, Layout
    from cera.runtime import SeqStep

    m = cera.load(path, device="vulkan", quiet=True)
    st = m.runner.new_state(64)
    slot = st.acquire()
    m.runner.forward(st, [SeqStep(slot, [1, 2, 3], range(3))], ARGMAX)
    labels = collections.Counter(d.label for d in m.runner.executable(Layout((1,)), ARGMAX, st).dispatches)
    # per layer: the post-attention norm's add into gate/up, the post-FFN norm's into the
    # next layer's Q/K/V (the last layer's into the output product)
    fused = sum(c for k, c in labels.items() if k.startswith("rms_norm+add+"))
    assert fused == 8 and labels["rms_norm+add"] == 0, dict(labels)
