"""Speculative decoding with a draft model (`cera.generation.draft_model`) on real models.

The target is SmolLM2-135M; its drafts are the same model (which the target always
agrees with: every draft token is accepted) and SmolLM2 cut to its first layers
(`draft_files.truncated_smollm2`: the same vocabulary, a draft the target refuses now and
then). With greedy decoding every generation must give plain decoding's tokens, and leave
the session as plain decoding leaves it; with sampling, the target's distribution is
checked against its own probabilities. The Qwen2.5-Coder 1.5B/0.5B pair (the same
tokenizer) is the slow real pair."""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest

import cera
from cera.errors import IncompatibleDraft, InvalidOptions, ShapeError, UnsupportedOperation
from cera.generation.sampling import Sampler, SamplingOptions
from cera.graph.builder import Outputs
from cera.generation.sink import FinishReason
from draft_files import truncated_smollm2

DRAFT_LAYERS = 26
N = 48  # tokens generated per greedy comparison

CODE = "Write a Python function that returns the n-th Fibonacci number, with a docstring:\n"
PROSE = "The history of the printing press begins"


@pytest.fixture(scope="module")
def target(smollm2_path):
    m = cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    yield m
    m.close()


@pytest.fixture(scope="module")
def weak(smollm2_path):
    m = cera.load(str(truncated_smollm2(smollm2_path, DRAFT_LAYERS)), device="cpu", threads=2, quiet=True)
    yield m
    m.close()


@contextlib.contextmanager
def drafting(target, draft):
    target.set_draft(draft)
    try:
        yield
    finally:
        target.set_draft(None)


def _greedy(m, prompt, n, n_ctx=512, **kw):
    s = m.new_session(n_ctx=n_ctx)
    s.append_text(prompt)
    return s, s.generate(max_tokens=n, temperature=0, **kw)


@pytest.fixture(scope="module")
def plain(target):
    """Plain greedy decoding of each prompt: (summary, session tokens, pending, follow-up tokens)."""
    out = {}
    for prompt in (CODE, PROSE):
        s, summary = _greedy(target, prompt, N)
        held = (list(s.tokens), list(s.pending))
        out[prompt] = (summary, held, s.generate(max_tokens=12, temperature=0).tokens)
    return out


@pytest.mark.parametrize("which", ["weak", "self"])
@pytest.mark.parametrize("draft_max, p_min", [(16, 0.75), (4, 0.0)])
def test_greedy_tokens_are_plain_decodings(target, weak, plain, which, draft_max, p_min):
    draft = weak if which == "weak" else target
    for prompt, (summary, held, more) in plain.items():
        # the whole vocabulary where the target must agree with itself on every token (a
        # draft limited to the first ids cannot propose the others)
        vocab = 0 if which == "self" and p_min == 0 else 32768
        with drafting(target, draft):
            s, spec = _greedy(target, prompt, N, draft_max=draft_max, draft_p_min=p_min, draft_vocab=vocab)
            assert spec.tokens == summary.tokens and spec.finish_reason == summary.finish_reason
            assert 0 < spec.accepted <= spec.drafted
            if which == "self" and p_min == 0:
                assert spec.accepted == spec.drafted  # the target agrees with itself on every token
            # the session holds what plain decoding's holds: a follow-up gives the same tokens
            assert (s.tokens, s.pending) == held
            assert s.generate(max_tokens=12, temperature=0).tokens == more
        assert summary.drafted == 0


def test_a_limited_head_computes_the_first_rows_of_the_full_one(target):
    """Outputs.vocab: the head's first rows alone, bit for bit the full head's (each row is
    its own dot product)."""
    s = target.new_session(n_ctx=64)
    s.append_text(PROSE)
    ids = list(s.pending)
    full = s._forward(ids, Outputs(("logits",)))["logits"].reshape(-1)
    s.state.truncate(s.slot, 0)
    part = s._forward(ids, Outputs(("logits",), vocab=1000))["logits"].reshape(-1)
    assert part.shape == (1000,) and full.shape == (target.model.n_vocab,)
    assert np.array_equal(part, full[:1000])


def test_a_limited_head_is_refused_where_the_backend_cannot_read_a_weights_first_rows(target, monkeypatch):
    s = target.new_session(n_ctx=64)
    s.append_text(PROSE)
    monkeypatch.setattr(target.backend, "weight_row_prefix", False)
    with pytest.raises(UnsupportedOperation, match="whole vocabulary only"):
        s._forward(list(s.pending), Outputs(("logits",), vocab=999))  # a graph not compiled before
    with pytest.raises(ShapeError, match="non-negative"):
        Outputs(("logits",), vocab=-1)


