"""Sessions on a real model (SmolLM2-135M): KV persistence, cancellation, sampling seeds,
stop conditions, checkpoints, and several sessions sharing one loaded model.

Where a test needs an expected continuation it takes llama.cpp's stored greedy output
(tests/models/reference/data), never cera's own.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

import cera
from cera.errors import ContextFull, SessionError
from cera.generation.sink import CollectingSink, FinishReason, Sink

REF = Path(__file__).parents[1] / "models" / "reference" / "data" / "smollm2-135m-instruct-q4_1.json"
PROMPT = "The capital of France is Paris. The capital of Germany is"


@pytest.fixture(scope="module")
def model(smollm2_path):
    m = cera.load(smollm2_path, device="cpu", quiet=True)
    yield m
    m.close()


@pytest.fixture(scope="module")
def reference():
    if not REF.exists():
        pytest.skip(f"llama.cpp reference data missing: {REF}")
    record = json.loads(REF.read_text())
    # Cases whose first 6+ steps llama.cpp was confident about (margin > 0.5), with that count,
    # longest confident prefix first: greedy decoding must reproduce those tokens exactly.
    out = []
    for c in record["cases"]:
        n = c["first_step_margin_below_0_5"]
        n = len(c["generated_tokens"]) if n is None else n
        if c["finish_reason"] == "eog":
            n = min(n, len(c["generated_tokens"]) - 1)
        if n >= 6:
            out.append((c, n))
    return sorted(out, key=lambda cn: -cn[1])


def test_a_follow_up_evaluates_only_new_tokens_and_matches_one_batch(model):
    ids = model.tokenize(PROMPT + " Berlin. The capital of Italy is")
    split = 9
    incremental = model.new_session()
    incremental.append_tokens(ids[:split])
    incremental.evaluate()
    incremental.append_tokens(ids[split:])
    assert incremental.pending == ids[split:]  # only the new tokens are queued
    a = incremental.evaluate()
    whole = model.new_session()
    whole.append_tokens(ids)
    b = whole.evaluate()
    assert incremental.n_tokens == whole.n_tokens == len(ids)
    assert int(a.argmax()) == int(b.argmax())
    # Same maths in another grouping: only the activation rounding of the batch differs.
    np.testing.assert_allclose(a, b, atol=0.05 * float(np.abs(b).max()))


def test_greedy_generation_matches_llama_cpp_on_confident_prompts(model, reference):
    for case, n in reference[:3]:
        s = model.new_session()
        s.append_tokens(case["prompt_tokens"])
        summary = s.generate(max_tokens=n, temperature=0)
        assert summary.tokens == case["generated_tokens"][:n], case["id"]
        assert summary.finish_reason == FinishReason.LENGTH


def test_sessions_sharing_one_model_do_not_disturb_each_other(model, reference):
    (a_case, _), (b_case, _) = reference[0], reference[1]
    a, b = model.new_session(), model.new_session()
    a.append_tokens(a_case["prompt_tokens"])
    b.append_tokens(b_case["prompt_tokens"])
    out_a, out_b = [], []
    la, lb = a.evaluate(), b.evaluate()
    for _ in range(8):  # interleave single decode steps
        ta, tb = int(la.argmax()), int(lb.argmax())
        out_a.append(ta)
        out_b.append(tb)
        a.append_tokens([ta])
        b.append_tokens([tb])
        la, lb = a.evaluate(), b.evaluate()
    assert out_a == a_case["generated_tokens"][:8]
    assert out_b == b_case["generated_tokens"][:8]


def test_stop_string_cuts_the_text_before_it(model, reference):
    case, n = reference[0]
    full = model.detokenize(case["generated_tokens"][:n])
    words = full.split()
    stop = words[len(words) // 2]
    expected = full[: full.index(stop)]
    s = model.new_session()
    s.append_tokens(case["prompt_tokens"])
    summary = s.generate(max_tokens=n, temperature=0, stop=[stop])
    assert summary.finish_reason == FinishReason.STOP_STRING
    assert summary.text == expected


def test_max_tokens_stops_with_length(model):
    s = model.new_session()
    s.append_text(PROMPT)
    summary = s.generate(max_tokens=5, temperature=0, ignore_eos=True)
    assert summary.n_generated == 5
    assert summary.finish_reason == FinishReason.LENGTH
    assert len(s.pending) == 1  # the last token waits to be evaluated by a follow-up


def test_the_same_seed_gives_the_same_tokens(model):
    def run(seed):
        s = model.new_session()
        s.append_text(PROMPT)
        return s.generate(max_tokens=12, temperature=1.2, top_k=0, top_p=1.0, min_p=0.0, seed=seed, ignore_eos=True).tokens

    first, again, other = run(7), run(7), run(8)
    assert first == again
    assert first != other


def test_stream_yields_the_same_text_as_generate(model, reference):
    case, n = reference[0]
    s = model.new_session()
    s.append_tokens(case["prompt_tokens"])
    chunks = list(s.stream(max_tokens=n, temperature=0))
    assert "".join(chunks) == model.detokenize(case["generated_tokens"][:n])
    assert all(isinstance(c, str) and c for c in chunks)


def test_sink_receives_tokens_text_and_reason(model):
    sink = CollectingSink()
    s = model.new_session()
    s.append_text(PROMPT)
    summary = s.generate(max_tokens=6, temperature=0, ignore_eos=True, sink=sink)
    assert sink.tokens == summary.tokens
    assert sink.text == summary.text
    assert sink.reason == FinishReason.LENGTH


def test_cancel_from_another_thread_stops_generation(model):
    s = model.new_session()
    s.append_text(PROMPT)

    class CancelAfterThree(Sink):
        def __init__(self):
            self.n = 0

        def on_token(self, token_id):
            self.n += 1
            if self.n == 3:
                t = threading.Thread(target=s.cancel)
                t.start()
                t.join()

    summary = s.generate(max_tokens=200, temperature=0, ignore_eos=True, sink=CancelAfterThree())
    assert summary.finish_reason == FinishReason.CANCELLED
    assert summary.n_generated == 3


def test_cancel_interrupts_a_long_prompt_between_chunks(model):
    s = model.new_session(n_ctx=2048, n_batch=16)
    ids = model.tokenize(" ".join(["word"] * 600))
    s.append_tokens(ids)
    timer = threading.Timer(0.3, s.cancel)
    timer.start()
    result = s.evaluate()
    timer.join()
    assert result is None  # cancelled before the last chunk
    assert 0 < s.n_tokens < len(ids)
    assert s.n_tokens % 16 == 0  # stopped on a chunk boundary
    assert s.n_tokens + len(s.pending) == len(ids)  # nothing lost: the rest is still queued


def test_checkpoint_and_restore_rewind_the_session(model):
    s = model.new_session()
    s.append_text(PROMPT)
    s.evaluate()
    cp = s.checkpoint()
    first = s.generate(max_tokens=6, temperature=0, ignore_eos=True).tokens
    s.restore(cp)
    again = s.generate(max_tokens=6, temperature=0, ignore_eos=True).tokens
    assert first == again


def test_context_overflow_is_an_error_that_names_the_sizes(model):
    s = model.new_session(n_ctx=8)
    s.append_tokens(model.tokenize(PROMPT))
    with pytest.raises(ContextFull, match="exceed its size of 8"):
        s.evaluate()


def test_generation_stops_when_the_context_is_full(model):
    ids = model.tokenize(PROMPT)
    s = model.new_session(n_ctx=len(ids) + 3)
    s.append_tokens(ids)
    summary = s.generate(max_tokens=50, temperature=0, ignore_eos=True)
    assert summary.finish_reason == FinishReason.CONTEXT
    assert s.n_tokens <= len(ids) + 3


def test_token_ids_outside_the_vocabulary_are_refused(model):
    s = model.new_session()
    with pytest.raises(SessionError, match="outside the vocabulary"):
        s.append_tokens([model.model.n_vocab])


def test_chat_reuses_the_previous_turns(model):
    chat = model.chat(system="You are a helpful assistant.")
    chat.send("Say hello.", max_tokens=8, temperature=0)
    n_before = chat.session.n_tokens + len(chat.session.pending)
    chat.send("Now say goodbye.", max_tokens=8, temperature=0)
    assert chat.last_reused >= n_before - 2  # only the tail of the first turn is re-evaluated
