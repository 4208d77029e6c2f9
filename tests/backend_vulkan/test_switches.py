"""The Vulkan backend's switches (environment variables for measuring one kernel against
another, cera-backend-vulkan's README): a bad value is an error that names the variable,
the value and the choices, never a silent default."""

from __future__ import annotations

from pathlib import Path

import pytest

from cera.errors import UnsupportedOperation

from .conftest import needs_vulkan

TINY = Path(__file__).resolve().parent.parent / "models" / "reference" / "tiny"


@pytest.mark.parametrize(
    ("var", "value", "pattern"),
    [
        ("CERA_VULKAN_UNIT_DOT", "i4", r"CERA_VULKAN_UNIT_DOT='i4' is not one of f32, i8, i8-shared"),
        ("CERA_VULKAN_ATT_SPLIT", "1", r"CERA_VULKAN_ATT_SPLIT='1' is not a whole number from 2 to 64"),
        ("CERA_VULKAN_ATT_SPLIT", "eight", r"CERA_VULKAN_ATT_SPLIT='eight' is not a whole number"),
        ("CERA_VULKAN_MATMUL", "5x5", r"CERA_VULKAN_MATMUL='5x5' is not one of 4x4, 4x8, .*4x4-skew-split"),
    ],
)
def test_a_bad_switch_names_itself(var, value, pattern, monkeypatch):
    from cera_backend_vulkan import compile as vk

    monkeypatch.setenv(var, value)
    read = {
        "CERA_VULKAN_UNIT_DOT": vk.unit_dot,
        "CERA_VULKAN_ATT_SPLIT": vk.att_split,
        "CERA_VULKAN_MATMUL": vk.VulkanExecutable._matmul_name,
    }[var]
    with pytest.raises(UnsupportedOperation, match=pattern):
        read()


def test_the_switches_defaults(monkeypatch):
    """Unset (or empty): the defaults the README names."""
    from cera_backend_vulkan import compile as vk

    for var in ("CERA_VULKAN_UNIT_DOT", "CERA_VULKAN_ATT_SPLIT", "CERA_VULKAN_MATMUL"):
        monkeypatch.setenv(var, "")
    assert vk.unit_dot() == "i8-shared"
    assert vk.att_split() == 16
    assert vk.VulkanExecutable._matmul_name() == "4x4-skew"


@needs_vulkan
def test_a_bad_attention_kernel_fails_the_load(monkeypatch):
    """The attention kernel is read when a graph compiles: the first pass under a bad
    name fails there, naming it."""
    import cera
    from cera.graph.builder import ARGMAX
    from cera.generation.runtime import SeqStep

    monkeypatch.setenv("CERA_VULKAN_ATTENTION", "flash")
    m = cera.load(TINY / "tiny-mistral.gguf", device="vulkan", quiet=True)
    st = m.runner.new_state(64)
    slot = st.acquire()
    with pytest.raises(UnsupportedOperation, match=r"attention kernel 'flash' is not one of lanes, lanes-whole"):
        m.runner.forward(st, [SeqStep(slot, [1, 2, 3], range(3))], ARGMAX)