def test_a_draft_limited_to_few_ids_keeps_plain_decodings_tokens(target, plain):
    """The target drafting for itself from its first 2,000 ids: tokens beyond them are never
    proposed, so some drafts are refused, and the output is still plain decoding's."""
    summary = plain[CODE][0]
    assert max(summary.tokens) >= 2000  # the output needs a token the draft cannot propose
    with drafting(target, target):
        _, spec = _greedy(target, CODE, N, draft_p_min=0.0, draft_vocab=2000)
    assert spec.tokens == summary.tokens
    assert 0 < spec.accepted < spec.drafted


def test_a_weak_draft_is_refused_now_and_then(target, weak):
    with drafting(target, weak):
        _, spec = _greedy(target, CODE, 60, draft_p_min=0.0)
    assert 0 < spec.accepted < spec.drafted


def test_penalties_and_banned_tokens_keep_plain_decodings_tokens(target, weak):
    kw = dict(repeat_penalty=1.3, ignore_eos=True)
    _, plain = _greedy(target, PROSE, 40, **kw)
    with drafting(target, weak):
        _, spec = _greedy(target, PROSE, 40, draft_p_min=0.0, **kw)
    assert spec.tokens == plain.tokens and spec.drafted > 0


def test_stop_strings_end_where_plain_decoding_ends(target, weak):
    prompt = "List the numbers one to five: one, two, three,"
    for n in (1, 2, 3, 7, 20):
        _, plain = _greedy(target, prompt, n, stop=[" five"])
        with drafting(target, weak):
            s, spec = _greedy(target, prompt, n, stop=[" five"], draft_p_min=0.0)
        assert (spec.tokens, spec.text, spec.finish_reason) == (plain.tokens, plain.text, plain.finish_reason)
    assert plain.finish_reason == FinishReason.STOP_STRING


def test_checkpoints_files_and_resets_follow_the_target(target, weak, tmp_path):
    plain_s, _ = _greedy(target, PROSE, 16)
    cp = plain_s.checkpoint()
    a = plain_s.generate(max_tokens=16, temperature=0).tokens
    plain_s.restore(cp)
    assert plain_s.generate(max_tokens=16, temperature=0).tokens == a
    with drafting(target, weak):
        s, _ = _greedy(target, PROSE, 16, draft_p_min=0.0)
        cp = s.checkpoint()
        s.save(tmp_path / "s.ckpt")
        assert s.generate(max_tokens=16, temperature=0, draft_p_min=0.0).tokens == a
        s.restore(cp)  # the draft's session is ahead of the target's now: it is cut back to follow
        assert s.generate(max_tokens=16, temperature=0, draft_p_min=0.0).tokens == a
        t = target.new_session(n_ctx=512)
        t.load(tmp_path / "s.ckpt")
        assert t.generate(max_tokens=16, temperature=0, draft_p_min=0.0).tokens == a
        s.reset()
        s.append_text(CODE)
        after_reset = s.generate(max_tokens=20, temperature=0, draft_p_min=0.0)
        assert s.draft_session is not None
    assert after_reset.tokens == _greedy(target, CODE, 20)[1].tokens


def test_a_context_shift_keeps_plain_decodings_tokens(target, weak):
    kw = dict(ignore_eos=True, context_shift=True, n_keep=8, n_ctx=96)
    plain_s, plain = _greedy(target, PROSE, 150, **kw)
    with drafting(target, weak):
        s, spec = _greedy(target, PROSE, 150, draft_p_min=0.0, **kw)
    assert plain_s.n_shifted > 0 and s.n_shifted == plain_s.n_shifted
    assert spec.tokens == plain.tokens and spec.drafted > 0


def test_sessions_of_a_scheduler_draft_on_the_drafts_scheduler(target, weak):
    prompts = [CODE, PROSE, "Three facts about owls:"]
    alone = [_greedy(target, p, 30)[1].tokens for p in prompts]
    with drafting(target, weak):
        sched = target.scheduler(n_slots=3, n_ctx=256)
        got: list = [None] * 3
        errors: list = []

        def run(i):
            try:
                s = sched.new_session()
                s.append_text(prompts[i])
                got[i] = s.generate(max_tokens=30, temperature=0, draft_p_min=0.0)
                s.close()
            except Exception as e:  # noqa: BLE001 - raised below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert [g.tokens for g in got] == alone and all(g.drafted > 0 for g in got)
        assert sched.draft_scheduler().state.n_slots == 3
        many = sched.generate_many(prompts, max_tokens=30, temperature=0, draft_p_min=0.0)
        assert [m.tokens for m in many] == alone


def test_the_model_as_its_own_draft_accepts_every_sampled_token(target):
    """Under sampling, a draft equal to the target has q = p: the rule never refuses, and
    the same seed repeats the run."""
    with drafting(target, target):
        runs = []
        for _ in range(2):
            s = target.new_session(n_ctx=256)
            s.append_text(PROSE)
            runs.append(s.generate(max_tokens=40, temperature=0.9, seed=3, ignore_eos=True, draft_p_min=0.0))
    assert runs[0].tokens == runs[1].tokens
    assert runs[0].drafted > 0 and runs[0].accepted == runs[0].drafted


