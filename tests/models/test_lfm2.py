"""LFM2 (short convolutions + attention) on the tiny random-weight model converted by
llama.cpp's converter from a transformers checkpoint (reference/make_tiny_hybrid.py).

llama.cpp's greedy tokens and logits are checked by test_fidelity.py (data/tiny-lfm2.json)
and the reference backend against transformers by tests/core/test_reference_backend.py;
here the CPU backend is checked against transformers directly, a multi-turn chat is shown
to evaluate only each new turn (the conv state is carried, and restored from the prompt
snapshot where a rewind is needed), and the family refuses what it does not understand.

Stated tolerance against transformers: 1e-2 absolute on logits of magnitude ~10. The CPU
backend keeps keys and values in f16 (as llama.cpp does), transformers in float32;
llama.cpp itself differs from transformers by up to 2.2e-2 on this file (recorded in
tiny-lfm2.hf.json).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import cera
from cera.chat.session import Chat
from cera.errors import ModelConfigError

TINY = Path(__file__).parent / "reference" / "tiny"
GGUF = TINY / "tiny-lfm2.gguf"
TOLERANCE = 1e-2

sys.path.insert(0, str(Path(__file__).parents[1] / "audio"))
from gguf_edit import DROP, rewrite  # noqa: E402


@pytest.fixture(scope="module")
def lfm2():
    with cera.load(str(GGUF), device="cpu", threads=2, quiet=True) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def lfm2_words(lfm2, tmp_path_factory):
    """The tiny LFM2 with an output bias that lets it say only whole words (" the",
    " and", ...): random weights otherwise produce byte soup whose text does not
    tokenize back to the same ids, and a chat re-renders its history from text, so the
    reuse it measures would depend on the weights, not on the state it carries."""
    import re

    tok = lfm2.tokenizer
    bias = np.full(tok.n_vocab, -1000.0, np.float32)
    for i in range(tok.n_vocab):
        piece = tok.decode([i])
        if re.fullmatch(r" [a-z]{2,}", piece) and tok.encode(piece, add_special=False) == [i]:
            bias[i] = 0.0
    assert (bias == 0).sum() >= 20
    from gguf import GGUFReader

    embd = next(t for t in GGUFReader(str(GGUF)).tensors if t.name == "token_embd.weight")
    table = np.array(embd.data).reshape(tok.n_vocab, -1)
    path = rewrite(GGUF, tmp_path_factory.mktemp("lfm2") / "words.gguf",
                   tensors={"output.weight": table, "output.bias": bias})  # fmt: skip
    with cera.load(str(path), device="cpu", threads=2, quiet=True) as loaded:
        yield loaded


def _hf_cases():
    return json.loads((TINY / "tiny-lfm2.hf.json").read_text())["hf_reference"]["cases"]


def test_the_layers_come_from_the_file(lfm2):
    assert lfm2.model.family == "lfm2"
    assert lfm2.model.config.mixers == ("shortconv", "attention", "shortconv", "attention")
    assert [d.kind for d in lfm2.model.state] == ["conv", "kv", "conv", "kv"]


def test_cpu_logits_match_transformers(lfm2):
    worst = 0.0
    for case in _hf_cases():
        s = lfm2.new_session(n_ctx=512)
        s.append_tokens(case["prompt_tokens"])
        logits = s.evaluate()
        top = case["hf_last_prompt_position_top10"]
        ids = [t for t, _ in top]
        worst = max(worst, float(np.abs(logits[ids] - np.array([v for _, v in top])).max()))
        assert int(np.argmax(logits)) == ids[0], case["id"]
        # transformers' own greedy continuation (its cache, token by token)
        got = s.generate(max_tokens=len(case["hf_greedy_tokens"]), temperature=0, ignore_eos=True)
        want = case["hf_greedy_tokens"]
        assert got.tokens[: case["greedy_tokens_equal_up_to"]] == want[: case["greedy_tokens_equal_up_to"]], case["id"]
    assert worst <= TOLERANCE, f"max |logit - transformers| = {worst:.3g}"


def test_a_multi_turn_chat_evaluates_only_each_new_turn(lfm2_words):
    lfm2 = lfm2_words
    chat = Chat(lfm2.new_session(n_ctx=1024), system="You are a test.")
    session = chat.session
    for turn, text in enumerate(("Hello there.", "And then what happened?", "Thanks!")):
        before = session.n_evaluated
        held = len(session.tokens) + len(session.pending)
        rendered = chat.template.render([*chat.messages, {"role": "user", "content": text}], add_generation_prompt=True)
        n_prompt = len(lfm2.tokenizer.encode(rendered, add_special=True, parse_special=True))
        summary = chat.send(text, max_tokens=8, temperature=0, ignore_eos=True)
        assert summary.n_generated == 8
        # the new prompt tokens, then one evaluation per generated token but the last,
        # which stays queued (the next turn's rendering starts with it)
        assert session.n_evaluated - before == n_prompt - chat.last_reused + 7, f"turn {turn}"
        if turn:
            assert chat.last_reused >= held - 1
    # the state reached turn by turn is that of one evaluation of the whole history
    fresh = lfm2.new_session(n_ctx=1024)
    fresh.append_tokens(session.tokens)
    want = fresh.evaluate()
    session.pending = []
    got = session.evaluate()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-3 * np.abs(want).max())
    assert int(np.argmax(got)) == int(np.argmax(want))


def test_unknown_metadata_and_tensors_are_refused(tmp_path):
    extra = rewrite(GGUF, tmp_path / "key.gguf", kv={"lfm2.attention.causal": False})
    with pytest.raises(ModelConfigError, match=r"lfm2\.attention\.causal"):
        cera.load(str(extra), device="cpu", quiet=True)
    dense = rewrite(GGUF, tmp_path / "tensor.gguf", tensors={"dense_2.weight": np.ones((8, 64), np.float32)})
    with pytest.raises(ModelConfigError, match=r"dense_2\.weight"):
        cera.load(str(dense), device="cpu", quiet=True)
    no_cache = rewrite(GGUF, tmp_path / "nokernel.gguf", kv={"lfm2.shortconv.l_cache": DROP})
    with pytest.raises(ModelConfigError, match=r"lfm2\.shortconv\.l_cache"):
        cera.load(str(no_cache), device="cpu", quiet=True)
