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
