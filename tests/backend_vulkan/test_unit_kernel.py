"""The unit kernel (wgsl.matvec_unit) beyond the suite's one-product cases:

- a layer's Q, K and V products of one normed input, as a decode step runs them: one
  dispatch (``segments``) where the row kernel's plan takes their types, each product
  read in its own weight type's unit layout. Checked against the numpy reference, and
  the dispatch checked to be that kernel (a fallback to the workgroup kernel would pass
  the numbers and test nothing);
- rows long enough that each lane has several units, after a norm."""

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


def _spy_emits(monkeypatch) -> list:
    from cera_backend_vulkan.lowering import Lowering

    seen = []
    emit = Lowering.emit

    def spy(self, key, *a, **kw):
        seen.append(key)
        return emit(self, key, *a, **kw)

    monkeypatch.setattr(Lowering, "emit", spy)
    return seen


def _unit_backend(monkeypatch, kernel: str = "unit-auto", dot: str | None = None):
    """(a Vulkan backend under row kernel ``kernel``, the list its dispatches' keys go
    to: _spy_emits), the unit kernel's products ``dot`` (CERA_VULKAN_UNIT_DOT) where
    given; skips where the adapter has no subgroups."""
    from cera_backend_vulkan.backend import VulkanBackend

    if dot is not None:
        monkeypatch.setenv("CERA_VULKAN_UNIT_DOT", dot)
    emits = _spy_emits(monkeypatch)
    b = VulkanBackend()
    if not b.ctx.subgroups:
        pytest.skip("this adapter has no subgroup operations (the unit kernel needs them)")
    b.row_kernel = kernel
    return b, emits


@needs_vulkan
@pytest.mark.parametrize("seq_lens", [(1,), (1, 1, 1)], ids=["1", "1x1x1"])
@pytest.mark.parametrize(
    "types, kernel",
    [
        (("Q4_K", "Q4_K", "Q6_K"), "unit-auto"),  # Qwen2.5 1.5B's layers
        (("Q4_K", "Q4_K", "Q4_K"), "unit-auto"),
        (("Q5_0", "Q5_0", "Q8_0"), "unit-auto"),  # Qwen2.5 0.5B's, Gemma 3's
        (("Q4_K", "Q5_0", "Q6_K"), "unit-auto"),  # three layouts in one dispatch
        (("Q4_K", "Q4_K", "Q6_K"), "unit-auto-sx"),  # x through shared memory
        (("Q4_K", "Q5_0", "Q6_K"), "unit-auto-c4"),  # groups of 4 lanes
    ],
)
def test_qkv_in_one_unit_dispatch(types, kernel, seq_lens, monkeypatch):
    # "unit-auto-sx" in f32: the default products quantize x once a workgroup, reading it
    # from memory, and so never pass it through shared memory
    b, emits = _unit_backend(monkeypatch, kernel, "f32" if kernel == "unit-auto-sx" else None)
    conformance.check_op(b, _case(types, seq_lens))
    seen = [k[0] for k in emits]
    assert "matvec_unit_seg" in seen, seen


def _outputs(backend, case) -> list[tuple[dict, dict]]:
    """(the backend's outputs, the reference's) of each pass of case, each pass also
    checked within the case's tolerance (conformance.check_op)."""
    seen = []
    compare = conformance._compare

    def keep(c, i, got, want):
        seen.append((got, want))
        compare(c, i, got, want)

    conformance._compare = keep
    try:
        conformance.check_op(backend, case)
    finally:
        conformance._compare = compare
    return seen


def _long_rows_case(t: str) -> OpCase:
    """Rows of 3072 values (96 units: three a lane of a 32-lane subgroup) after a norm
    fused into the product of 48 features of type t."""

    def build(g, w, s):
        h = g.rms_norm(g.embedding(w["x"], g.tokens), w["n"], 1e-6)
        g.output("y", g.linear(h, w["w"]))

    return OpCase(f"linear[{t},3072]", "linear", build,
                  (WeightSpec("x", (16, 3072), "F32", 1.0), WeightSpec("n", (3072,)), WeightSpec("w", (48, 3072), t)),
                  passes=((1,), (1,)), tolerance=TOL_QUANT)  # fmt: skip


@needs_vulkan
@pytest.mark.parametrize(
    "t, kernel",
    [("Q4_K", "unit-auto"), ("Q6_K", "unit-auto"), ("Q6_K", "unit-f1"), ("Q8_0", "unit-auto"),
     ("Q5_0", "unit-auto"), ("Q4_1", "unit-auto"), ("Q4_K", "unit-auto-c4"), ("Q8_0", "unit-auto-cfit")],
)  # fmt: skip
def test_long_rows_after_a_norm(t, kernel, monkeypatch):
    """Rows of 3072 values after a norm fused into the product (_long_rows_case), through
    the unit kernel, against the reference."""
    case = _long_rows_case(t)
    b, emits = _unit_backend(monkeypatch, kernel)
    conformance.check_op(b, case)
    assert any(k[0] == "matvec_unit" for k in emits), emits


