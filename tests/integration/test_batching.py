"""Many sequences in one forward pass: each sequence's results are exactly its own.

The products of a decode batch keep each row's one-row arithmetic, attention runs in each
sequence's own state slot, so a sequence decoded in a batch gives the logits (bit for bit)
and the tokens it gives alone, whatever shares its batch. llama.cpp does not promise this
(its batched products sum in another order); cera does, and these tests hold it to it.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import cera
from cera.graph.builder import ALL_LOGITS, Layout
from cera.generation.runtime import SeqStep


def _prompts(loaded, n: int, length: int = 12, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, min(loaded.model.n_vocab, 4000), length + 3 * i).tolist() for i in range(n)]


def _alone(loaded, prompt, n, n_ctx):
    s = loaded.new_session(n_ctx=n_ctx)
    s.append_tokens(prompt)
    return s.generate(max_tokens=n, temperature=0, ignore_eos=True).tokens


def _check_four_together(loaded, n_tokens: int = 24):
    prompts = _prompts(loaded, 4)
    alone = [_alone(loaded, p, n_tokens, 256) for p in prompts]
    scheduler = loaded.scheduler(n_slots=4, n_ctx=256)
    together = scheduler.generate_many(prompts, max_tokens=n_tokens, temperature=0, ignore_eos=True)
    assert [s.tokens for s in together] == alone
    assert max(scheduler.rows_per_batch) == 4, scheduler.rows_per_batch  # really batched


def test_four_sequences_together_decode_exactly_their_tokens_alone_smollm2(smollm2_path):
    _check_four_together(cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True))


@pytest.mark.slow
def test_four_sequences_together_decode_exactly_their_tokens_alone_gemma3(gemma3_path):
    _check_four_together(cera.load(str(gemma3_path), device="cpu", threads=2, quiet=True), n_tokens=16)


def test_a_decode_batch_gives_each_row_its_own_logits_bit_for_bit(smollm2_path):
    loaded = cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    runner = loaded.runner
    prompts = _prompts(loaded, 4, seed=3)
    # alone: a state per sequence
    singles = []
    for p in prompts:
        st = runner.new_state(64)
        runner.forward(st, [SeqStep(0, p, range(len(p)))], ALL_LOGITS)
        singles.append(runner.forward(st, [SeqStep(0, [7], [len(p)])], ALL_LOGITS)["logits"][0])
    # together: one state, four slots; prompts one by one, then one decode batch
    st = runner.new_state(64, n_slots=4)
    for slot, p in enumerate(prompts):
        runner.forward(st, [SeqStep(slot, p, range(len(p)))], ALL_LOGITS)
    out = runner.forward(st, [SeqStep(slot, [7], [len(p)]) for slot, p in enumerate(prompts)], ALL_LOGITS)["logits"]
    for slot in range(4):
        assert np.array_equal(out[slot], singles[slot]), f"row {slot} differs by {np.abs(out[slot] - singles[slot]).max()}"
    assert Layout((1, 1, 1, 1)).is_decode_batch


def test_sequences_join_and_leave_between_steps_from_threads(smollm2_path):
    """Sessions of a scheduler generating from threads, started at different times and
    asking for different lengths: each gets its own greedy tokens."""
    loaded = cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    prompts = _prompts(loaded, 3, seed=5)
    lengths = (20, 7, 13)
    alone = [_alone(loaded, p, n, 128) for p, n in zip(prompts, lengths, strict=True)]
    scheduler = loaded.scheduler(n_slots=3, n_ctx=128)
    got: list = [None] * 3

    def work(i):
        s = scheduler.new_session()
        try:
            s.append_tokens(prompts[i])
            got[i] = s.generate(max_tokens=lengths[i], temperature=0, ignore_eos=True).tokens
        finally:
            s.close()

    threads = []
    for i in range(3):
        t = threading.Thread(target=work, args=(i,))
        t.start()
        threads.append(t)
        threading.Event().wait(0.02)
    for t in threads:
        t.join(timeout=120)
    assert got == alone
    assert scheduler.state._free == [0, 1, 2]  # every slot was given back


def test_a_sequence_that_ends_early_leaves_the_batch_and_the_others_go_on(smollm2_path):
    """generate_many in lockstep: a sequence whose context fills first ends (finish reason
    context, as alone) and the rest decode on in smaller batches, each still exactly its
    own tokens; the slots are all given back."""
    loaded = cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    rng = np.random.default_rng(3)
    prompts = [rng.integers(0, 4000, n).tolist() for n in (8, 40, 10, 12)]
    alone = []
    for p in prompts:
        s = loaded.new_session(n_ctx=64)
        s.append_tokens(p)
        alone.append(s.generate(max_tokens=30, temperature=0, ignore_eos=True))
    scheduler = loaded.scheduler(n_slots=4, n_ctx=64)
    together = scheduler.generate_many(prompts, max_tokens=30, temperature=0, ignore_eos=True)
    assert [s.tokens for s in together] == [s.tokens for s in alone]
    assert [s.finish_reason for s in together] == [s.finish_reason for s in alone]
    assert together[1].finish_reason.value == "context" and len(together[1].tokens) == 25
    # (40 + 24 evaluated tokens fill the 64 cells; the 25th is chosen from the last logits)
    assert scheduler.rows_per_batch[0] == 4 and scheduler.rows_per_batch[-1] == 3, scheduler.rows_per_batch
    assert sorted(scheduler.state._free) == [0, 1, 2, 3]


def test_a_failing_decode_batch_fails_every_sequence_with_a_cera_error(smollm2_path, monkeypatch):
    """An exception inside the batched forward pass reaches every sequence of the batch
    as a CeraError (a GenerationError for an unexpected one), raised by generate_many once
    all have ended, and the slots are given back."""
    from cera.errors import GenerationError

    loaded = cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    scheduler = loaded.scheduler(n_slots=2, n_ctx=64)
    real = scheduler.runner.forward

    def broken(state, steps, outputs, **layout):
        if len(steps) == 2:
            raise RuntimeError("injected failure in a decode batch")
        return real(state, steps, outputs, **layout)

    monkeypatch.setattr(scheduler.runner, "forward", broken)
    with pytest.raises(GenerationError, match="injected failure in a decode batch"):
        scheduler.generate_many([[1, 2, 3], [4, 5, 6]], max_tokens=4, temperature=0)
    assert sorted(scheduler.state._free) == [0, 1]


def test_more_prompts_than_slots_is_a_clear_error(smollm2_path):
    from cera.errors import SessionError

    loaded = cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    scheduler = loaded.scheduler(n_slots=2, n_ctx=64)
    with pytest.raises(SessionError, match="3 prompts for 2 slots"):
        scheduler.generate_many([[1], [2], [3]], max_tokens=2)


@pytest.mark.slow
def test_gemma3_sliding_window_rings_compute_what_full_caches_compute(gemma3_path):
    """Gemma 3's sliding layers (window 512) keep rings of window + batch cells; with
    prompts in chunks of 64 and a context of 1024 the rings wrap, and the logits are those
    of whole-context caches (llama.cpp's swa_full) bit for bit."""
    loaded = cera.load(str(gemma3_path), device="cpu", threads=2, quiet=True)
    ids = np.random.default_rng(2).integers(0, 4000, 700).tolist()
    outs = []
    for swa_full in (False, True):
        s = loaded.new_session(n_ctx=1024, n_batch=64, swa_full=swa_full)
        s.append_tokens(ids)
        got = [s.evaluate().copy()]
        for _ in range(12):
            s.append_tokens([int(np.argmax(got[-1]))])
            got.append(s.evaluate().copy())
        caps = {a.shape[2] for a in s.state.k.values()}
        outs.append((got, caps))
    (ring, ring_caps), (full, full_caps) = outs
    assert ring_caps == {576, 1024} and full_caps == {1024}
    for step, (a, b) in enumerate(zip(ring, full, strict=True)):
        assert np.array_equal(a, b), f"step {step}: {np.abs(a - b).max()}"


def test_exact_rows_gives_one_pass_the_logits_of_token_by_token_steps(smollm2_path):
    """What speculative decoding's verification needs: k tokens evaluated in one pass with
    `exact_rows` give, row by row, the logits of feeding them one at a time, bit for bit
    (also past 512 cells, where a one-token step splits attention into chunks)."""
    loaded = cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    runner = loaded.runner
    ids = np.random.default_rng(9).integers(0, 4000, 530).tolist()
    draft = [17, 201, 5, 999, 31, 7, 64, 12, 3, 88]
    one = runner.new_state(1024, n_batch=1024)
    runner.forward(one, [SeqStep(0, ids, range(len(ids)))], ALL_LOGITS)
    want = []
    for i, t in enumerate(draft):
        want.append(runner.forward(one, [SeqStep(0, [t], [len(ids) + i])], ALL_LOGITS)["logits"][0])
    together = runner.new_state(1024, n_batch=1024)
    runner.forward(together, [SeqStep(0, ids, range(len(ids)))], ALL_LOGITS)
    exe = runner.executable(Layout((len(draft),), exact_rows=True), ALL_LOGITS, together)
    assert exe.per_row
    from cera.backend import StepInputs

    start = together.begin(0, np.arange(len(ids), len(ids) + len(draft)))
    got = exe.run(together, StepInputs(np.array(draft, np.int32), np.arange(len(ids), len(ids) + len(draft), dtype=np.int32),
                                       np.zeros(1, np.int32), np.array([start], np.int32)))["logits"]  # fmt: skip
    together.commit(0)
    for i in range(len(draft)):
        assert np.array_equal(got[i], want[i]), f"row {i}: {np.abs(got[i] - want[i]).max()}"
