"""A hybrid family (short convolutions + attention) through sessions and chats.

Its conv layers carry state that cannot be rewound cell by cell. Before the redesign a
chat on such a model raised SessionError on every turn (the session rewound one token to
get fresh logits). Now the session keeps the last logits, so each turn evaluates exactly
the new tokens; and where a rewind is needed, the session restores the snapshot it took
at the end of the prompt and re-evaluates from there. Results are checked against the
numpy reference backend and against a session that evaluates everything from scratch.
"""

from __future__ import annotations

import numpy as np
import pytest
from hybrid_family import register, write_hybrid

import cera
from cera.chat.session import Chat
from cera.plugins.manager import PluginManager


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    path = write_hybrid(tmp_path_factory.mktemp("hybrid") / "hybrid.gguf")
    manager = PluginManager(allow={"cpu"})
    manager.load_entry_points()
    register(manager)
    loaded = cera.load(str(path), device="cpu", threads=2, manager=manager)
    yield loaded
    loaded.close()


def test_the_family_declares_conv_and_kv_state(hybrid):
    kinds = [d.kind for d in hybrid.model.state]
    assert kinds == ["conv", "kv", "conv", "kv"]
    assert not hybrid.model.state.rewindable


def test_three_turn_chat_evaluates_only_the_new_tokens(hybrid):
    chat = Chat(hybrid.new_session(n_ctx=512), system="You are a test.")
    session = chat.session
    for turn, text in enumerate(("Hello there.", "And then?", "Thanks!")):
        before = session.n_evaluated
        held = len(session.tokens) + len(session.pending)
        rendered = chat.template.render([*chat.messages, {"role": "user", "content": text}], add_generation_prompt=True)
        n_prompt = len(hybrid.tokenizer.encode(rendered, add_special=True, parse_special=True))
        summary = chat.send(text, max_tokens=8, temperature=0)
        assert summary.n_generated == 8
        new = n_prompt - chat.last_reused
        # the prompt's new tokens, then one evaluation per generated token but the last
        # (which stays queued: the next turn's rendering starts with it)
        assert session.n_evaluated - before == new + 7, f"turn {turn}: evaluated {session.n_evaluated - before}"
        if turn:
            assert chat.last_reused >= held - 1  # everything the session held was reused
    # the conversation's state is that of a fresh evaluation of the whole history (one
    # batch there, turn by turn here: the float sums differ in order, not in what they sum)
    fresh = hybrid.new_session(n_ctx=512)
    fresh.append_tokens(session.tokens)
    want = fresh.evaluate()
    session.pending = []
    got = session.evaluate()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())
    assert int(np.argmax(got)) == int(np.argmax(want))


def test_generating_again_from_an_unchanged_conversation_reuses_everything(hybrid):
    s = hybrid.new_session(n_ctx=128)
    s.append_text("abc abc abc")
    s.generate(max_tokens=3, temperature=0)
    tokens = s.tokens + s.pending
    s.sync_tokens(tokens)
    before = s.n_evaluated
    s.generate(max_tokens=2, temperature=0)
    assert s.n_evaluated - before == 2  # the queued token, then one decode step; nothing re-run


def test_a_rewind_restores_the_prompt_snapshot_and_re_evaluates(hybrid):
    s = hybrid.new_session(n_ctx=128)
    prompt = hybrid.tokenize("The quick brown fox", add_special=False)
    s.append_tokens(prompt)
    s.generate(max_tokens=6, temperature=0)
    # a different continuation after the prompt: conv state cannot be cut, so the
    # session goes back to its snapshot at the end of the prompt
    other = hybrid.tokenize(" jumps", add_special=False)
    reused = s.sync_tokens(prompt + other)
    assert reused == len(prompt)
    before = s.n_evaluated
    got = s.evaluate()
    assert s.n_evaluated - before == len(other)  # only what follows the snapshot
    fresh = hybrid.new_session(n_ctx=128)
    fresh.append_tokens(prompt)
    fresh.evaluate()
    fresh.append_tokens(other)
    assert np.array_equal(got, fresh.evaluate())  # the same passes as a fresh session: the same bits


def test_the_cpu_backend_agrees_with_the_reference_backend(hybrid):
    from cera.graph.builder import ALL_LOGITS
    from cera.generation.runtime import Runner, SeqStep
    from cera.testing.reference import ReferenceBackend

    ref = ReferenceBackend()
    weights = {n: ref.upload(hybrid.gguf, n) for n in hybrid.runner.weights}
    runner = Runner(hybrid.model, ref, weights)
    ids = hybrid.tokenize("state that is not a cache", add_special=False)
    rs, cs = runner.new_state(64, kv_type="f32"), hybrid.runner.new_state(64, kv_type="f32")
    for chunk in (ids[:9], ids[9:10], ids[10:]):  # a prompt, a decode step, another chunk
        start = int(rs.n_filled[0])
        step = SeqStep(0, chunk, range(start, start + len(chunk)))
        want = runner.forward(rs, [step], ALL_LOGITS)["logits"]
        got = hybrid.runner.forward(cs, [step], ALL_LOGITS)["logits"]
        # the CPU quantizes F32 activations for nothing (F32 weights): float32 rounding only
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-3 * np.abs(want).max())