def _errors(backend, case) -> list[float]:
    """The largest difference from the reference of each output of each pass of case."""
    import numpy as np

    return [
        float(np.abs(np.asarray(g[name], np.float64) - np.asarray(want[name])).max())
        for g, want in _outputs(backend, case)
        for name in want
    ]


def _ran_integer(emits: list, kernel: str, dot: str, K: int) -> bool:
    """A dispatch of ``kernel`` ran the integer products, x quantized once a workgroup
    (its quant_k K) under "i8-shared", by each lane (0) under "i8"."""
    qk = K if dot == "i8-shared" else 0
    return any(k[0] == kernel and k[-2:] == ("i8", qk) for k in emits)


@needs_vulkan
@pytest.mark.parametrize("dot", ["i8", "i8-shared"])
@pytest.mark.parametrize("t", ["Q4_K", "Q6_K", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"])
def test_integer_products(t, dot, monkeypatch):
    """``CERA_VULKAN_UNIT_DOT=i8`` (x rounded to 8 bits a unit, dot4I8Packed) and
    ``i8-shared`` (the same, quantized once a workgroup): rows of 3072 values after a
    fused norm, within the suite's tolerance of the reference, the integer decoder the
    one that ran, and its error at most 1.5x the CPU backend's on the same case (which
    rounds x to 8 bits too: llama.cpp's arithmetic). Offsets taken from x's exact sums
    instead of the quantized ones gave three times the CPU's error on the 32-element
    types, which the last check catches."""
    case = _long_rows_case(t)
    b, emits = _unit_backend(monkeypatch, dot=dot)
    got = _errors(b, case)
    assert _ran_integer(emits, "matvec_unit", dot, 3072), emits
    cpu = pytest.importorskip("cera_backend_cpu.backend", reason="the CPU backend is the comparison")
    want = _errors(cpu.CpuBackend(), case)
    assert max(got) <= 1.5 * max(want), (got, want)


@needs_vulkan
@pytest.mark.parametrize("types", [("Q4_K", "Q4_K", "Q6_K"), ("Q4_K", "Q5_0", "Q6_K"), ("Q5_0", "Q5_1", "Q8_0")],
                         ids="/".join)  # fmt: skip
@pytest.mark.parametrize("dot", ["i8", "i8-shared"])
def test_integer_products_of_qkv(types, dot, monkeypatch):
    """``CERA_VULKAN_UNIT_DOT=i8`` and ``i8-shared`` on a layer's Q, K and V in one
    dispatch (each product in its own layout and decoder) after a fused norm, a decode
    batch of three sequences (four rows a workgroup, one of them past the batch), against
    the reference."""
    b, emits = _unit_backend(monkeypatch, dot=dot)
    conformance.check_op(b, _case(types, (1, 1, 1)))
    assert _ran_integer(emits, "matvec_unit_seg", dot, DIM), emits


@needs_vulkan
@pytest.mark.parametrize("dot", ["i8-shared", "i8", "f32"])
@pytest.mark.parametrize("t", ["Q4_K", "Q8_0"])
def test_batch_rows_are_their_one_row_product(t, dot, monkeypatch):
    """A row of a decode batch is its one-row product bit for bit, whichever form the
    products take: every row the same token, rows of 3072 after a fused norm (whose sum
    of squares each form takes in its own order), one row alone, then three in a batch
    (the kernel's four-row form, one row past the batch)."""
    import attrs
    import numpy as np

    inputs = conformance._inputs

    def one_token(case, layout, rng, start, slots):
        got = inputs(case, layout, rng, start, slots)
        got.tokens[:] = 5
        return got

    monkeypatch.setattr(conformance, "_inputs", one_token)
    b, _ = _unit_backend(monkeypatch, dot=dot)
    (alone, _), (batch, _) = _outputs(b, attrs.evolve(_long_rows_case(t), passes=((1,), (1, 1, 1))))
    rows = [np.asarray(alone["y"], np.float32)[0]] + [np.asarray(batch["y"], np.float32)[i] for i in range(3)]
    for i, row in enumerate(rows[1:]):
        assert np.array_equal(row.view(np.uint32), rows[0].view(np.uint32)), (i, float(np.abs(row - rows[0]).max()))
