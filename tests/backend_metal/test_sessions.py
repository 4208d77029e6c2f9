"""Sessions on the Metal backend: several sequences batched through the scheduler each get
the tokens they get alone, and a checkpoint travels between backends (metal -> cpu ->
metal) through the state's host copies. On tiny models (a dense decoder and a hybrid
with short-convolution state), fast on MLX's CPU device; the tokens of these random
weights are arbitrary but deterministic, which is all these checks need."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from .conftest import needs_mlx

TINY = Path(__file__).resolve().parent.parent / "models" / "reference" / "tiny"
TOL = 2e-3  # conformance.TOL_F16_TABLE, relative to the largest logit


def _load(name, device):
    import cera

    return cera.load(
        str(TINY / f"{name}.gguf"), device=device, quiet=True, **({"threads": 1} if device == "cpu" else {})
    )


def _prompts(n_vocab, n=3, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, n_vocab, 5 + 3 * i).tolist() for i in range(n)]


def _alone(loaded, prompt, n):
    s = loaded.new_session(n_ctx=64, kv_type="f32")
    s.append_tokens(prompt)
    return list(s.generate(max_tokens=n, temperature=0, ignore_eos=True).tokens)


@needs_mlx
@pytest.mark.parametrize("name", ["tiny-mistral", "tiny-lfm2"])
def test_batched_sequences_get_their_own_tokens(name):
    mt = _load(name, "metal")
    try:
        prompts = _prompts(mt.model.n_vocab)
        alone = [_alone(mt, p, 8) for p in prompts]
        scheduler = mt.scheduler(n_slots=3, n_ctx=64, kv_type="f32")
        together = scheduler.generate_many(prompts, max_tokens=8, temperature=0, ignore_eos=True)
        assert [list(s.tokens) for s in together] == alone
        assert max(scheduler.rows_per_batch) == 3, scheduler.rows_per_batch  # really batched
    finally:
        mt.close()


@needs_mlx
@pytest.mark.parametrize("name", ["tiny-mistral", "tiny-lfm2"])
def test_a_checkpoint_written_on_metal_restores_on_cpu_and_back(name, tmp_path):
    """A metal session's checkpoint restored on the CPU backend gives the logits a CPU
    session that evaluated the same tokens gives (within TOL), and the CPU's checkpoint
    of the continued session restored on metal gives the CPU's next logits again."""
    mt, cpu = _load(name, "metal"), _load(name, "cpu")
    try:
        prompt = _prompts(mt.model.n_vocab, 1, seed=4)[0]
        s_mt = mt.new_session(n_ctx=64, kv_type="f32")
        s_mt.append_tokens(prompt)
        s_mt.evaluate()
        s_mt.append_tokens([3, 7])
        s_mt.evaluate()
        s_mt.save(tmp_path / "metal.ckpt")

        fresh = cpu.new_session(n_ctx=64, kv_type="f32")
        fresh.append_tokens(prompt + [3, 7, 11])
        want = np.asarray(fresh.evaluate(), np.float64)

        s_cpu = cpu.new_session(n_ctx=64, kv_type="f32")
        s_cpu.load(tmp_path / "metal.ckpt")
        assert list(s_cpu.tokens) == prompt + [3, 7]
        s_cpu.append_tokens([11])
        got = np.asarray(s_cpu.evaluate(), np.float64)
        assert np.abs(got - want).max() <= TOL * max(1.0, np.abs(want).max())
        s_cpu.save(tmp_path / "cpu.ckpt")

        fresh.append_tokens([5])
        want2 = np.asarray(fresh.evaluate(), np.float64)
        back = mt.new_session(n_ctx=64, kv_type="f32")
        back.load(tmp_path / "cpu.ckpt")
        back.append_tokens([5])
        got2 = np.asarray(back.evaluate(), np.float64)
        assert np.abs(got2 - want2).max() <= TOL * max(1.0, np.abs(want2).max())
    finally:
        mt.close()
        cpu.close()


@needs_mlx
def test_rewind_and_snapshot_on_device_state():
    """Truncating a session's cache and evaluating again gives the first evaluation's
    logits bit for bit (the masks follow the host's cell positions)."""
    mt = _load("tiny-mistral", "metal")
    try:
        s = mt.new_session(n_ctx=64, kv_type="f16")
        s.append_tokens([1, 5, 9, 2])
        first = np.asarray(s.evaluate())
        s.append_tokens([8, 8, 8])
        s.evaluate()
        s.truncate(4)
        s.append_tokens([4])
        after = np.asarray(s.evaluate())
        s2 = mt.new_session(n_ctx=64, kv_type="f16")
        s2.append_tokens([1, 5, 9, 2])
        s2.evaluate()
        s2.append_tokens([4])
        assert np.array_equal(after, np.asarray(s2.evaluate()))
        assert first.shape == after.shape
    finally:
        mt.close()


@needs_mlx
def test_a_context_shift_matches_the_cpu_backends():
    """HostState.shift on a copy of the slot (keys rotated back by the dropped span), then
    one more token: the logits the CPU backend gives after the same shift, within TOL."""
    outs = []
    for device in ("metal", "cpu"):
        m = _load("tiny-mistral", device)
        try:
            s = m.new_session(n_ctx=64, kv_type="f32")
            s.append_tokens([1, 5, 9, 2, 8, 8, 3, 4, 6, 7])
            s.evaluate()
            s.state.shift(s.slot, 2, 4)
            st = s.state
            assert int(st.n_filled[s.slot]) == 6 and st.pos[s.slot, :6].tolist() == [0, 1, 2, 3, 4, 5]
            from cera.graph.builder import LAST_LOGITS
            from cera.generation.runtime import SeqStep

            out = m.runner.forward(st, [SeqStep(s.slot, [11], [6])], LAST_LOGITS)["logits"]
            outs.append(np.asarray(out, np.float64))
        finally:
            m.close()
    got, want = outs
    assert np.abs(got - want).max() <= TOL * max(1.0, np.abs(want).max())
