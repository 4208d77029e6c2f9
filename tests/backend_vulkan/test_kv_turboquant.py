"""tq3 and tq2 (TurboQuant) KV caches on the Vulkan backend (`wgsl.kv_tq`), against the
numpy reference (`cera.kv_turboquant`), the CPU backend's TurboQuant attention and f32
attention; key offsets; snapshots and context shifts.

Tolerances, measured on lavapipe against the CPU backend (x86) and numpy (see each test).
Rows: the store computes what numpy's encoder computes in another order (the norm summed
in order, P's products summed in order, where numpy's BLAS blocks them), so a coordinate
within float rounding of a midpoint between two centroids may take the other one, and its
row's f16 norm then moves (the norm is kept over the centroids' length). Attention: the
GPU and the CPU read the same rows with the same math (the query turned once, the values
summed in the rotated space and turned back), so they agree to float rounding; against
f32 attention, tq's own error (a 4-bit key, a 3-bit value for tq3; one bit fewer for tq2).
"""

from __future__ import annotations

import numpy as np
import pytest

from cera import kv_turboquant
from cera.backend import StepInputs
from cera.errors import UnsupportedOperation
from cera.state import rebase_key_offsets
from cera.graph.builder import GraphBuilder, Layout, Outputs
from cera.graph.ops import AttentionSpec, RopeSpec
from cera.state import AttentionKV, StateSpec

from .conftest import needs_vulkan

HEADS, KV_HEADS = 4, 2
# 64 and 128: a key's planes read a word (32 coordinates) at a time; 40: a byte at a time,
# planes of 5 bytes, rows of 22/17 (tq3) bytes that start anywhere in a word
DIMS = (64, 128, 40)
# a prompt of two sequences (more than one chunk of 64 cells), then batched decode steps
PASSES = ((70, 23), (1, 1), (3, 1))


def _data(dim: int, passes, seed: int = 0, offset: float = 0.0):
    """Per pass (q, k, v) f32 arrays [rows, heads, dim]; keys plus ``offset`` times a fixed
    vector per kv head (the shared offset real models' keys have)."""
    rng = np.random.default_rng(seed)
    m = (rng.standard_normal((KV_HEADS, dim)) * offset).astype(np.float32)
    out = []
    for p in passes:
        n = sum(p)
        q = rng.standard_normal((n, HEADS, dim)).astype(np.float32)
        k = (rng.standard_normal((n, KV_HEADS, dim)) + m).astype(np.float32)
        v = rng.standard_normal((n, KV_HEADS, dim)).astype(np.float32)
        out.append((q, k, v))
    return out, m


def _state(backend, kv_type: str, dim: int, n_seq: int, n_ctx: int = 160, rope=None, **kw):
    spec = StateSpec()
    ref = spec.add(AttentionKV(KV_HEADS, dim, dim, rope=rope))
    return spec, ref, backend.new_state(spec, n_ctx, n_slots=n_seq, kv_type=kv_type, n_batch=128, **kw)


def _attend(backend, st, ref, dim: int, passes, data, filled=None) -> list[np.ndarray]:
    """Attention's output of each pass over ``st`` (slot s: sequence s of the pass)."""
    spec = AttentionSpec(scale=dim**-0.5)
    filled = filled if filled is not None else [0] * st.n_slots
    outs = []
    for seq_lens, (q, k, v) in zip(passes, data, strict=True):
        layout = Layout(seq_lens)
        g = GraphBuilder(layout, Outputs())
        n = layout.n_tokens
        tq, tk, tv = (g.input(name, (n, h, dim)) for name, h in (("q", HEADS), ("k", KV_HEADS), ("v", KV_HEADS)))
        g.output("y", g.attention(tq, tk, tv, ref, spec))
        graph = g.finish()
        slots = list(range(len(seq_lens)))
        positions = np.concatenate([np.arange(filled[s], filled[s] + c) for s, c in enumerate(seq_lens)])
        inputs = StepInputs(np.zeros(n, np.int32), positions.astype(np.int32), np.asarray(slots, np.int32),
                            np.asarray([filled[s] for s in slots], np.int32), {"q": q, "k": k, "v": v})  # fmt: skip
        exe = backend.compile(graph, {}, st)
        for s, c in enumerate(seq_lens):
            st.begin(s, positions[layout.groups[s][0] : layout.groups[s][0] + c])
        outs.append(np.asarray(exe.run(st, inputs)["y"], np.float64))
        for s, c in enumerate(seq_lens):
            st.commit(s)
            filled[s] += c
    return outs


