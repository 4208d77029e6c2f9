"""How a grammar's mask reaches the sampler: packed, applied only where the logits are
read (`cera.generation.sampling.Candidates.defer_mask`), greedy's masked argmax without a
masked copy, and constrained generation token for token equal to a plain reference loop
(the session's logits, llguidance's mask unpacked by numpy, np.argmax).
"""

from __future__ import annotations

import numpy as np
import pytest

import cera
from cera.generation.sampling import Candidates, Processor, Sampler, SamplingOptions, all_finite, apply_packed_mask
from cera.grammar import Constraint, GrammarProcessor

MODEL = "smollm2-135m-instruct-q4_1"


def pack(ok: np.ndarray) -> np.ndarray:
    """Booleans as llguidance's mask: a bit per id, little-endian u32 words."""
    words = np.zeros((len(ok) + 31) // 32 * 32, bool)
    words[: len(ok)] = ok
    return np.packbits(words, bitorder="little").view(np.int32)


def reference(x: np.ndarray, ok: np.ndarray, n: int) -> np.ndarray:
    allowed = np.zeros(len(x), bool)
    allowed[: min(n, len(x))] = ok[: min(n, len(x))]
    return np.where(allowed, x, np.float32(-np.inf)).astype(np.float32)


def cases(rng):
    """Logits and masks: random, sparse, dense, top excluded, ties, nothing allowed."""
    for trial in range(200):
        v = int(rng.integers(1, 300))
        x = rng.normal(size=v).astype(np.float32)
        if trial % 4 == 0:
            x = np.round(x).astype(np.float32)  # many ties
        density = (0.0, 0.01, 0.5, 0.99, 1.0)[trial % 5]
        ok = rng.random(v) < density
        if trial % 7 == 0:
            ok[int(np.argmax(x))] = False  # the best token is excluded
        n = v if trial % 3 else int(rng.integers(0, v + 1))  # the mask may cover fewer ids than the logits
        yield x, ok, n


def test_deferred_mask_equals_a_masked_copy():
    rng = np.random.default_rng(0)
    for trial, (x, ok, n) in enumerate(cases(rng)):
        want = reference(x, ok, n)
        c = Candidates(logits=x, shared=True)
        if trial % 2:  # banned ids as well (BanTokens), the best one among them at times
            banned = rng.integers(0, len(x), int(rng.integers(1, 4)))
            if trial % 6 == 1:
                banned[0] = int(np.argmax(x))
            c.exclude(banned)
            want[banned] = -np.inf
        c.defer_mask(pack(ok[:n]), n)
        assert c.argmax() == int(np.argmax(want))
        for t in range(len(x)):
            assert c.value_at(t) == want[t]
        np.testing.assert_array_equal(c.logits, want)
        np.testing.assert_array_equal(x, x.copy())  # the shared array is never written
        y = x.copy()
        apply_packed_mask(y, pack(ok[:n]), n)
        np.testing.assert_array_equal(y, reference(x, ok, n))


def test_shared_logits_are_copied_before_a_write():
    x = np.arange(5, dtype=np.float32)
    c = Candidates(logits=x, shared=True)
    c.logits[0] = -np.inf
    assert x[0] == 0 and c.logits[0] == -np.inf


def test_finiteness_checks_equal_numpy():
    rng = np.random.default_rng(1)
    for trial in range(300):
        x = rng.normal(size=int(rng.integers(1, 50))).astype(np.float32)
        for _ in range(trial % 4):
            x[int(rng.integers(len(x)))] = (np.nan, np.inf, -np.inf)[int(rng.integers(3))]
        assert all_finite(x) == bool(np.isfinite(x).all())
        c = Candidates(logits=x, shared=True)
        assert c.has_nan() == bool(np.isnan(x).any())
    assert all_finite(np.zeros(0, np.float32))


class _Mask(Processor):
    """A fixed mask, deferred (as the grammar processor leaves it) or applied at once."""

    def __init__(self, ok: np.ndarray, deferred: bool):
        self.ok, self.deferred = ok, deferred

    def apply(self, c, history):
        if self.deferred:
            c.defer_mask(pack(self.ok), len(self.ok))
        else:
            np.copyto(c.logits, -np.inf, where=~self.ok)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_chain_with_a_deferred_mask_chooses_as_with_a_masked_copy(temperature):
    rng = np.random.default_rng(2)
    for trial in range(60):
        v = 200
        x = rng.normal(size=v).astype(np.float32) * 3
        ok = rng.random(v) < (0.02, 0.5, 1.0)[trial % 3]
        ok[int(rng.integers(v))] = True
        history = rng.integers(0, v, 10).tolist()
        options = SamplingOptions(temperature=temperature, repeat_penalty=1.1 if trial % 2 else 1.0, seed=trial)
        a = Sampler(options, extra=[_Mask(ok, True)], banned=[3]).choose(Candidates(logits=x, shared=True), history)
        b = Sampler(options, extra=[_Mask(ok, False)], banned=[3]).choose(Candidates(logits=x.copy()), history)
        assert a == b


@pytest.fixture(scope="module")
def model():
    return cera.load(MODEL, device="cpu", threads=2)


JSON_LINES = r"""
start: (record "\n")+
record: %json {"type": "object", "properties": {"name": {"type": "string"}, "note": {"type": "string"}}, "required": ["name", "note"]}
"""


def reference_decode(model, constraint: Constraint, prompt: str, n: int) -> list[int]:
    """Greedy constrained decoding written plainly: llguidance's mask over the session's
    logits, end-of-generation tokens banned (ignore_eos)."""
    import llguidance

    from cera.grammar.vocab import ll_tokenizer

    n_vocab = model.model.n_vocab
    lt = ll_tokenizer(model.tokenizer, n_vocab)
    m = llguidance.LLMatcher(lt, constraint.compile(model.tokenizer, n_vocab), log_level=0)
    s = model.new_session(n_ctx=512)
    s.append_text(prompt)
    out = []
    for _ in range(n):
        x = np.array(s.evaluate(), np.float32)
        bits = np.unpackbits(np.frombuffer(m.compute_bitmask(), np.uint8), bitorder="little", count=n_vocab).astype(bool)
        x[: len(bits)] = np.where(bits, x[: len(bits)], -np.inf)
        x[list(model.tokenizer.eog_ids)] = -np.inf
        t = int(np.argmax(x))
        assert m.consume_token(t)
        out.append(t)
        s.append_tokens([t])
        if m.is_stopped():
            break
    return out


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("kind", ["json_lines", "gbnf"])
def test_constrained_greedy_equals_a_plain_loop(model, kind, overlap):
    if kind == "json_lines":
        constraint = Constraint.lark(JSON_LINES)
    else:
        constraint = Constraint.gbnf('root ::= ("- " [a-z ]+ "\\n")+\n')
    prompt = "A list of people with a note on each, one a line:\n"
    n = 48
    want = reference_decode(model, constraint, prompt, n)
    s = model.new_session(n_ctx=512)
    s.append_text(prompt)
    p = GrammarProcessor(constraint, model.tokenizer, model.model.n_vocab, overlap=overlap)
    r = s.generate(max_tokens=n, temperature=0, ignore_eos=True, processors=[p])
    assert r.tokens == want
    assert len(want) == n  # the grammar never ends: every step was masked


def test_constrained_sequences_batched_decode_their_tokens_alone(model):
    """Through a scheduler (one forward pass for all rows, each session's grammar masking
    its own row, its next mask computed during the shared pass), each sequence's tokens
    are those it gives alone."""
    grammar = 'root ::= ("- " [a-z ]+ "\\n")+\n'
    prompts = ["Fruits, one a line:\n", "Colours, one a line:\n", "Animals, one a line:\n"]
    n = 20
    alone = []
    for p in prompts:
        s = model.new_session(n_ctx=256)
        s.append_text(p)
        alone.append(s.generate(max_tokens=n, temperature=0, ignore_eos=True, grammar=grammar).tokens)
    want = reference_decode(model, Constraint.gbnf(grammar), prompts[0], n)
    assert alone[0] == want
    scheduler = model.scheduler(n_slots=3, n_ctx=256)
    together = scheduler.generate_many(prompts, max_tokens=n, temperature=0, ignore_eos=True, grammar=grammar)
    assert [r.tokens for r in together] == alone
    assert max(scheduler.rows_per_batch) == 3, scheduler.rows_per_batch


def test_a_costly_hand_over_leaves_the_mask_to_the_sampler(model):
    """While handing masks to the worker costs more than computing them, `apply` computes
    them (no worker), trying the worker again every HANDOFF_PROBE masks; the masks are
    the same either way."""
    from cera.grammar import processor

    c = Constraint.gbnf('root ::= ("- " [a-z ]+ "\\n")+\n')
    tokens = model.tokenizer.encode("- apples and pears\n- plums\n- figs\n" * 3, add_special=False)
    p = GrammarProcessor(c, model.tokenizer, model.model.n_vocab, overlap=True)
    q = GrammarProcessor(c, model.tokenizer, model.model.n_vocab, overlap=False)
    handed = []
    for t in tokens:
        np.testing.assert_array_equal(p.allowed(), q.allowed())
        p._handoff_cost, p._mask_cost = 1.0, 0.0  # a hand-over dearer than any mask
        p.accept(t)
        q.accept(t)
        handed.append(p._future is not None)
    # the first mask went to the worker when the processor was made; then each accept's
    probes = [k % processor.HANDOFF_PROBE == 0 for k in range(2, len(tokens) + 2)]
    assert handed == probes and any(handed)
