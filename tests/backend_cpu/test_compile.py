"""The CPU backend's compiled graphs (compile.py): a fused C plan computes exactly what the
same graph computes step by step, unfused (CERA_CPU_PLANS=0), and what the op-level tests
and llama.cpp check independently.

Also: one compiled graph serves every state of its shape (the state's arrays come per
run), ops without a C kernel run on the host in between, the arena never lets two live
tensors share memory, and errors in a compiled step are CeraErrors.
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


def _decode(loaded, prompt, steps, use_plans: bool, session=None, n_ctx=128, n_batch=32):
    """Logits after the prompt and after each decoded step, fused or step by step."""
    loaded.backend.use_plans = use_plans
    try:
        s = session or loaded.new_session(n_ctx=n_ctx, n_batch=n_batch)
        s.append_tokens(prompt)
        out = [s.evaluate().copy()]
        for t in steps:
            s.append_tokens([t])
            out.append(s.evaluate().copy())
    finally:
        loaded.backend.use_plans = True
    return out, s


def _assert_same(a_list, b_list, what):
    for step, (a, b) in enumerate(zip(a_list, b_list, strict=True)):
        assert np.array_equal(a, b), f"{what}: step {step} differs by {np.abs(a - b).max()}"


@pytest.mark.parametrize("path", TINY, ids=[p.stem for p in TINY])
def test_fused_plans_are_bit_identical_to_step_by_step_on_every_family(path):
    loaded = _load(path)
    if not loaded.model.n_vocab:  # an encoder without an output head (tiny-bert): its vectors
        texts = ["a short text", "another, longer text to embed"]
        loaded.backend.use_plans = False
        try:
            eager = loaded.embed(texts, pooling="none")
        finally:
            loaded.backend.use_plans = True
        _assert_same(eager, loaded.embed(texts, pooling="none"), path.stem)
        return
    ids = _ids(20, loaded.model.n_vocab)
    eager, _ = _decode(loaded, ids[:5], ids[5:], use_plans=False)
    fused, _ = _decode(loaded, ids[:5], ids[5:], use_plans=True)
    _assert_same(eager, fused, path.stem)


def test_a_decode_step_is_one_c_call(smollm2_path):
    from cera.graph.builder import ARGMAX, Layout

    loaded = _load(smollm2_path)
    state = loaded.runner.new_state(64)
    exe = loaded.runner.executable(Layout((1,)), ARGMAX, state)
    assert [kind for kind, _ in exe.segments] == ["c"]
    exe = loaded.runner.executable(Layout((7,)), ARGMAX, state)
    assert [kind for kind, _ in exe.segments] == ["c"]


def test_fused_and_unfused_agree_over_many_smollm2_steps_and_an_f32_cache(smollm2_path):
    loaded = _load(smollm2_path)
    ids = _ids(48, loaded.model.n_vocab, seed=1)
    eager, _ = _decode(loaded, ids[:8], ids[8:], use_plans=False)
    fused, _ = _decode(loaded, ids[:8], ids[8:], use_plans=True)
    _assert_same(eager, fused, "smollm2")
    loaded.backend.attention_f16_accumulator = False
    try:
        s1 = loaded.new_session(n_ctx=64, kv_type="f32")
        s2 = loaded.new_session(n_ctx=64, kv_type="f32")
        eager, _ = _decode(loaded, ids[:8], ids[8:20], use_plans=False, session=s1)
        fused, _ = _decode(loaded, ids[:8], ids[8:20], use_plans=True, session=s2)
    finally:
        loaded.backend.attention_f16_accumulator = True
    _assert_same(eager, fused, "smollm2 f32 cache")


def test_one_compiled_graph_serves_many_states_and_stays_right_after_edits(smollm2_path):
    """The compiled plan reads the state's arrays and cells from the run, so sessions
    share it, and editing a state between steps gives what a fresh session gives."""
    loaded = _load(smollm2_path)
    ids = _ids(30, loaded.model.n_vocab, seed=2)
    _, s = _decode(loaded, ids[:6], ids[6:12], use_plans=True)
    compiled = loaded.runner.n_compiled
    checkpoint = s.checkpoint()  # after 12 tokens

    def continue_with(steps):
        out = []
        for t in steps:
            s.append_tokens([t])
            out.append(s.evaluate().copy())
        return out

    def fresh(prefix, steps):
        return _decode(loaded, prefix, steps, use_plans=False)[0][1:]

    continue_with(ids[12:20])
    s.truncate(9)
    _assert_same(continue_with(ids[20:26]), fresh(ids[:9], ids[20:26]), "after truncate")
    s.restore(checkpoint)
    _assert_same(continue_with(ids[24:30]), fresh(ids[:12], ids[24:30]), "after restore")
    s.reset()
    s.append_tokens(ids[:3])
    s.evaluate()
    _assert_same(continue_with(ids[3:8]), fresh(ids[:3], ids[3:8]), "after reset")
    # another session of the same shape compiles nothing new for its decode steps
    before = loaded.runner.n_compiled
    _decode(loaded, ids[:6], ids[6:10], use_plans=True)
    assert compiled > 0 and loaded.runner.n_compiled == before


def test_host_ops_run_between_c_segments_and_agree_with_the_reference():
    """An op without a C kernel (softmax here) runs on the host between C segments."""
    import cera
    from cera.graph.builder import Layout, Outputs
    from cera.model import Weights
    from cera.testing.reference import ReferenceBackend

    loaded = _load(next(p for p in TINY if "mistral" in p.stem))
    m = loaded.model

    class Softmaxed(type(m)):
        def forward(self, g):
            x = g.embedding(self.tok_embd, g.tokens)
            x = g.softmax(x)
            x = g.rms_norm(x, self.output_norm, self.config.eps)
            g.emit_logits(g.linear(x, self.output))

    weights = Weights.from_gguf(loaded.gguf)
    model = Softmaxed(m.config, weights)
    graph = model.build(Layout((3,)), Outputs(("logits",), rows="all"), n_ctx=16)
    state = loaded.backend.new_state(model.state, 16)
    exe = loaded.backend.compile(graph, loaded.runner.weights, state)
    assert [k for k, _ in exe.segments] == ["c", "host", "c"]
    from cera.backend import StepInputs

    inputs = StepInputs(np.array([1, 2, 3], np.int32), np.arange(3, dtype=np.int32), np.zeros(1, np.int32), np.zeros(1, np.int32))
    got = exe.run(state, inputs)["logits"]
    ref = ReferenceBackend()
    rw = {n: ref.upload(loaded.gguf, n) for n in graph.weights_used()}
    want = ref.compile(graph, rw, state).run(ref.new_state(model.state, 16), inputs)["logits"]
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-3 * np.abs(want).max())
    assert cera  # imported for its side effect of registering plugins in this process


# -- errors, threads, cancelling ------------------------------------------------------------------


def test_a_token_outside_the_table_is_a_cera_error_in_a_compiled_step():
    from cera.backend import StepInputs
    from cera.errors import CeraError
    from cera.graph.builder import ARGMAX, Layout

    loaded = _load(next(p for p in TINY if "mistral" in p.stem))
    state = loaded.runner.new_state(16)
    exe = loaded.runner.executable(Layout((1,)), ARGMAX, state)
    state.begin(0, np.array([0]))
    with pytest.raises(CeraError, match="outside the embedding table"):
        exe.run(state, StepInputs(np.array([loaded.model.n_vocab + 5], np.int32), np.zeros(1, np.int32),
                                  np.zeros(1, np.int32), np.zeros(1, np.int32)))  # fmt: skip
    state.rollback(0)


def test_sessions_on_two_threads_share_compiled_graphs(smollm2_path):
    loaded = _load(smollm2_path)
    ids = [_ids(16, loaded.model.n_vocab, seed=s) for s in (7, 8)]
    want = [_decode(loaded, i[:4], i[4:], use_plans=False)[0] for i in ids]
    got: list = [None, None]

    def work(k):
        got[k] = _decode(loaded, ids[k][:4], ids[k][4:], use_plans=True, n_ctx=64, n_batch=16)[0]

    threads = [threading.Thread(target=work, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in (0, 1):
        _assert_same(got[k], want[k], f"thread {k}")


def test_cancel_still_stops_generation_between_tokens(smollm2_path):
    from cera.generation.session import GenerateOptions
    from cera.generation.sink import FinishReason, Sink

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


# -- the arena ------------------------------------------------------------------------------------


def test_arena_never_overlaps_tensors_that_one_step_uses(smollm2_path):
    """Buffers share arena memory only when their lives do not overlap: check every
    step's tensors (all the nodes of a fused step) against each other."""
    from cera.graph.builder import LAST_LOGITS, Layout
    from cera.graph.planning import arena_layout, placements, plan_steps

    loaded = _load(smollm2_path)
    graph = loaded.model.build(Layout((5,)), LAST_LOGITS, n_ctx=16)
    place = placements(graph)
    steps = plan_steps(graph)
    assert len(steps) < len([n for n in graph.nodes])  # some nodes were fused or are views
    offsets, size = arena_layout(graph, steps, place)
    owned = {root: next(n.out.nbytes for n in graph.nodes if n.out.id == root) for root in offsets}
    assert size < sum(owned.values()) / 4  # the sharing is real: most tensors are short-lived
    live_ranges = {}
    for s, step in enumerate(steps):
        for node in step.all_nodes:
            for t in [*node.tensors, node.out]:
                root = place[t.id].root
                if root in offsets:
                    live_ranges.setdefault(root, [s, s])[1] = s
    for s in range(len(steps)):
        live = [b for b, (s0, s1) in live_ranges.items() if s0 <= s <= s1]
        spans = sorted((offsets[b], offsets[b] + owned[b]) for b in live)
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert end <= start, f"step {s}: live tensors overlap in the arena"