def _keys_values(passes, data, slot: int):
    """Sequence ``slot``'s keys and values over the passes, [kv heads, cells, dim]."""
    ks, vs = [], []
    for seq_lens, (_q, k, v) in zip(passes, data, strict=True):
        if slot < len(seq_lens):
            r0 = sum(seq_lens[:slot])
            ks.append(k[r0 : r0 + seq_lens[slot]])
            vs.append(v[r0 : r0 + seq_lens[slot]])
    return np.swapaxes(np.concatenate(ks), 0, 1), np.swapaxes(np.concatenate(vs), 0, 1)


def _row_diff(got: np.ndarray, want: np.ndarray, kind: str, key: bool) -> tuple[float, int, float]:
    """(share of coordinates whose centroid differs, the largest index step, share of rows
    whose f16 norm differs) between stored rows."""
    b = kv_turboquant.bits(kind, key)
    dim = kv_turboquant.row_dim(want, kind, key)
    gi, wi = kv_turboquant._unplanes(got, b, dim, 2), kv_turboquant._unplanes(want, b, dim, 2)
    gn, wn = got[..., :2].copy().view(np.uint16), want[..., :2].copy().view(np.uint16)
    return float(np.mean(gi != wi)), int(np.abs(gi - wi).max()), float(np.mean(gn != wn))


def _err(a: list, b: list) -> float:
    """The largest |difference| over the largest |value| (at least 1), over the passes."""
    return max(float(np.abs(x - y).max()) / max(1.0, float(np.abs(y).max())) for x, y in zip(a, b, strict=True))


def _rel_rms(a: list, b: list) -> float:
    """|a - b| / |b| over every pass's outputs (root mean squares)."""
    x, y = np.concatenate([u.ravel() for u in a]), np.concatenate([u.ravel() for u in b])
    return float(np.sqrt(np.mean((x - y) ** 2) / np.mean(y**2)))


# tq's error against f32 attention (|difference| / |f32 output|, root mean squares) on these
# random rows, measured on lavapipe: tq3 0.190-0.201, tq2 0.361-0.368 (the CPU's the same)
TQ_ERROR = {"tq3": 0.25, "tq2": 0.45}


@pytest.fixture(scope="module")
def cpu():
    pytest.importorskip("cera_backend_cpu")
    from cera_backend_cpu.backend import CpuBackend

    return CpuBackend()


