"""Typed state (cera.state.HostState) through the CPU attention kernel: cells, positions,
begin/commit/rollback, truncate, snapshot/restore, shift, sliding-window rings, slots.

Checked through what attention returns: a zero query weighs every visible cell equally,
so the output is the mean of the visible values, which these tests know by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

from cera.errors import ContextFull, SessionError, UnsupportedOperation
from cera.graph.ops import AttentionSpec, RopeSpec
from cera.state import AttentionKV, HostState, ShortConv, StateNotRewindable, StateSpec

SPEC = AttentionSpec(scale=1.0)


def _spec(*decls):
    spec = StateSpec()
    refs = [spec.add(d) for d in decls]
    return spec, refs


def _step(be, state, positions, values, ref=0, slot=0, commit=True, spec=SPEC):
    """Run one pass whose tokens carry value rows `values` (one number per token)."""
    positions = np.asarray(positions, np.int32)
    n = len(positions)
    q = np.zeros((n, 1, 2), np.float32)
    k = np.zeros((n, 1, 2), np.float32)
    v = np.repeat(np.asarray(values, np.float32)[:, None, None], 2, axis=2)
    start = state.begin(slot, positions)
    out = be.attention(q, k, v, state, ref, slot, start, positions, spec)
    if commit:
        state.commit(slot)
    return out[:, 0]


@pytest.fixture(params=["f16", "f32"])
def state(request):
    spec, _ = _spec(AttentionKV(1, 2, 2), AttentionKV(1, 2, 2))
    return HostState(spec, 8, kv_type=request.param)


def test_cells_accumulate_and_mask_causally(be, state):
    out = _step(be, state, [0, 1, 2], [1.0, 2.0, 3.0])
    np.testing.assert_allclose(out, [1.0, 1.5, 2.0])
    assert state.n_filled[0] == 3
    out = _step(be, state, [3], [5.0])
    np.testing.assert_allclose(out, [2.75])  # (1 + 2 + 3 + 5) / 4


def test_layers_are_separate(be, state):
    zeros = np.zeros((1, 1, 2), np.float32)
    pos = np.array([0], np.int32)
    start = state.begin(0, pos)
    be.attention(zeros, zeros, np.full((1, 1, 2), 1.0, np.float32), state, 0, 0, start, pos, SPEC)
    out1 = be.attention(zeros, zeros, np.full((1, 1, 2), 7.0, np.float32), state, 1, 0, start, pos, SPEC)
    state.commit(0)
    np.testing.assert_allclose(out1[:, 0], [7.0])
    np.testing.assert_allclose(_step(be, state, [1], [3.0], ref=0), [2.0])  # layer 0 holds 1 and 3, not 7


def test_slots_are_separate_sequences(be):
    spec, _ = _spec(AttentionKV(1, 2, 2))
    state = HostState(spec, 8, n_slots=3)
    a, b = state.acquire(), state.acquire()
    _step(be, state, [0, 1], [1.0, 3.0], slot=a)
    _step(be, state, [0], [10.0], slot=b)
    np.testing.assert_allclose(_step(be, state, [2], [5.0], slot=a), [3.0])  # (1 + 3 + 5) / 3
    np.testing.assert_allclose(_step(be, state, [1], [20.0], slot=b), [15.0])
    state.release(a)
    assert state.acquire() == a and state.n_filled[a] == 0  # a slot comes back cleared
    state.acquire()
    with pytest.raises(SessionError, match="all 3 sequence slots"):
        state.acquire()


def test_rollback_forgets_the_pass(be, state):
    _step(be, state, [0, 1], [2.0, 4.0])
    _step(be, state, [2], [100.0], commit=False)
    state.rollback(0)
    assert state.n_filled[0] == 2
    np.testing.assert_allclose(_step(be, state, [2], [6.0]), [4.0])  # (2 + 4 + 6) / 3


def test_truncate(be, state):
    _step(be, state, [0, 1, 2, 3], [1.0, 2.0, 3.0, 4.0])
    state.truncate(0, 2)
    assert state.n_filled[0] == 2
    np.testing.assert_allclose(_step(be, state, [2], [9.0]), [4.0])  # (1 + 2 + 9) / 3
    with pytest.raises(SessionError):
        state.truncate(0, 5)


def test_snapshot_restore(be, state):
    _step(be, state, [0, 1], [1.0, 3.0])
    snap = state.snapshot(0)
    _step(be, state, [2, 3], [50.0, 70.0])
    state.restore(0, snap)
    assert state.n_filled[0] == 2
    np.testing.assert_allclose(_step(be, state, [2], [5.0]), [3.0])  # (1 + 3 + 5) / 3
    spec, _ = _spec(AttentionKV(1, 2, 2))
    other = HostState(spec, 8)
    with pytest.raises(SessionError):
        other.restore(0, snap)


def test_positions_not_cells_decide_the_mask(be, state):
    # a later batch placed at earlier positions (as after a context shift) sees only
    # cells with positions <= its own
    _step(be, state, [10, 11], [1.0, 3.0])
    np.testing.assert_allclose(_step(be, state, [10], [5.0]), [3.0])  # cells at 10 and the new 10: (1 + 5) / 2


def test_context_full_and_protocol_errors():
    spec, _ = _spec(AttentionKV(1, 2, 2))
    state = HostState(spec, 3)
    state.begin(0, np.array([0, 1]))
    state.commit(0)
    with pytest.raises(ContextFull):
        state.begin(0, np.array([2, 3], np.int32))
    state.begin(0, np.array([2], np.int32))
    with pytest.raises(SessionError):
        state.begin(0, np.array([3], np.int32))
    with pytest.raises(SessionError):
        state.snapshot(0)
    state.rollback(0)
    with pytest.raises(SessionError):
        state.commit(0)
    with pytest.raises(UnsupportedOperation, match="q8_0"):
        HostState(spec, 3, kv_type="q8_0")
    with pytest.raises(SessionError, match="n_ctx"):
        HostState(spec, 0)


def test_f16_cache_stores_rounded_values(be):
    spec, _ = _spec(AttentionKV(1, 2, 2))
    state = HostState(spec, 2, kv_type="f16")
    x = np.float32(1 + 2**-12)  # between two halves; rounds to even (1.0)
    out = _step(be, state, [0], [x])
    assert out[0] == np.float32(np.float16(x)) == 1.0
    assert state.k[0].dtype == np.float16


def test_a_sliding_window_cache_is_a_ring_of_window_plus_batch_cells(be):
    window, n_batch = 4, 2
    spec, _ = _spec(AttentionKV(1, 2, 2, window=window))
    ring = HostState(spec, 64, n_batch=n_batch)
    full_spec, _ = _spec(AttentionKV(1, 2, 2))
    full = HostState(full_spec, 64)
    assert ring.k[0].shape[2] == window + n_batch and full.k[0].shape[2] == 64
    wspec = AttentionSpec(scale=1.0, window=window)
    rng = np.random.default_rng(0)
    pos = 0
    for n in (2, 1, 2, 1, 1, 2, 2, 1, 2, 2, 1):  # wraps the ring several times
        vals = rng.standard_normal(n).astype(np.float32)
        a = _step(be, ring, range(pos, pos + n), vals, spec=wspec)
        b = _step(be, full, range(pos, pos + n), vals, spec=wspec)
        assert np.array_equal(a, b), f"at position {pos}"
        pos += n
    # the ring holds only the last window + batch cells: far rewinds need a snapshot
    assert ring.can_truncate(0, pos - 2) is None
    with pytest.raises(StateNotRewindable, match="sliding-window cache"):
        ring.truncate(0, 2)
    snap = ring.snapshot(0)
    _step(be, ring, [pos], [9.0], spec=wspec)
    ring.restore(0, snap)
    assert np.array_equal(_step(be, ring, [pos], [3.0], spec=wspec), _step(be, full, [pos], [3.0], spec=wspec))


def test_a_ring_attends_exactly_like_a_full_cache_in_the_prompt_path(be):
    """64+ query rows take the tiled path: tiles run over sequence cells, and cells that
    left the ring count as invisible, so the sums are the same."""
    window, n_batch = 40, 70
    spec, _ = _spec(AttentionKV(2, 16, 16, window=window))
    ring = HostState(spec, 400, n_batch=n_batch, kv_type="f16")
    fspec, _ = _spec(AttentionKV(2, 16, 16))
    full = HostState(fspec, 400, kv_type="f16")
    wspec = AttentionSpec(scale=0.25, window=window)
    rng = np.random.default_rng(1)
    pos = 0
    for n in (70, 70, 65, 1, 70):
        q = rng.standard_normal((n, 4, 16)).astype(np.float32)
        k = rng.standard_normal((n, 2, 16)).astype(np.float32)
        v = rng.standard_normal((n, 2, 16)).astype(np.float32)
        p = np.arange(pos, pos + n, dtype=np.int32)
        outs = []
        for st in (ring, full):
            start = st.begin(0, p)
            outs.append(be.attention(q, k, v, st, 0, 0, start, p, wspec))
            st.commit(0)
        assert np.array_equal(outs[0], outs[1]), f"pass at {pos}: {np.abs(outs[0] - outs[1]).max()}"
        pos += n


def test_shift_drops_a_span_and_renumbers_the_rest(be):
    rope = RopeSpec(n_dims=2, neox=False)
    spec, _ = _spec(AttentionKV(1, 2, 2, rope=rope))
    state = HostState(spec, 16, kv_type="f32")
    _step(be, state, [0, 1, 2, 3, 4, 5], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    state.shift(0, keep=1, n_discard=3)  # drop the cells of positions 1..3
    assert state.n_filled[0] == 3
    assert state.pos[0, :3].tolist() == [0, 1, 2]
    np.testing.assert_allclose(_step(be, state, [3], [8.0]), [(1 + 5 + 6 + 8) / 4])
    # keys are rotated back by the shift: a key rotated at position 5 now reads as at 2
    from cera.graph.ops import rotate

    k5 = np.array([[[1.0, 0.5]]])
    state2 = HostState(spec, 16, kv_type="f32")
    for p in range(6):
        state2.begin(0, np.array([p]))
        state2.k[0][0, :, p] = rotate(k5, np.array([p]), rope)[0] if p == 5 else 0.0
        state2.commit(0)
    state2.shift(0, keep=0, n_discard=3)
    np.testing.assert_allclose(state2.k[0][0, 0, 2], rotate(k5, np.array([2]), rope)[0, 0], atol=1e-6)


def test_recurrent_state_refuses_rewinds_and_shifts_but_snapshots():
    spec, refs = _spec(ShortConv(channels=3, kernel=4), AttentionKV(1, 2, 2))
    state = HostState(spec, 16)
    assert not spec.rewindable
    state.begin(0, np.array([0, 1]))
    state.conv(refs[0], 0)[...] = 5.0
    state.commit(0)
    snap = state.snapshot(0)
    with pytest.raises(StateNotRewindable):
        state.truncate(0, 1)
    with pytest.raises(StateNotRewindable):
        state.shift(0, 0, 1)
    state.begin(0, np.array([2]))
    state.conv(refs[0], 0)[...] = 7.0
    state.rollback(0)  # the pass failed part-way: the recurrent state cannot be trusted
    with pytest.raises(SessionError, match="failed part-way"):
        state.begin(0, np.array([2]))
    state.restore(0, snap)
    assert np.all(state.conv(refs[0], 0) == 5.0) and state.n_filled[0] == 2
    state.begin(0, np.array([2]))  # usable again


def test_a_q8_0_cache_holds_blocks_and_snapshots_and_shifts(be):
    spec, _ = _spec(AttentionKV(1, 32, 32, rope=RopeSpec(n_dims=32)))
    state = HostState(spec, 16, kv_type="q8_0")
    assert state.k[0].shape == (1, 1, 16, 34) and state.k[0].dtype == np.uint8  # one block: f16 scale + 32 int8
    rng = np.random.default_rng(0)
    vals = rng.standard_normal((6, 1, 32)).astype(np.float32)
    pos = np.arange(6, dtype=np.int32)
    start = state.begin(0, pos)
    out = be.attention(np.zeros((6, 1, 32), np.float32), np.zeros((6, 1, 32), np.float32), vals, state, 0, 0, start,
                       pos, SPEC)  # fmt: skip
    state.commit(0)
    # a zero query weighs the visible values equally: the mean of their 8-bit blocks
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    q = dequantize(quantize(vals.reshape(6, 32), GGMLQuantizationType.Q8_0), GGMLQuantizationType.Q8_0)
    np.testing.assert_allclose(out[-1], q.mean(axis=0), atol=2 * np.abs(vals).max() / 127)
    snap = state.snapshot(0)
    state.shift(0, keep=1, n_discard=2)
    assert state.n_filled[0] == 4
    state.restore(0, snap)
    assert state.n_filled[0] == 6 and np.array_equal(state.k[0][0, :, :6], snap.kv[0][0])
    with pytest.raises(UnsupportedOperation, match="multiples of 32"):
        HostState(_spec(AttentionKV(1, 16, 16))[0], 8, kv_type="q8_0")
