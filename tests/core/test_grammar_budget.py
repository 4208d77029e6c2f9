"""A constrained value always completes within its token budget: as the budget nears its
end the grammar steers toward its shortest completion (`cera.grammar.budget`); a budget
below the grammar's shortest value is a `GrammarBudgetError` before any token. JSON objects
under ``json=True`` get no key twice and no blank lines. Checked with independent checkers
(`json`, `jsonschema`, Python's `re`) on SmolLM2-135M, and the completion search against
completions written out by hand."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import cera
from cera.generation.sampling import Candidates
from cera.errors import GrammarBudgetError
from cera.generation.sink import FinishReason
from cera.grammar import Constraint, GrammarProcessor
from cera.grammar.completion import shortest_completion, single_byte_tokens
from cera.grammar.vocab import token_bytes_cached

jsonschema = pytest.importorskip("jsonschema")

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "hobbies": {"type": "array", "items": {"type": "string"}},
        "address": {"type": "object", "properties": {"city": {"type": "string"}, "street": {"type": "string"}}},
    },
    "required": ["name", "age", "hobbies"],
}
# not one of llama.cpp's grammars: sums and products of numbers and brackets
ARITHMETIC = r"""root ::= expr
expr ::= term (" " ("+" | "-" | "*") " " term)*
term ::= [0-9]{1,4} | "(" expr ")"
"""


@pytest.fixture(scope="module")
def model():
    m = cera.load("smollm2-135m-instruct-q4_1", device="cpu", threads=2, quiet=True)
    yield m
    m.close()


def processor(model, constraint, budget=None):
    return GrammarProcessor(constraint, model.tokenizer, model.model.n_vocab, overlap=False, budget=budget)


def walk(p, model, text: str):
    for t in model.tokenizer.encode(text, add_special=False):
        assert p.allowed()[t], (text, t)
        p.accept(t)


def is_arithmetic(text: str) -> bool:
    """The language of ARITHMETIC, by hand (an independent reader)."""
    pos = 0

    def term():
        nonlocal pos
        if text.startswith("(", pos):
            pos += 1
            if not expr() or not text.startswith(")", pos):
                return False
            pos += 1
            return True
        m = re.compile(r"[0-9]{1,4}").match(text, pos)
        if not m:
            return False
        pos = m.end()
        return True

    def expr():
        nonlocal pos
        if not term():
            return False
        while re.compile(r" [+*-] ").match(text, pos):
            pos += 3
            if not term():
                return False
        return True

    return expr() and pos == len(text)


# -- the search ---------------------------------------------------------------------------------


@pytest.mark.parametrize("constraint, written, shortest", [
    (Constraint.json_schema(PERSON), '{"name": "Ann", "age": 3, "hobbies": ["ches', '"]}'),
    (Constraint.json(), '{"a": [1, {"b": "x', '"}]}'),
    (Constraint.gbnf(ARITHMETIC), "12 + (3 * (4", "))"),
    (Constraint.gbnf(ARITHMETIC), "12 +", " 0"),
    (Constraint.regex(r"[a-z]+@[a-z]+\.(com|org)"), "bob@", "a.com"),
], ids=["schema", "json", "brackets", "operator", "regex"])  # fmt: skip
def test_the_shortest_completion_is_found(model, constraint, written, shortest):
    p = processor(model, constraint)
    walk(p, model, written)
    singles = single_byte_tokens(token_bytes_cached(model.tokenizer))
    c = shortest_completion(p.matcher, p.lt, singles, p.n_vocab)
    assert c is not None
    assert len(c.data) == len(shortest), c.data  # as short as the hand-written one
    probe = p.matcher.deep_copy()
    assert probe.consume_tokens(list(c.tokens)) and probe.is_accepting()
    assert p.lt.decode_bytes(list(c.tokens)) == c.data


# -- generation: every budget ends in a whole value ---------------------------------------------


@pytest.mark.parametrize("budget", [14, 20, 27, 35, 48])
def test_a_schema_value_completes_within_every_budget(model, budget):
    chat = model.chat()
    chat.ingest("Make up a person, with many hobbies and a long address.")
    r = chat.complete(temperature=0.8, seed=budget, json_schema=PERSON, max_tokens=budget)
    assert r.usage.completion_tokens <= budget
    assert r.finish_reason in (FinishReason.GRAMMAR, FinishReason.STOP_TOKEN, FinishReason.LENGTH)
    jsonschema.validate(json.loads(r.text), PERSON)
    assert not r.summary.incomplete


@pytest.mark.parametrize("budget", [9, 16, 23, 31])
def test_a_gbnf_value_completes_within_every_budget(model, budget):
    chat = model.chat()
    chat.ingest("Write a very long sum: 101 + 102 + 103 + and so on, with brackets.")
    r = chat.complete(temperature=0.7, seed=budget, grammar=Constraint.gbnf(ARITHMETIC), max_tokens=budget)
    assert r.usage.completion_tokens <= budget and not r.summary.incomplete
    assert is_arithmetic(r.text), r.text


def test_a_budget_below_the_shortest_value_is_an_error_before_any_token(model):
    s = model.new_session(n_ctx=256)
    s.append_text("A person:")
    with pytest.raises(GrammarBudgetError, match=r"takes \d+ tokens.*may write 3.*max-tokens"):
        s.generate(json_schema=PERSON, max_tokens=3)
    r = s.generate(json=True, temperature=0, max_tokens=3)  # {} fits in 3
    assert json.loads(r.text) == {} or isinstance(json.loads(r.text), dict)


def test_a_stop_string_still_leaves_the_value_incomplete(model):
    s = model.new_session(n_ctx=256)
    s.append_text("JSON:")
    r = s.generate(json=True, temperature=0, max_tokens=40, stop=["{"])
    assert r.finish_reason == FinishReason.STOP_STRING and r.incomplete


# -- --json: no key twice, no blank lines ------------------------------------------------------------


def guarded(model, text):
    """What the grammar allows after ``text``, and what it allows with the key guard applied."""
    p = processor(model, Constraint.json())
    walk(p, model, text)
    ok = p.allowed().copy()
    c = Candidates(logits=np.zeros(p.n_vocab, np.float32))
    p.apply(c, [])
    return ok, np.isfinite(c.logits)


def test_json_objects_take_no_key_twice(model):
    tok = model.tokenizer
    closing = [t for t in range(tok.n_vocab) if tok.token_to_piece(t).startswith(b'"')]  # ", ": "} ...
    for key in ("name", "age"):
        ok, allowed = guarded(model, '{"name": "Bob", "age": 3, "' + key)
        assert ok[closing].any() and not allowed[closing].any(), key  # the grammar would close it; the guard does not
        assert allowed[tok.encode("s", add_special=False)[0]]  # a longer key that starts the same is fine
    ok, allowed = guarded(model, '{"name": "Bob", "age": 3, "nick')
    assert allowed[closing].any()  # another key closes
    ok, allowed = guarded(model, '{"name": {"name": "x"}, "a": [{"name')  # each object has its own keys
    assert allowed[closing].any()


def test_json_whitespace_has_no_blank_lines(model):
    p = processor(model, Constraint.json())
    walk(p, model, '{"a":')
    tok = model.tokenizer
    ok = p.allowed()
    blank = [t for t in range(tok.n_vocab) if b"\n\n" in tok.token_to_piece(t) or tok.token_to_piece(t) == b"\n \n"]
    assert blank and not ok[blank].any()
    assert ok[tok.encode(" ", add_special=False)[0]]
