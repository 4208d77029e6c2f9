"""The KV state: cells, positions, begin/commit/rollback, truncate, snapshot/restore.

Checked through what attention returns: a zero query weighs every visible cell equally,
so the output is the mean of the visible values, which these tests know by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
from cera.backend import AttentionSpec, KVLayerSpec
from cera.errors import ContextFull, SessionError, UnsupportedOperation

SPEC = AttentionSpec(scale=1.0)


def _step(be, state, positions, values, layer=0, commit=True):
    """Run one pass whose tokens carry value rows `values` (one number per token)."""
    positions = np.asarray(positions, np.int32)
    n = len(positions)
    q = np.zeros((n, 1, 2), np.float32)
    k = np.zeros((n, 1, 2), np.float32)
    v = np.repeat(np.asarray(values, np.float32)[:, None, None], 2, axis=2)
    state.begin(positions)
    out = be.attention(q, k, v, state, layer, positions, SPEC)
    if commit:
        state.commit()
    return out[:, 0]


@pytest.fixture(params=["f16", "f32"])
def state(be, request):
    return be.new_state([KVLayerSpec(1, 2, 2), KVLayerSpec(1, 2, 2)], 8, request.param)


def test_cells_accumulate_and_mask_causally(be, state):
    out = _step(be, state, [0, 1, 2], [1.0, 2.0, 3.0])
    np.testing.assert_allclose(out, [1.0, 1.5, 2.0])
    assert state.n_filled == 3
    out = _step(be, state, [3], [5.0])
    np.testing.assert_allclose(out, [2.75])  # (1 + 2 + 3 + 5) / 4


def test_layers_are_separate(be, state):
    zeros = np.zeros((1, 1, 2), np.float32)
    pos = np.array([0], np.int32)
    state.begin(pos)
    be.attention(zeros, zeros, np.full((1, 1, 2), 1.0, np.float32), state, 0, pos, SPEC)
    out1 = be.attention(zeros, zeros, np.full((1, 1, 2), 7.0, np.float32), state, 1, pos, SPEC)
    state.commit()
    np.testing.assert_allclose(out1[:, 0], [7.0])
    np.testing.assert_allclose(_step(be, state, [1], [3.0], layer=0), [2.0])  # layer 0 holds 1 and 3, not 7


def test_rollback_forgets_the_pass(be, state):
    _step(be, state, [0, 1], [2.0, 4.0])
    _step(be, state, [2], [100.0], commit=False)
    state.rollback()
    assert state.n_filled == 2
    np.testing.assert_allclose(_step(be, state, [2], [6.0]), [4.0])  # (2 + 4 + 6) / 3


def test_truncate(be, state):
    _step(be, state, [0, 1, 2, 3], [1.0, 2.0, 3.0, 4.0])
    state.truncate(2)
    assert state.n_filled == 2
    np.testing.assert_allclose(_step(be, state, [2], [9.0]), [4.0])  # (1 + 2 + 9) / 3
    with pytest.raises(SessionError):
        state.truncate(5)


def test_snapshot_restore(be, state):
    _step(be, state, [0, 1], [1.0, 3.0])
    snap = state.snapshot()
    _step(be, state, [2, 3], [50.0, 70.0])
    state.restore(snap)
    assert state.n_filled == 2
    np.testing.assert_allclose(_step(be, state, [2], [5.0]), [3.0])  # (1 + 3 + 5) / 3
    other = be.new_state([KVLayerSpec(1, 2, 2)], 8)
    with pytest.raises(SessionError):
        other.restore(snap)


def test_positions_not_cells_decide_the_mask(be, state):
    # a later batch placed at earlier positions (as after a context shift) sees only
    # cells with positions <= its own
    _step(be, state, [10, 11], [1.0, 3.0])
    np.testing.assert_allclose(_step(be, state, [10], [5.0]), [3.0])  # cells at 10 and the new 10: (1 + 5) / 2


def test_context_full_and_protocol_errors(be):
    state = be.new_state([KVLayerSpec(1, 2, 2)], 3)
    _step(be, state, [0, 1], [1.0, 1.0])
    with pytest.raises(ContextFull):
        state.begin(np.array([2, 3], np.int32))
    state.begin(np.array([2], np.int32))
    with pytest.raises(SessionError):
        state.begin(np.array([3], np.int32))
    with pytest.raises(SessionError):
        state.snapshot()
    state.rollback()
    with pytest.raises(SessionError):  # attention without begin
        be.attention(np.zeros((1, 1, 2), np.float32), np.zeros((1, 1, 2), np.float32), np.zeros((1, 1, 2), np.float32),
                     state, 0, np.array([2], np.int32), SPEC)  # fmt: skip
    with pytest.raises(SessionError):
        state.commit()
    with pytest.raises(UnsupportedOperation):
        be.new_state([KVLayerSpec(1, 2, 2)], 3, "q8_0")


def test_f16_cache_stores_rounded_values(be):
    state = be.new_state([KVLayerSpec(1, 2, 2)], 2, "f16")
    x = np.float32(1 + 2**-12)  # between two halves; rounds to even (1.0)
    out = _step(be, state, [0], [x])
    assert out[0] == np.float32(np.float16(x)) == 1.0
    assert state.k[0].dtype == np.float16


def test_conv_state_rolls_back_and_refuses_partial_truncate(be):
    state = be.new_state([], 16)
    w = be.weight("conv", np.ones((1, 2), np.float32))  # one channel, kernel 2: y[t] = x[t-1] + x[t]
    state.begin(np.array([0], np.int32))
    y = be.conv1d_causal(np.array([[1.0]], np.float32), w, state, 0)
    state.commit()
    np.testing.assert_allclose(y, [[1.0]])
    snap = state.snapshot()
    state.begin(np.array([1], np.int32))
    be.conv1d_causal(np.array([[10.0]], np.float32), w, state, 0)
    state.rollback()  # the carried input goes back to 1.0
    state.begin(np.array([1], np.int32))
    y = be.conv1d_causal(np.array([[2.0]], np.float32), w, state, 0)
    state.commit()
    np.testing.assert_allclose(y, [[3.0]])
    with pytest.raises(SessionError):
        state.truncate(1)
    state.restore(snap)
    state.begin(np.array([1], np.int32))
    np.testing.assert_allclose(be.conv1d_causal(np.array([[4.0]], np.float32), w, state, 0), [[5.0]])