@needs_vulkan
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("kind", ["tq3", "tq2"])
def test_rows_are_the_reference_and_attention_the_cpu_backend(vulkan, cpu, kind, dim):
    """Rows: numpy's `kv_turboquant.encode` of the same f32 rows. Measured on lavapipe: every
    byte identical (both slots, keys and values, every case); the bound leaves a coordinate
    in 500 to float rounding at a midpoint. Attention: the CPU backend's over its own tq rows
    within 1e-5 of the largest output (measured 3-8e-7), and f32 attention within tq's
    error (TQ_ERROR)."""
    data, _ = _data(dim, PASSES)
    _spec, ref, st = _state(vulkan, kind, dim, 2)
    got = _attend(vulkan, st, ref, dim, PASSES, data)
    _spec, cref, cst = _state(cpu, kind, dim, 2)
    want = _attend(cpu, cst, cref, dim, PASSES, data)
    _spec, fref, fst = _state(cpu, "f32", dim, 2)
    exact = _attend(cpu, fst, fref, dim, PASSES, data)
    assert _err(got, want) <= 1e-5, _err(got, want)
    err = _rel_rms(got, exact)
    print(f"{kind} dim {dim}: against the CPU {_err(got, want):.2g}, against f32 {err:.3f}")
    assert err <= TQ_ERROR[kind], err
    assert st.k[0].nbytes == 2 * KV_HEADS * 160 * (2 + kv_turboquant.bits(kind, True) * dim // 8)
    for slot in (0, 1):
        snap, csnap = st.snapshot(slot), cst.snapshot(slot)
        assert snap.kv_type == kind and all(m is None or not m.any() for m in snap.key_offsets or ())
        k, v = _keys_values(PASSES, data, slot)
        for key, rows, crows, x in ((True, snap.kv[0][0], csnap.kv[0][0], k), (False, snap.kv[0][1], csnap.kv[0][1], v)):
            ref_rows = kv_turboquant.encode(x, kind, key)
            assert rows.dtype == np.uint8 and rows.shape == ref_rows.shape == crows.shape
            share, step, norms = _row_diff(rows, ref_rows, kind, key)
            assert share <= 0.002 and step <= 1 and norms <= 0.02, (share, step, norms)
            # the rows decode to the numbers the reference's decoder gives the CPU's rows
            np.testing.assert_allclose(kv_turboquant.decode(rows, kind, key), kv_turboquant.decode(crows, kind, key),
                                       atol=0.05 * float(np.abs(x).max()))  # fmt: skip


@needs_vulkan
@pytest.mark.parametrize("kind", ["tq3", "tq2"])
def test_keys_are_stored_less_their_offsets(vulkan, cpu, kind):
    """Keys with a large shared offset m per head: with key_offsets m the rows are numpy's
    encode(k - m) and attention is f32 attention within tq's error (softmax ignores a
    shift common to all keys); without offsets the same keys lose more."""
    dim = 64
    data, m = _data(dim, PASSES, seed=1, offset=3.0)
    _spec, ref, st = _state(vulkan, kind, dim, 2, key_offsets={0: m})
    assert set(st.key_offsets) == {0} and np.array_equal(st.key_offsets[0], m)
    got = _attend(vulkan, st, ref, dim, PASSES, data)
    _spec, pref, plain = _state(vulkan, kind, dim, 2)
    without = _attend(vulkan, plain, pref, dim, PASSES, data)
    _spec, fref, fst = _state(cpu, "f32", dim, 2)
    exact = _attend(cpu, fst, fref, dim, PASSES, data)
    e_off, e_plain = _rel_rms(got, exact), _rel_rms(without, exact)
    print(f"{kind}: with offsets {e_off:.3f}, without {e_plain:.3f}")
    assert e_off <= TQ_ERROR[kind] and e_off < e_plain, (e_off, e_plain)
    for slot in (0, 1):
        snap = st.snapshot(slot)
        assert np.array_equal(snap.key_offsets[0], m)
        k, _v = _keys_values(PASSES, data, slot)
        want = kv_turboquant.encode(k - m[:, None, :], kind, key=True)
        share, step, norms = _row_diff(snap.kv[0][0], want, kind, True)
        assert share <= 0.002 and step <= 1 and norms <= 0.02, (share, step, norms)
    # a snapshot restored into a state of other offsets is converted (cera.state.rebase_key_offsets)
    snap = st.snapshot(0)
    plain.restore(0, snap)
    want = rebase_key_offsets(snap, plain.decls, plain.snapshot(0).key_offsets)
    assert np.array_equal(plain.snapshot(0).kv[0][0], want.kv[0][0])
    assert not np.array_equal(want.kv[0][0], snap.kv[0][0])
    _spec, _ref, again = _state(vulkan, kind, dim, 2, key_offsets={0: m.copy()})
    again.restore(0, snap)
    assert np.array_equal(again.snapshot(0).kv[0][0], snap.kv[0][0])


@needs_vulkan
def test_key_offsets_are_for_turboquant_caches(vulkan):
    m = np.zeros((KV_HEADS, 64), np.float32)
    with pytest.raises(UnsupportedOperation, match="key offsets are for TurboQuant caches"):
        _state(vulkan, "q8_0", 64, 1, key_offsets={0: m})
    with pytest.raises(UnsupportedOperation, match=r"key_offsets\[0\] has shape \(2, 32\)"):
        _state(vulkan, "tq3", 64, 1, key_offsets={0: m[:, :32]})
    with pytest.raises(UnsupportedOperation, match="multiples of 8"):
        _state(vulkan, "tq3", 36, 1)


@needs_vulkan
def test_a_context_shift_adds_the_offsets_back_before_rotating(vulkan, cpu):
    """A shift with key offsets: the keys decoded, m added, rotated, m taken off, encoded
    again; attention after it is an f32 cache's after the same shift within tq's error with
    a second quantization (measured on lavapipe: 0.269, against 0.207 before any shift),
    and closer than a cache without offsets (0.402)."""
    dim, kind = 64, "tq3"
    rope = RopeSpec(n_dims=dim)
    passes = ((40,),)
    data, m = _data(dim, passes + ((4,),), seed=2, offset=3.0)
    outs = []
    for backend, kv_type, kw in ((vulkan, kind, {"key_offsets": {0: m}}), (vulkan, kind, {}), (cpu, "f32", {})):
        _spec, ref, st = _state(backend, kv_type, dim, 1, n_ctx=64, rope=rope, **kw)
        _attend(backend, st, ref, dim, passes, data[:1])
        st.shift(0, 4, 20)
        assert int(st.n_filled[0]) == 20
        outs.append(_attend(backend, st, ref, dim, ((4,),), data[1:], filled=[20]))
    err, plain = _rel_rms(outs[0], outs[2]), _rel_rms(outs[1], outs[2])
    print(f"after a shift: with offsets {err:.3f}, without {plain:.3f}")
    assert err <= 0.32 and err < plain, (err, plain)
