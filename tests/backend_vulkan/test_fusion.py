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
    from cera.graph.builder import ARGMAX, Layout
    from cera.generation.runtime import SeqStep

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
        # qwen3: per-head q/k norms, both rotations, the cache stores and the attention in
        # one dispatch
        ("tiny-qwen3", {"norm+rope+kv_store+attention": 3}, ("rms_norm", "rope", "kv_store", "attention")),
        # gemma2: sandwich norms with their residual adds; the query's scale with the rotations
        ("tiny-gemma2", {"rms_norm+add": 8, "rope+scale+kv_store+attention": 4}, ("add", "rope", "kv_store", "attention")),
        # olmo2: post-norms with their adds (its q/k norms span all heads: not per head)
        ("tiny-olmo2", {"rms_norm+add": 6, "rope+kv_store+attention": 3}, ("add", "kv_store", "attention")),
        # a llama-shaped model: rotations, cache stores and attention in one dispatch,
        # nothing else apart
        ("tiny-mistral", {"rope+kv_store+attention": 3},
         ("rms_norm", "add", "rope", "kv_store", "scale", "attention")),
    ],
)  # fmt: skip
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
    quantized products, against the reference, and those norms no longer apart. With
    f32 products within the float table's tolerance; with the default integer ones (x
    rounded to 8 bits, quantized once a workgroup from the add's result in shared
    memory) at most 1.5x the CPU backend's error on the same file, which rounds x to 8
    bits too. That error is large on this random tiny model (Q8_0: 0.64 on logits of
    scale 9, the CPU's 0.71; Q4_0: 0.013, the CPU's 0.016), so the reference's tolerance
    is only a bound there."""
    from cera.testing import conformance

    from .test_conformance import _quantized_copy

    monkeypatch.setenv("CERA_VULKAN_ROW_KERNEL", "unit-auto")
    path = _quantized_copy(TINY / "tiny-gemma2.gguf", tmp_path / f"tiny-gemma2-{ggml_type}.gguf", ggml_type)
    from cera_backend_vulkan.backend import VulkanBackend

    b = VulkanBackend()
    if not b.ctx.subgroups:
        pytest.skip("this adapter has no subgroup operations (the unit kernel needs them)")
    monkeypatch.setenv("CERA_VULKAN_UNIT_DOT", "f32")
    conformance.check_model(b, path, tolerance=conformance.TOL_F16_TABLE)
    monkeypatch.delenv("CERA_VULKAN_UNIT_DOT")
    got = conformance.check_model(VulkanBackend(), path, tolerance=0.2)
    cpu = pytest.importorskip("cera_backend_cpu.backend", reason="the CPU backend is the comparison")
    want = conformance.check_model(cpu.CpuBackend(), path, tolerance=0.2)
    assert got <= 1.5 * want, (got, want)

    import cera
    from cera.graph.builder import ARGMAX, Layout
    from cera.generation.runtime import SeqStep

    m = cera.load(path, device="vulkan", quiet=True)
    st = m.runner.new_state(64)
    slot = st.acquire()
    m.runner.forward(st, [SeqStep(slot, [1, 2, 3], range(3))], ARGMAX)
    labels = collections.Counter(d.label for d in m.runner.executable(Layout((1,)), ARGMAX, st).dispatches)
    # per layer: the post-attention norm's add into gate/up, the post-FFN norm's into the
    # next layer's Q/K/V (the last layer's into the output product)
    fused = sum(c for k, c in labels.items() if k.startswith("rms_norm+add+"))
    assert fused == 8 and labels["rms_norm+add"] == 0, dict(labels)


def _decode_logits(name: str, steps: int) -> tuple[list, collections.Counter]:
    """Two sequences (prompts of 260 and 7 tokens), then ``steps`` decode steps of both
    as one batch and ``steps`` of the first alone: each step's logits, and the labels
    of the one-row pass's dispatches."""
    import numpy as np

    import cera
    from cera.graph.builder import LAST_LOGITS, Layout
    from cera.generation.runtime import SeqStep

    m = cera.load(TINY / f"{name}.gguf", device="vulkan", quiet=True)
    st = m.runner.new_state(512, n_slots=2)
    a, b = st.acquire(), st.acquire()
    prompt_a = [(7 * i) % 50 + 1 for i in range(260)]
    prompt_b = [3, 9, 27, 17, 5, 15, 45]
    out = [np.asarray(m.runner.forward(st, [SeqStep(a, prompt_a, range(260))], LAST_LOGITS)["logits"]).copy()]
    out.append(np.asarray(m.runner.forward(st, [SeqStep(b, prompt_b, range(7))], LAST_LOGITS)["logits"]).copy())
    na, nb = 260, 7
    for i in range(steps):
        got = m.runner.forward(st, [SeqStep(a, [11 + i], [na]), SeqStep(b, [21 + i], [nb])], LAST_LOGITS)["logits"]
        out.append(np.asarray(got).copy())
        na, nb = na + 1, nb + 1
    for i in range(steps):
        out.append(np.asarray(m.runner.forward(st, [SeqStep(a, [31 + i], [na])], LAST_LOGITS)["logits"]).copy())
        na += 1
    labels = collections.Counter(d.label for d in m.runner.executable(Layout((1,)), LAST_LOGITS, st).dispatches)
    return out, labels


@needs_vulkan
@pytest.mark.parametrize("norm_sum", ["subgroups", "tree"])
@pytest.mark.parametrize("attention", ["lanes", "lanes-split"])
@pytest.mark.parametrize("name", ["tiny-qwen3", "tiny-gemma2", "tiny-olmo2", "tiny-mistral"])
def test_rotating_attention_gives_the_same_bits(name, attention, norm_sum, monkeypatch):
    """The attention kernel's rotating form (the rope pair's norms, rotations, scale and
    cache stores in the attention's own dispatch) gives the bits of the rope dispatch and
    the plain attention (CERA_VULKAN_ROPE_ATTENTION=0): decode steps of a batch of two
    sequences and of one, over 260 cells (three chunks of 128, and under "lanes-split"
    the current cell in the third span), after prompts that write the cache the other way;
    the q/k norms' sums through subgroups and through the shared-memory tree
    (CERA_VULKAN_ROPE_TREE=1, as adapters without subgroups take them)."""
    import numpy as np

    monkeypatch.setenv("CERA_VULKAN_ATTENTION", attention)
    monkeypatch.setenv("CERA_VULKAN_ROPE_TREE", "1" if norm_sum == "tree" else "0")
    runs = {}
    for flag in ("0", "1"):
        monkeypatch.setenv("CERA_VULKAN_ROPE_ATTENTION", flag)
        runs[flag] = _decode_logits(name, 3)
    (plain, plain_labels), (fused, fused_labels) = runs["0"], runs["1"]
    assert not any(k.endswith("+attention") or k.endswith("+attention (split)") for k in plain_labels), plain_labels
    assert any("kv_store+attention" in k for k in fused_labels), fused_labels
    assert len(plain) == len(fused) == 8
    for i, (x, y) in enumerate(zip(plain, fused, strict=True)):
        x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
        assert np.array_equal(x.view(np.uint32), y.view(np.uint32)), (name, i, float(np.abs(x - y).max()))
