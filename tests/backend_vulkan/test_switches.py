"""The Vulkan backend's tuning (cera_backend_vulkan.tuning: the ``CERA_VULKAN_*``
environment variables for measuring one kernel against another, cera-backend-vulkan's
README): a bad value is an error that names the variable, the value and the choices,
never a silent default; and the tuning is part of the compile key, so a switch changed
between two compiles in one process gives another executable, with correct results."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cera.errors import InvalidOptions, UnsupportedOperation

from .conftest import needs_vulkan

TINY = Path(__file__).resolve().parent.parent / "models" / "reference" / "tiny"


@pytest.mark.parametrize(
    ("var", "value", "pattern"),
    [
        ("CERA_VULKAN_UNIT_DOT", "i4", r"CERA_VULKAN_UNIT_DOT='i4' is not one of f32, i8, i8-shared"),
        ("CERA_VULKAN_ATT_SPLIT", "1", r"CERA_VULKAN_ATT_SPLIT='1' is not a whole number from 2 to 64"),
        ("CERA_VULKAN_ATT_SPLIT", "eight", r"CERA_VULKAN_ATT_SPLIT='eight' is not a whole number"),
        ("CERA_VULKAN_MATMUL", "5x5", r"CERA_VULKAN_MATMUL='5x5' is not one of 4x4, 4x8, .*4x4-skew-split"),
        ("CERA_VULKAN_ATTENTION", "flash", r"CERA_VULKAN_ATTENTION='flash' is not one of lanes, lanes-whole"),
        ("CERA_VULKAN_ROW_KERNEL", "unit-x", r"CERA_VULKAN_ROW_KERNEL='unit-x' is not one of unit-auto, "),
        ("CERA_VULKAN_FOLD_KV", "no", r"CERA_VULKAN_FOLD_KV='no' is not 0 or 1"),
        ("CERA_VULKAN_ROPE_TREE", "2", r"CERA_VULKAN_ROPE_TREE='2' is not 0 or 1"),
        ("CERA_VULKAN_SUBGROUPS", "off", r"CERA_VULKAN_SUBGROUPS='off' is not 0 or 1"),
        ("CERA_VULKAN_RECORD", "fast", r"CERA_VULKAN_RECORD='fast' is not one of c, raw, wgpu"),
        ("CERA_VULKAN_SHADER_CHECKS", "overflow", r"CERA_VULKAN_SHADER_CHECKS='overflow': unknown check"),
    ],
)
def test_a_bad_switch_names_itself(var, value, pattern, monkeypatch):
    from cera_backend_vulkan.tuning import VulkanTuning

    monkeypatch.setenv(var, value)
    with pytest.raises(UnsupportedOperation, match=pattern) as e:
        VulkanTuning.from_env()
    assert isinstance(e.value, InvalidOptions)


def test_the_switches_defaults(monkeypatch):
    """Unset (or empty): the defaults the README names."""
    from cera_backend_vulkan.tuning import ENV_NAMES, VulkanTuning

    assert len(ENV_NAMES) == 13
    for var in ENV_NAMES:
        monkeypatch.setenv(var, "")
    t = VulkanTuning.from_env()
    assert t == VulkanTuning()
    assert (t.unit_dot, t.att_split, t.matmul, t.attention, t.row_kernel) == ("i8-shared", 16, "4x4-skew", "lanes", None)
    assert (t.fold_kv, t.fuse_sandwich, t.rope_attention, t.rope_tree, t.unit_segments) == (True, True, True, False, True)
    assert (t.subgroups, t.shader_checks, t.record) == (True, (), None)


def test_the_switches_parse(monkeypatch):
    from cera_backend_vulkan.tuning import VulkanTuning

    monkeypatch.setenv("CERA_VULKAN_ATT_SPLIT", " 4 ")
    monkeypatch.setenv("CERA_VULKAN_FOLD_KV", "0")
    monkeypatch.setenv("CERA_VULKAN_ROPE_TREE", "1")
    monkeypatch.setenv("CERA_VULKAN_SHADER_CHECKS", "loops, BOUNDS")
    monkeypatch.setenv("CERA_VULKAN_ROW_KERNEL", "unit-auto-sx")
    t = VulkanTuning.from_env()
    assert (t.att_split, t.fold_kv, t.rope_tree, t.shader_checks, t.row_kernel) == (
        4, False, True, ("bounds", "loops"), "unit-auto-sx"
    )  # fmt: skip


def test_a_field_set_in_code_is_checked():
    from cera_backend_vulkan.tuning import VulkanTuning

    with pytest.raises(UnsupportedOperation, match=r"tuning matmul='5x5' is not one of 4x4"):
        VulkanTuning(matmul="5x5")
    with pytest.raises(UnsupportedOperation, match=r"tuning att_split=65 is not a whole number from 2 to 64"):
        VulkanTuning(att_split=65)
    assert VulkanTuning(att_split=8, fold_kv=False).att_split == 8


@needs_vulkan
def test_a_bad_attention_kernel_fails_the_first_pass(monkeypatch):
    """The tuning is read when a pass looks up its compiled graph: the first pass under a
    bad name fails there, naming it."""
    import cera
    from cera.graph.builder import ARGMAX
    from cera.generation.runtime import SeqStep

    monkeypatch.setenv("CERA_VULKAN_ATTENTION", "flash")
    m = cera.load(TINY / "tiny-mistral.gguf", device="vulkan", quiet=True)
    st = m.runner.new_state(64)
    slot = st.acquire()
    with pytest.raises(UnsupportedOperation, match=r"CERA_VULKAN_ATTENTION='flash' is not one of lanes, lanes-whole"):
        m.runner.forward(st, [SeqStep(slot, [1, 2, 3], range(3))], ARGMAX)


@needs_vulkan
def test_a_switch_changed_between_compiles_recompiles(monkeypatch):
    """One process, one loaded model: a pass compiled under the default tuning, then the
    same pass under CERA_VULKAN_ROW_KERNEL=workgroup and CERA_VULKAN_ROPE_ATTENTION=0 is
    compiled again (another executable, other kernels), and both give the numpy
    reference backend's logits; back to the default, the first executable is reused."""
    import cera
    from cera.graph.builder import LAST_LOGITS, Layout
    from cera.generation.runtime import SeqStep
    from cera.testing import reference

    path = TINY / "tiny-mistral.gguf"
    monkeypatch.delenv("CERA_VULKAN_ROW_KERNEL", raising=False)
    monkeypatch.delenv("CERA_VULKAN_ROPE_ATTENTION", raising=False)
    m = cera.load(path, device="vulkan", quiet=True)
    ref = reference.load(path)
    prompt = [1, 5, 9, 2, 7]
    ref_st = ref.runner.new_state(16)
    ref_slot = ref_st.acquire()
    ref.runner.forward(ref_st, [SeqStep(ref_slot, prompt, range(5))], LAST_LOGITS)
    want = ref.runner.forward(ref_st, [SeqStep(ref_slot, [3], [5])], LAST_LOGITS)["logits"]

    def decode_step(st):
        slot = st.acquire()
        m.runner.forward(st, [SeqStep(slot, prompt, range(5))], LAST_LOGITS)
        got = m.runner.forward(st, [SeqStep(slot, [3], [5])], LAST_LOGITS)["logits"]
        return got, m.runner.executable(Layout((1,)), LAST_LOGITS, st)

    st = m.runner.new_state(16, n_slots=3)
    got_a, exe_a = decode_step(st)
    n = m.runner.n_compiled
    monkeypatch.setenv("CERA_VULKAN_ROW_KERNEL", "workgroup")
    monkeypatch.setenv("CERA_VULKAN_ROPE_ATTENTION", "0")
    got_b, exe_b = decode_step(st)
    assert m.runner.n_compiled == n + 2  # the prompt's pass and the decode step again
    assert exe_b is not exe_a
    kernels_a = {d.key[0] for d in exe_a.dispatches}
    kernels_b = {d.key[0] for d in exe_b.dispatches}
    assert "rope_kv" in kernels_b and "rope_kv" not in kernels_a, (kernels_a, kernels_b)
    if m.backend.ctx.subgroups:  # the default row kernel is then the subgroup one
        assert "matvec" in kernels_b and "matvec" not in kernels_a, (kernels_a, kernels_b)
    for got in (got_a, got_b):
        scale = max(1.0, float(np.abs(want).max()))
        assert float(np.abs(got.astype(np.float64) - want).max()) <= 2e-3 * scale
    monkeypatch.delenv("CERA_VULKAN_ROW_KERNEL")
    monkeypatch.delenv("CERA_VULKAN_ROPE_ATTENTION")
    got_c, exe_c = decode_step(st)
    assert exe_c is exe_a and m.runner.n_compiled == n + 2
    assert np.array_equal(got_c, got_a)
    m.close()
    ref.close()
