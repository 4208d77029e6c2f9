"""Execution plans (plan.py): a decode step replayed from a recording computes exactly what
the same step computes op by op.

The op-by-op path is what the rest of the suite checks against independent references
(float64 math, gguf's dequantizers, llama.cpp); here every replayed step must give the
same logits bit for bit, on every family's tiny model (real converted files) and over
many steps of SmolLM2, and the cases a plan must not take (ops without a plan form,
numpy math between ops, forwards that depend on the position) must stay op by op and
still be right.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

TINY = sorted((Path(__file__).resolve().parent.parent / "models" / "reference" / "tiny").glob("tiny-*.gguf"))


def _load(path, threads=2):
    import cera

    return cera.load(str(path), device="cpu", threads=threads, quiet=True)


def _ids(n: int, vocab: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(0, min(vocab, 4000), n).tolist()


def _decode(loaded, prompt, steps, use_plans: bool, session=None):
    """Logits after the prompt and after each decoded step, with plans on or off."""
    loaded.backend.use_plans = use_plans
    s = session or loaded.new_session(n_ctx=128, n_batch=32)
    s.append_tokens(prompt)
    out = [s.evaluate().copy()]
    for t in steps:
        s.append_tokens([t])
        out.append(s.evaluate().copy())
    return out, s


def _plan_kinds(state) -> set[str]:
    from cera_backend_cpu.plan import Plan

    return {"plan" if isinstance(v, Plan) else v if isinstance(v, str) else "pending" for v in state.plans.values()}


@pytest.mark.parametrize("path", TINY, ids=[p.stem for p in TINY])
def test_replay_is_bit_identical_on_every_family(path):
    loaded = _load(path)
    ids = _ids(20, loaded.model.n_vocab)
    eager, _ = _decode(loaded, ids[:5], ids[5:], use_plans=False)
    replayed, s = _decode(loaded, ids[:5], ids[5:], use_plans=True)
    assert _plan_kinds(s.state) == {"plan"}, s.state.plans  # a plan was built and used
    for step, (a, b) in enumerate(zip(eager, replayed, strict=True)):
        assert np.array_equal(a, b), f"{path.stem}: step {step} differs by {np.abs(a - b).max()}"


def test_replay_is_bit_identical_with_an_f32_cache_and_all_logits():
    """Other pass kinds get their own plans: an f32 KV cache, output "all", the f32 value
    accumulator."""
    loaded = _load(next(p for p in TINY if "qwen3" in p.stem))
    be, m = loaded.backend, loaded.model
    ids = _ids(12, m.n_vocab, seed=12)
    results = {}
    for use_plans in (False, True):
        be.use_plans = use_plans
        be.attention_f16_accumulator = False
        try:
            state = be.new_state(m.state_layout(), 32, "f32")
            out = []
            for i, t in enumerate(ids):
                pos = np.array([i], np.int32)
                state.begin(pos)
                out.append(be.execute(m, state, np.array([t], np.int32), pos, "all"))
                state.commit()
        finally:
            be.attention_f16_accumulator = True
            be.use_plans = True
        results[use_plans] = (out, state)
    assert _plan_kinds(results[True][1]) == {"plan"}
    for a, b in zip(results[False][0], results[True][0], strict=True):
        assert np.array_equal(a, b)


def test_replay_is_bit_identical_over_many_smollm2_steps(smollm2_path):
    loaded = _load(smollm2_path)
    ids = _ids(48, loaded.model.n_vocab, seed=1)
    eager, _ = _decode(loaded, ids[:8], ids[8:], use_plans=False)
    replayed, s = _decode(loaded, ids[:8], ids[8:], use_plans=True)
    assert _plan_kinds(s.state) == {"plan"}
    for step, (a, b) in enumerate(zip(eager, replayed, strict=True)):
        assert np.array_equal(a, b), f"step {step} differs by {np.abs(a - b).max()}"


def test_plans_stay_right_after_truncate_restore_and_reset(smollm2_path):
    """The plan reads the cells it writes from the state at every run, so editing the
    state between steps must give what a fresh op-by-op session gives."""
    loaded = _load(smollm2_path)
    ids = _ids(30, loaded.model.n_vocab, seed=2)
    _, s = _decode(loaded, ids[:6], ids[6:12], use_plans=True)
    assert _plan_kinds(s.state) == {"plan"}
    checkpoint = s.checkpoint()  # after 12 tokens

    def continue_with(steps):
        out = []
        for t in steps:
            s.append_tokens([t])
            out.append(s.evaluate().copy())
        return out

    def fresh(prefix, steps):
        loaded.backend.use_plans = False
        f = loaded.new_session(n_ctx=128, n_batch=32)
        f.append_tokens(prefix)
        f.evaluate()
        out = []
        for t in steps:
            f.append_tokens([t])
            out.append(f.evaluate().copy())
        loaded.backend.use_plans = True
        return out

    continue_with(ids[12:20])
    s.truncate(9)  # drop 11 cells, then decode other tokens
    got = continue_with(ids[20:26])
    assert all(np.array_equal(a, b) for a, b in zip(got, fresh(ids[:9], ids[20:26]), strict=True))
    s.restore(checkpoint)
    got = continue_with(ids[24:30])
    assert all(np.array_equal(a, b) for a, b in zip(got, fresh(ids[:12], ids[24:30]), strict=True))
    s.reset()
    s.append_tokens(ids[:3])
    s.evaluate()
    got = continue_with(ids[3:8])
    assert all(np.array_equal(a, b) for a, b in zip(got, fresh(ids[:3], ids[3:8]), strict=True))
    assert _plan_kinds(s.state) == {"plan"}


# -- passes a plan must not take ----------------------------------------------------------------


class _Wrapped:
    """A tiny llama whose forward the test rewrites (a stand-in for a family)."""

    def __init__(self, loaded, forward):
        self.inner = loaded.model
        self.backend = loaded.backend
        self._forward = forward

    def forward(self, state, tokens, positions, output="last"):
        return self._forward(self.inner, state, tokens, positions, output)


def _tiny_llama():
    return _load(next(p for p in TINY if "mistral" in p.stem))


def _steps(loaded, model, ids):
    """Logits of single-token passes through backend.execute, as a session runs them."""
    be = loaded.backend
    state = be.new_state(model.inner.state_layout(), 64)
    out = []
    for i, t in enumerate(ids):
        pos = np.array([i], np.int32)
        state.begin(pos)
        out.append(be.execute(model, state, np.array([t], np.int32), pos, "last"))
        state.commit()
    return out, state


def _final_layers(m, x):
    ops, c = m.backend, m.config
    return ops.to_numpy(ops.linear(ops.rms_norm(x, m.output_norm, c.eps), m.output))


def test_numpy_math_between_ops_stays_op_by_op():
    loaded = _tiny_llama()

    def forward(m, state, tokens, positions, output):
        x = m.backend.embedding(m.tok_embd, tokens)
        x = np.tanh(x) * np.float32(0.5)  # made by numpy, not by an op: a plan could not replay it
        return _final_layers(m, x)

    model = _Wrapped(loaded, forward)
    ids = _ids(5, loaded.model.n_vocab, seed=3)
    got, state = _steps(loaded, model, ids)
    (reason,) = _plan_kinds(state)
    assert "no op of this pass produced" in reason
    m = loaded.model
    for t, logits in zip(ids, got, strict=True):
        x = np.tanh(m.tok_embd.dense()[t : t + 1]) * np.float32(0.5)
        assert np.array_equal(logits, _final_layers(m, x))


def test_an_op_without_a_plan_form_stays_op_by_op():
    loaded = _tiny_llama()
    be = loaded.backend
    rng = np.random.default_rng(4)
    dim = loaded.model.config.n_embd
    experts = 2
    router = be.weight("router", rng.standard_normal((experts, dim)).astype(np.float32))
    gate = be.weight("gate", rng.standard_normal((experts, 8, dim)).astype(np.float32))
    up = be.weight("up", rng.standard_normal((experts, 8, dim)).astype(np.float32))
    down = be.weight("down", rng.standard_normal((experts, dim, 8)).astype(np.float32))

    def forward(m, state, tokens, positions, output):
        x = m.backend.embedding(m.tok_embd, tokens)
        x = m.backend.add(x, m.backend.moe(x, router, gate, up, down, 1))
        return _final_layers(m, x)

    model = _Wrapped(loaded, forward)
    ids = _ids(5, loaded.model.n_vocab, seed=5)
    got, state = _steps(loaded, model, ids)
    (reason,) = _plan_kinds(state)
    assert "moe" in reason
    be.use_plans = False
    want, _ = _steps(loaded, model, ids)
    be.use_plans = True
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


def test_a_forward_that_depends_on_the_position_stays_op_by_op():
    loaded = _tiny_llama()

    def forward(m, state, tokens, positions, output):
        x = m.backend.embedding(m.tok_embd, tokens)
        x = m.backend.scale(x, 1.0 + int(positions[0]))  # a per-token value outside the inputs
        return _final_layers(m, x)

    model = _Wrapped(loaded, forward)
    ids = _ids(6, loaded.model.n_vocab, seed=6)
    got, state = _steps(loaded, model, ids)
    (reason,) = _plan_kinds(state)
    assert "different ops" in reason
    m = loaded.model
    for i, (t, logits) in enumerate(zip(ids, got, strict=True)):
        x = m.tok_embd.dense()[t : t + 1] * np.float32(1.0 + i)
        assert np.array_equal(logits, _final_layers(m, x))


# -- errors, threads, cancelling ------------------------------------------------------------------


def test_a_token_outside_the_table_is_an_error_in_a_replayed_step():
    from cera.errors import CeraError

    loaded = _tiny_llama()
    be, m = loaded.backend, loaded.model
    state = be.new_state(m.state_layout(), 16)
    for i in range(3):  # two recordings, then a plan
        pos = np.array([i], np.int32)
        state.begin(pos)
        be.execute(m, state, np.array([1], np.int32), pos, "last")
        state.commit()
    assert _plan_kinds(state) == {"plan"}
    pos = np.array([3], np.int32)
    state.begin(pos)
    with pytest.raises(CeraError, match="outside the embedding table"):
        be.execute(m, state, np.array([m.tok_embd.shape[1]], np.int32), pos, "last")
    state.rollback()


def test_sessions_on_two_threads_record_their_own_plans(smollm2_path):
    """The recorder belongs to the thread that records: two sessions decoding at once on
    one backend each get their own, right, plan."""
    loaded = _load(smollm2_path)
    ids = [_ids(16, loaded.model.n_vocab, seed=s) for s in (7, 8)]
    want = [_decode(loaded, i[:4], i[4:], use_plans=False)[0] for i in ids]
    loaded.backend.use_plans = True
    got: list = [None, None]

    def work(k):
        s = loaded.new_session(n_ctx=64, n_batch=16)
        s.append_tokens(ids[k][:4])
        out = [s.evaluate().copy()]
        for t in ids[k][4:]:
            s.append_tokens([t])
            out.append(s.evaluate().copy())
        got[k] = out

    threads = [threading.Thread(target=work, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in (0, 1):
        assert all(np.array_equal(a, b) for a, b in zip(got[k], want[k], strict=True))


def test_cancel_still_stops_generation_between_tokens(smollm2_path):
    from cera.session import GenerateOptions
    from cera.sink import FinishReason, Sink

    loaded = _load(smollm2_path)
    s = loaded.new_session(n_ctx=128)
    s.append_tokens(_ids(6, loaded.model.n_vocab, seed=9))

    class CancelAfterFive(Sink):
        def __init__(self):
            self.tokens = []

        def on_token(self, token_id):
            self.tokens.append(token_id)
            if len(self.tokens) == 5:
                s.cancel()

    sink = CancelAfterFive()
    summary = s.generate(GenerateOptions(max_tokens=50, temperature=0.0, ignore_eos=True), sink)
    assert summary.finish_reason == FinishReason.CANCELLED
    assert len(summary.tokens) == 5
    assert _plan_kinds(s.state) == {"plan"}  # the steps before the cancel ran from the plan


# -- the arena ------------------------------------------------------------------------------------


def test_arena_never_overlaps_tensors_that_one_step_uses(smollm2_path):
    """Buffers share arena memory only when their lives do not overlap: check every
    step's tensors (all the ops of a fused step) against each other, from a real
    recording."""
    from cera_backend_cpu.fusion import plan_steps
    from cera_backend_cpu.plan import Recorder, arena_layout

    loaded = _load(smollm2_path)
    be, m = loaded.backend, loaded.model
    state = be.new_state(m.state_layout(), 16)
    tokens, positions = np.array([5], np.int32), np.array([0], np.int32)
    state.begin(positions)
    rec = Recorder(tokens, positions)
    be._tls.recorder = rec
    try:
        result = m.forward(state, tokens, positions, "last")
    finally:
        be._tls.recorder = None
    state.commit()
    recording = rec.finish(result)
    steps = plan_steps(recording.ops)
    assert len(steps) < len(recording.ops)  # some ops were fused
    offsets, size = arena_layout(recording, steps)
    assert size < sum(recording.sizes) / 4  # the sharing is real: most tensors are short-lived

    def step_ops(step):
        extra = ((step.glu,) if step.glu is not None else ()) + ((step.residual[0],) if step.residual else ())
        return step.ops + extra

    live_ranges = {}
    for s, step in enumerate(steps):
        for i in step_ops(step):
            for a in recording.ops[i][1]:
                if a[0] == "buf":
                    live_ranges.setdefault(a[1], [s, s])[1] = s
    for s in range(len(steps)):
        live = [b for b, (s0, s1) in live_ranges.items() if s0 <= s <= s1]
        spans = sorted((offsets[b], offsets[b] + recording.sizes[b]) for b in live)
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert end <= start, f"step {s}: live tensors overlap in the arena"
