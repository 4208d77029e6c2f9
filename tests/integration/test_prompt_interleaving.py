"""Prompts in chunks between the decode steps of the sequences generating, batched with
each other: each sequence's tokens are exactly those it gives alone (a plain session), a
long prompt delays another stream's next token by one prompt pass of at most
``prompt_chunk`` tokens (counted in the scheduler's passes, not in seconds), and prompts
evaluated at the same time share their passes."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import cera

CHUNK = 64


@pytest.fixture(scope="module")
def loaded(smollm2_path):
    m = cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    yield m
    m.close()


def _prompt(n: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(0, 4000, n).tolist()


def _alone(loaded, prompt, n, n_ctx=1024):
    s = loaded.new_session(n_ctx=n_ctx)
    s.append_tokens(prompt)
    return s.generate(max_tokens=n, temperature=0, ignore_eos=True).tokens


class Stream(threading.Thread):
    """A scheduler session generating greedily in a thread; ``started`` is set once it
    has its first ``signal_after`` tokens."""

    def __init__(self, scheduler, prompt, n, signal_after=1, go: threading.Event | None = None):
        super().__init__(daemon=True)
        self.scheduler, self.prompt, self.n, self.signal_after, self.go = scheduler, prompt, n, signal_after, go
        self.tokens: list[int] = []
        self.slot = None
        self.started = threading.Event()
        self.error = None

    def run(self):
        s = self.scheduler.new_session()
        self.slot = s.slot
        try:
            if self.go is not None:
                self.go.wait(60)
            s.append_tokens(self.prompt)
            for ev in s.events(max_tokens=self.n, temperature=0, ignore_eos=True):
                if hasattr(ev, "id"):
                    self.tokens.append(ev.id)
                    if len(self.tokens) == self.signal_after:
                        self.started.set()
        except BaseException as e:  # noqa: BLE001 - the test raises it
            self.error = e
        finally:
            self.started.set()
            s.close()


def _finish(*streams):
    for t in streams:
        t.join(timeout=300)
        assert not t.is_alive(), "a stream did not finish"
        if t.error is not None:
            raise t.error


def test_a_long_prompt_waits_between_the_decode_steps_of_a_running_stream(loaded):
    short, long_ = _prompt(10, 1), _prompt(420, 2)
    want_a, want_b = _alone(loaded, short, 90), _alone(loaded, long_, 6)
    scheduler = loaded.scheduler(n_slots=2, n_ctx=1024, prompt_chunk=CHUNK)
    scheduler.step_wait = 10.0  # a busy machine may be slow to wake A's thread: the order is what is checked
    a = Stream(scheduler, short, 90, signal_after=3)
    a.start()
    assert a.started.wait(120)
    b = Stream(scheduler, long_, 6)
    b.start()
    _finish(a, b)
    assert a.tokens == want_a and b.tokens == want_b
    passes = list(scheduler.passes)
    a_steps = [i for i, p in enumerate(passes) if p.kind == "decode" and a.slot in p.slots]
    assert len(a_steps) == 89  # (the 90th token is chosen from the last step's logits)
    b_prompt = [p for p in passes if p.kind == "prompt" and b.slot in p.slots]
    assert sum(sum(p.tokens) for p in b_prompt) == 420 and max(max(p.tokens) for p in b_prompt) <= CHUNK
    # between two of A's decode steps: one prompt pass at most, of at most CHUNK tokens
    gaps = []
    for i, j in zip(a_steps, a_steps[1:], strict=False):
        between = [p for p in passes[i + 1 : j] if p.kind == "prompt"]
        assert len(between) <= 1, between
        gaps.append(sum(sum(p.tokens) for p in between))
    assert max(gaps) <= CHUNK
    # B's whole prompt went in between A's steps, in at least ceil(420 / CHUNK) of its gaps
    assert sum(gaps) == 420 and sum(g > 0 for g in gaps) >= -(-420 // CHUNK)


def test_prompts_evaluated_together_share_their_passes_and_keep_their_tokens(loaded):
    prompts = [_prompt(n, 10 + n) for n in (300, 200, 150)]
    want = [_alone(loaded, p, 12) for p in prompts]
    scheduler = loaded.scheduler(n_slots=3, n_ctx=1024, prompt_chunk=CHUNK)
    go = threading.Event()
    streams = [Stream(scheduler, p, 12, go=go) for p in prompts]
    for t in streams:
        t.start()
    go.set()
    _finish(*streams)
    assert [t.tokens for t in streams] == want
    shared = [p for p in scheduler.passes if p.kind == "prompt" and len(p.slots) > 1]
    assert shared, list(scheduler.passes)
    assert all(sum(p.tokens) <= CHUNK for p in scheduler.passes if p.kind == "prompt")
    assert max(scheduler.rows_per_batch) == 3  # and their decode steps are batched


def test_a_shared_prompt_pass_gives_each_sequence_its_own_logits_bit_for_bit(loaded):
    """Below the scheduler: one prompt_rows pass of three sequences' chunks gives each the
    last-row logits of a pass of its own."""
    from cera.graph.builder import LAST_LOGITS
    from cera.generation.runtime import SeqStep

    runner = loaded.runner
    prompts = [_prompt(n, 30 + n) for n in (70, 40, 17)]
    alone = []
    for p in prompts:
        st = runner.new_state(256)
        alone.append(runner.forward(st, [SeqStep(0, p, range(len(p)))], LAST_LOGITS, prompt_rows=True)["logits"][-1])
    st = runner.new_state(256, n_slots=3)
    out = runner.forward(st, [SeqStep(i, p, range(len(p))) for i, p in enumerate(prompts)], LAST_LOGITS,
                         prompt_rows=True)["logits"]  # fmt: skip
    for i in range(3):
        assert np.array_equal(out[i], alone[i]), f"sequence {i} differs by {np.abs(out[i] - alone[i]).max()}"


def test_a_prompt_chunk_must_be_a_positive_integer(loaded):
    from cera.errors import SessionError

    with pytest.raises(SessionError, match="prompt_chunk"):
        loaded.scheduler(n_slots=1, n_ctx=64, prompt_chunk=0)
