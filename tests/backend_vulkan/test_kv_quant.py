"""q8_0 and q4_0 KV caches on the Vulkan backend (`wgsl.kv_quant`), against the numpy
reference and the CPU backend.

Tolerances. Attention's outputs: 3e-2 of the largest, the conformance suite's for a
quantized cache (`cera.testing.conformance`): rows quantized to 8 or 4 bits per block of
32, and the CPU quantizes the query to q8_0 for the key dot products (llama.cpp's
vec_dot_type) where the GPU kernel keeps it in f32. Cache rows: the two backends quantize
the same numbers with the same rules, so their blocks' bytes agree except where a value
lands within float rounding of a step's edge (a Walsh-Hadamard turn summed in another
order, an f16 scale rounded after a division): at most one code step and 1% of the codes.
Measured on lavapipe against the CPU backend (x86): every byte of every case identical.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from cera import kv_types
from cera.graph.ops import AttentionSpec
from cera.state import AttentionKV

from .conftest import needs_vulkan

conformance = pytest.importorskip("cera.testing.conformance")


def _case(kind: str, dim: int, passes, window: int | None = None):
    heads, kv_heads = 4, 2
    spec = AttentionSpec(scale=dim**-0.5, window=window)

    def build(g, w, s):
        n = g.layout.n_tokens
        q = g.reshape(conformance._x(g, heads * dim), (n, heads, dim))
        k = g.reshape(conformance._x(g, kv_heads * dim, "k"), (n, kv_heads, dim))
        v = g.reshape(conformance._x(g, kv_heads * dim, "v"), (n, kv_heads, dim))
        g.output("y", g.attention(q, k, v, s[0], spec))

    weights = (conformance._emb(heads * dim), conformance._emb(kv_heads * dim, "k"), conformance._emb(kv_heads * dim, "v"))
    return conformance.OpCase(f"attention[{kind},{dim}]", "attention", build, weights,
                              state=(AttentionKV(kv_heads, dim, dim, window=window),), passes=passes,
                              tolerance=3e-2, kv_type=kind, n_ctx=160)  # fmt: skip


# 64 and 128: rows turned (keys over 64 and 128, values over 64); 96: not turned, and a
# row of 3 blocks, 102 or 54 bytes, so rows share words with their neighbours
DIMS = (64, 128, 96)
# a prompt of two sequences (more than one chunk of 64 cells), then batched decode steps
PASSES = ((70, 23), (1, 1), (3, 1))


@needs_vulkan
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("kind", ["q8_0", "q4_0"])
def test_attention_over_a_quantized_cache_is_the_reference(vulkan, kind, dim):
    conformance.check_op(vulkan, _case(kind, dim, PASSES))


@needs_vulkan
def test_a_quantized_ring_is_the_reference(vulkan):
    """A sliding window's ring: cells are overwritten as the window moves."""
    case = _case("q4_0", 64, ((30,), (25,), (1,), (20,), (1,)), window=40)
    vk, _ref = conformance.check_op(vulkan, case)
    assert vk.k[0].shape[2] < case.n_ctx  # a ring, not the whole context


def _codes(rows: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(scales [..., blocks] as f16 bits, codes [..., blocks, 32]) of stored rows."""
    per, nbytes = kv_types.BLOCK_TYPES[kind]
    blocks = rows.reshape(*rows.shape[:-1], -1, nbytes)
    scales = blocks[..., :2].copy().view(np.uint16)[..., 0]
    qs = blocks[..., 2:]
    if kind == "q8_0":
        codes = qs.view(np.int8).astype(np.int32)
    else:
        codes = np.concatenate([qs & 15, qs >> 4], axis=-1).astype(np.int32)
    return scales, codes


@needs_vulkan
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("kind", ["q8_0", "q4_0"])
def test_cache_rows_and_outputs_match_the_cpu_backend(vulkan, kind, dim):
    pytest.importorskip("cera_backend_cpu")
    from cera_backend_cpu.backend import CpuBackend

    vk, cpu = conformance.check_op(vulkan, _case(kind, dim, PASSES), ref=CpuBackend())
    assert vk.nbytes() >= vk.k[0].nbytes + vk.v[0].nbytes
    assert vk.k[0].nbytes == 2 * 2 * 160 * kv_types.row_bytes(kind, dim)  # slots x kv heads x cells x row
    for slot in (0, 1):
        a, b = vk.snapshot(slot), cpu.snapshot(slot)
        assert a.kv_type == b.kv_type == kind and a.n_filled == b.n_filled
        for got, want in zip(a.kv[0], b.kv[0], strict=True):
            assert got.dtype == want.dtype == np.uint8 and got.shape == want.shape
            (gs, gc), (ws, wc) = _codes(got, kind), _codes(want, kind)
            assert np.mean(gs == ws) >= 0.99
            step = np.abs(gc - wc)
            assert step.max() <= 1 and np.mean(step != 0) <= 0.01, (step.max(), np.mean(step != 0))
            # and the rows decode to the same numbers as the reference's decoder says
            key = got is a.kv[0][0]
            np.testing.assert_allclose(kv_types.decode(got, kind, key), kv_types.decode(want, kind, key),
                                       atol=0.1 * float(np.abs(kv_types.decode(want, kind, key)).max()))  # fmt: skip


@needs_vulkan
@pytest.mark.parametrize("kind", ["q8_0", "q4_0"])
def test_snapshot_restore_and_copy_keep_the_rows(vulkan, kind):
    """A slot's rows through the host and back (odd row sizes: 3 blocks), and copied to
    another slot on the device, are the same bytes."""
    from cera.state import StateSpec

    spec = StateSpec()
    spec.add(AttentionKV(1, 96, 96))
    st = vulkan.new_state(spec, 7, n_slots=3, kv_type=kind)  # 7 cells: slots of odd byte counts
    rng = np.random.default_rng(3)
    rows = rng.integers(0, 256, st.cells.k[0][0].shape, dtype=np.uint8)
    snap = st.snapshot(0)
    full = attrs.evolve(snap, n_filled=7, positions=np.arange(7, dtype=np.int32),
                        kv=((rows, rows[:, ::-1].copy()),))  # fmt: skip
    st.restore(1, full)
    assert st.k[0].slot_bytes % 4 != 0
    st.copy_cells([1], [2])
    for slot in (1, 2):
        back = st.snapshot(slot)
        assert np.array_equal(back.kv[0][0], rows) and np.array_equal(back.kv[0][1], rows[:, ::-1])
    assert st.snapshot(0).n_filled == 0
