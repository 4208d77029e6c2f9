"""Everything that keeps a KV cache keeps its type: checkpoints, snapshots and the prefix
cache restore a compressed cache into a state of its type only, and batched decoding
with a compressed cache gives what one session alone gives (SmolLM2-135M, CPU)."""

from __future__ import annotations

import pytest

import cera
from cera.errors import SessionError
from cera.formats.checkpoint import CheckpointError

PROMPT = "The lighthouse keeper climbed the sixty-two steps every evening and"


@pytest.fixture(scope="module")
def loaded(smollm2_path):
    m = cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    yield m
    m.close()


def _greedy(session, n):
    return session.generate(max_tokens=n, temperature=0, ignore_eos=True).tokens


@pytest.mark.parametrize("kv_type", ["q4_0", "tq3"])
def test_a_checkpoint_of_a_compressed_cache_continues_exactly(loaded, tmp_path, kv_type):
    s = loaded.new_session(n_ctx=128, kv_type=kv_type)
    s.append_text(PROMPT)
    _greedy(s, 6)
    s.save(tmp_path / "a.ckpt")
    rest = _greedy(s, 10)
    t = loaded.new_session(n_ctx=128, kv_type=kv_type)
    t.load(tmp_path / "a.ckpt")
    assert _greedy(t, 10) == rest
    other = loaded.new_session(n_ctx=128, kv_type="f16")
    with pytest.raises(CheckpointError, match=f"holds a {kv_type} KV cache; this session's is f16"):
        other.load(tmp_path / "a.ckpt")
    assert other.n_tokens == 0  # refused before anything changed


def test_a_snapshot_is_not_restored_into_another_cache_type(loaded):
    s = loaded.new_session(n_ctx=64, kv_type="q8_0")
    s.append_text(PROMPT)
    _greedy(s, 2)
    f16 = loaded.new_session(n_ctx=64, kv_type="f16")
    with pytest.raises(SessionError, match="holds a q8_0 KV cache and this state keeps f16"):
        f16.restore(s.checkpoint())


def test_the_prefix_cache_serves_each_cache_type_its_own_rows(loaded):
    text = PROMPT * 6  # past the prefix cache's 64-token minimum
    want = {}
    for t in ("f16", "q4_0"):
        s = loaded.new_session(n_ctx=256, kv_type=t)
        s.append_text(text)
        want[t] = _greedy(s, 8)
    cache = loaded.enable_prefix_cache()
    try:
        for t in ("q4_0", "f16", "q4_0", "f16"):
            s = loaded.new_session(n_ctx=256, kv_type=t)
            s.append_text(text)
            assert _greedy(s, 8) == want[t], t
        assert cache.hits >= 2
    finally:
        loaded.prefix_cache = None


@pytest.mark.parametrize("kv_type", ["q4_0", "tq2"])
def test_batched_decoding_with_a_compressed_cache_is_decoding_alone(loaded, kv_type):
    prompts = [PROMPT, "Salt crusted on the windows, and the keeper"]
    alone = []
    for p in prompts:
        s = loaded.new_session(n_ctx=96, kv_type=kv_type)
        s.append_text(p)
        alone.append(_greedy(s, 8))
    sched = loaded.scheduler(n_slots=2, n_ctx=96, kv_type=kv_type)
    got = sched.generate_many(prompts, max_tokens=8, temperature=0, ignore_eos=True)
    assert [g.tokens for g in got] == alone


def test_context_shift_with_a_q4_0_cache(loaded):
    """A full context drops its oldest half and goes on (keys re-rotated, re-quantized)."""
    s = loaded.new_session(n_ctx=48, kv_type="q4_0")
    s.append_text(PROMPT)
    out = s.generate(max_tokens=60, temperature=0, ignore_eos=True, context_shift=True)
    assert out.n_generated == 60 and s.n_tokens <= 48