def test_sampling_keeps_the_targets_distribution(target, weak):
    """The token after a fixed first token, over many seeds with the weak draft, against
    the target's own sampling distribution there (chi-square, fixed seeds); the draft's
    distribution there is far from it, so a rule that kept draft tokens would fail."""
    prompt = "The capital of France is"
    opts = dict(temperature=1.0, top_k=5, top_p=1.0, min_p=0.0, ignore_eos=True)
    s = target.new_session(n_ctx=128)
    s.append_text(prompt)
    s.evaluate()
    first = int(np.argmax(s.logits))  # " Paris": the most likely first token
    cp = s.checkpoint()
    sampling = SamplingOptions(**{k: v for k, v in opts.items() if k != "ignore_eos"})
    probe = target.new_session(n_ctx=128)
    probe.append_tokens(s.tokens + [first])
    p = Sampler(sampling).distribution(probe.evaluate(), s.tokens + [first], int(target.model.n_vocab))
    dprobe = weak.new_session(n_ctx=128)
    dprobe.append_tokens(s.tokens + [first])
    q = Sampler(sampling).distribution(dprobe.evaluate(), s.tokens + [first], int(target.model.n_vocab))
    assert 0.5 * np.abs(p - q).sum() > 0.2  # the draft disagrees enough for the test to tell
    counts = np.zeros(len(p), np.int64)
    with drafting(target, weak):
        for seed in range(600):
            s.restore(cp)
            out = s.generate(max_tokens=4, seed=seed, draft_max=2, draft_p_min=0.0, **opts)
            if out.tokens[0] == first:
                counts[out.tokens[1]] += 1
                assert out.drafted > 0
    n = counts.sum()
    assert n > 250
    ok = p * n >= 5
    stat = float((((counts - p * n) ** 2)[ok] / (p * n)[ok]).sum())
    df = int(ok.sum()) - 1
    assert counts[p == 0].sum() == 0
    assert stat < {1: 12.1, 2: 15.2, 3: 17.7, 4: 20.0}[df], (stat, df, counts[ok], p[ok] * n)  # p = 0.0005
    stat_q = float((((counts - q * n) ** 2)[ok] / np.maximum(q * n, 1e-9)[ok]).sum())
    assert stat_q > 100


def test_what_a_draft_cannot_serve_is_refused(target, weak):
    with drafting(target, weak):
        s = target.new_session(n_ctx=128)
        s.append_text("Hi")
        with pytest.raises(InvalidOptions, match="log-probabilities"):
            s.generate(max_tokens=4, temperature=0, logprobs=True)
        with pytest.raises(InvalidOptions, match="grammars"):
            s.generate(max_tokens=4, temperature=0, grammar='root ::= "yes" | "no"')
        with pytest.raises(InvalidOptions, match="draft_min"):
            s.generate(max_tokens=4, temperature=0, draft_max=2, draft_min=3)
        # draft_max=0: plain decoding, which serves them
        assert s.generate(max_tokens=4, temperature=0, logprobs=True, draft_max=0).drafted == 0
    with pytest.raises(InvalidOptions, match="LoadedModel"):
        target.set_draft("a path")


def test_a_draft_of_another_vocabulary_is_refused_naming_both(target, qwen05_path):
    other = cera.load(str(qwen05_path), device="cpu", threads=2, quiet=True)
    try:
        with pytest.raises(IncompatibleDraft) as e:
            target.set_draft(other)
        assert other.name in str(e.value) and target.name in str(e.value)
        assert target.draft is None
    finally:
        other.close()


@pytest.mark.slow
def test_the_qwen_coder_pair_gives_the_greedy_tokens(qwen15_path, qwen05_path):
    big = cera.load(str(qwen15_path), device="cpu", threads=2, quiet=True)
    small = cera.load(str(qwen05_path), device="cpu", threads=2, quiet=True)
    try:
        prompt = "<|im_start|>user\nWrite a Python function that checks whether a string is a palindrome.<|im_end|>\n<|im_start|>assistant\n"
        s = big.new_session(n_ctx=512)
        s.append_text(prompt, parse_special=True)
        plain = s.generate(max_tokens=64, temperature=0)
        big.set_draft(small)
        s = big.new_session(n_ctx=512)
        s.append_text(prompt, parse_special=True)
        spec = s.generate(max_tokens=64, temperature=0)
        assert spec.tokens == plain.tokens
        assert spec.accepted > spec.drafted / 2  # the pair agrees on most of a code answer
    finally:
        big.close()
        small.close()
