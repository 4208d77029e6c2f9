"""A layer's Q, K and V products of one normed input, as a decode step runs them: one
dispatch of the unit kernel (wgsl.matvec_unit with ``segments``) where the row kernel's
plan takes their types, each product read in its own weight type's unit layout. Checked
against the numpy reference, and the dispatch checked to be that kernel (a fallback to
the workgroup kernel would pass the numbers and test nothing)."""

from __future__ import annotations

import pytest

from cera.testing import conformance
from cera.testing.conformance import TOL_QUANT, OpCase, WeightSpec

from .conftest import needs_vulkan

DIM = 512  # two K-quant super-blocks, 16 units of the 32-element types


def _case(types: tuple[str, str, str], seq_lens: tuple[int, ...]) -> OpCase:
    def build(g, w, s):
        x = g.embedding(w["x"], g.tokens)
        h = g.rms_norm(x, w["n"], 1e-6)
        for name in ("q", "k", "v"):
            g.output(name, g.linear(h, w[name], w.get(f"{name}_b")))

    weights = (
        WeightSpec("x", (16, DIM), "F32", 1.0),
        WeightSpec("n", (DIM,)),
        WeightSpec("q", (72, DIM), types[0]),
        WeightSpec("k", (24, DIM), types[1]),
        WeightSpec("v", (24, DIM), types[2]),
        WeightSpec("q_b", (72,)),
    )
    return OpCase(f"qkv[{'/'.join(types)},{'x'.join(map(str, seq_lens))}]", "linear", build, weights,
                  passes=(seq_lens,), tolerance=TOL_QUANT)  # fmt: skip


@needs_vulkan
@pytest.mark.parametrize("seq_lens", [(1,), (1, 1, 1)], ids=["1", "1x1x1"])
@pytest.mark.parametrize(
    "types, kernel",
    [
        (("Q4_K", "Q4_K", "Q6_K"), "unit-auto"),  # Qwen2.5 1.5B's layers
        (("Q4_K", "Q4_K", "Q4_K"), "unit-auto"),
        (("Q5_0", "Q5_0", "Q8_0"), "unit-auto"),  # Qwen2.5 0.5B's, Gemma 3's
        (("Q4_K", "Q5_0", "Q6_K"), "unit-auto"),  # three layouts in one dispatch
    ],
)
def test_qkv_in_one_unit_dispatch(types, kernel, seq_lens, monkeypatch):
    from cera_backend_vulkan import compile as vk_compile
    from cera_backend_vulkan.backend import VulkanBackend

    b = VulkanBackend()
    if not b.ctx.subgroups:
        pytest.skip("this adapter has no subgroup operations (the unit kernel needs them)")
    b.row_kernel = kernel
    seen = []
    emit = vk_compile.VulkanExecutable._emit

    def spy(self, key, *a, **kw):
        seen.append(key[0])
        return emit(self, key, *a, **kw)

    monkeypatch.setattr(vk_compile.VulkanExecutable, "_emit", spy)
    conformance.check_op(b, _case(types, seq_lens))
    assert "matvec_unit_seg" in seen, seen
