"""Sampling: each filter against a hand-derived expectation, and seeded reproducibility."""

import numpy as np
import pytest

from cera.generation.sampling import Sampler, SamplingOptions, apply_repeat_penalty


def draws(options, logits, n=4000, history=()):
    s = Sampler(options)
    return np.bincount([s.sample(logits, history) for _ in range(n)], minlength=len(logits))


def test_greedy_takes_argmax_at_zero_temperature():
    logits = np.array([0.1, 2.0, 1.9, -5.0], dtype=np.float32)
    assert Sampler(SamplingOptions(temperature=0.0)).sample(logits) == 1
    assert Sampler(SamplingOptions(temperature=1.0, top_k=1)).sample(logits) == 1


def test_repeat_penalty_divides_positive_and_multiplies_negative_logits():
    logits = np.array([2.0, -2.0, 3.0, 1.0], dtype=np.float32)
    apply_repeat_penalty(logits, [0, 1, 1], penalty=2.0, last_n=64)
    np.testing.assert_array_equal(logits, [1.0, -4.0, 3.0, 1.0])


def test_repeat_penalty_only_looks_at_last_n_tokens():
    logits = np.array([2.0, 2.0, 2.0], dtype=np.float32)
    apply_repeat_penalty(logits, [0, 1, 2], penalty=2.0, last_n=1)
    np.testing.assert_array_equal(logits, [2.0, 2.0, 1.0])


def test_repeat_penalty_changes_the_greedy_choice():
    logits = np.array([3.0, 2.0], dtype=np.float32)
    assert Sampler(SamplingOptions(temperature=0, repeat_penalty=2.0)).sample(logits, history=[0]) == 1


def test_top_k_keeps_only_the_k_best():
    logits = np.array([0.0, 1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    counts = draws(SamplingOptions(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0, seed=1), logits)
    assert counts[:3].sum() == 0
    # Between the two survivors the odds are e^(4-3) = 2.718.
    assert counts[4] / counts[3] == pytest.approx(np.e, rel=0.12)


def test_top_p_keeps_the_smallest_set_reaching_p():
    # probabilities 0.5, 0.3, 0.2 (logits are their logs)
    logits = np.log(np.array([0.5, 0.3, 0.2])).astype(np.float32)
    counts = draws(SamplingOptions(temperature=1.0, top_k=0, top_p=0.75, min_p=0.0, seed=2), logits)
    assert counts[2] == 0  # 0.5 + 0.3 >= 0.75: the third token is cut
    assert counts[0] / counts[1] == pytest.approx(0.5 / 0.3, rel=0.1)


def test_min_p_cuts_tokens_below_a_fraction_of_the_best():
    logits = np.log(np.array([0.6, 0.3, 0.1])).astype(np.float32)
    counts = draws(SamplingOptions(temperature=1.0, top_k=0, top_p=1.0, min_p=0.2, seed=3), logits)
    assert counts[2] == 0  # 0.1 < 0.2 * 0.6
    assert counts[1] > 0


def test_temperature_sharpens_the_distribution_as_derived():
    logits = np.array([1.0, 0.0], dtype=np.float32)
    counts = draws(SamplingOptions(temperature=0.5, top_k=0, top_p=1.0, min_p=0.0, seed=4), logits, n=6000)
    expected = 1.0 / (1.0 + np.exp(-2.0))  # softmax([2, 0])[0]
    assert counts[0] / counts.sum() == pytest.approx(expected, abs=0.02)


def test_the_same_seed_gives_the_same_draws_and_another_seed_does_not():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=1000).astype(np.float32)
    opts = SamplingOptions(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=42)
    a = [Sampler(opts).sample(logits) for _ in range(1)] + [Sampler(opts).sample(logits) for _ in range(1)]
    seq1 = [s for s in (lambda s: [s.sample(logits) for _ in range(50)])(Sampler(opts))]
    seq2 = [s for s in (lambda s: [s.sample(logits) for _ in range(50)])(Sampler(opts))]
    other = SamplingOptions(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=43)
    seq3 = [s for s in (lambda s: [s.sample(logits) for _ in range(50)])(Sampler(other))]
    assert a[0] == a[1]
    assert seq1 == seq2
    assert seq1 != seq3


def test_banned_tokens_are_never_drawn():
    logits = np.array([5.0, 0.0, 0.0], dtype=np.float32)
    s = Sampler(SamplingOptions(temperature=0.0))
    assert s.sample(logits, banned={0}) in (1, 2)


@pytest.mark.parametrize(
    "kw",
    [{"top_k": -1}, {"top_p": 0.0}, {"top_p": 1.5}, {"min_p": -0.1}, {"repeat_penalty": 0.0}],
)
def test_bad_options_are_rejected(kw):
    with pytest.raises(ValueError):
        SamplingOptions(**kw)


# -- the processor chain ----------------------------------------------------------------------


def test_presence_and_frequency_penalties_subtract_as_openai_defines():
    from cera.generation.sampling import Candidates, Penalties

    logits = np.array([1.0, 1.0, 1.0, 1.0], dtype=np.float32)
    c = Candidates(logits=logits.copy())
    Penalties(presence=0.5, frequency=0.25, last_n=-1).apply(c, [1, 1, 3])
    np.testing.assert_allclose(c.logits, [1.0, 1.0 - 0.5 - 0.5, 1.0, 1.0 - 0.5 - 0.25])


def test_what_the_chain_needs_from_the_device():
    from cera.generation.sampling import NEEDS_ARGMAX, NEEDS_LOGITS, NEEDS_TOP_K

    assert Sampler(SamplingOptions(temperature=0)).needs() == (NEEDS_ARGMAX, 0)
    assert Sampler(SamplingOptions(temperature=0.7, top_k=20)).needs() == (NEEDS_TOP_K, 20)
    assert Sampler(SamplingOptions(temperature=0.7, top_k=0)).needs() == (NEEDS_LOGITS, 0)
    assert Sampler(SamplingOptions(temperature=0, repeat_penalty=1.1)).needs() == (NEEDS_LOGITS, 0)
    # banned tokens (ignore_eos): the best allowed ones are among the top k + (number banned)
    assert Sampler(SamplingOptions(temperature=0), banned=[2, 7, 2]).needs() == (NEEDS_TOP_K, 3)
    assert Sampler(SamplingOptions(temperature=0.7, top_k=20), banned=[2]).needs() == (NEEDS_TOP_K, 21)
    assert Sampler(SamplingOptions(temperature=0.7, top_k=0), banned=[2]).needs() == (NEEDS_LOGITS, 0)


def test_banned_tokens_from_a_top_k_read_back_choose_what_the_full_logits_choose():
    """Greedy and top-k sampling with banned tokens, from the k ids and values the device's
    top_k returns, pick exactly what they pick from all logits: the banned tokens on top,
    ties for greedy (the lower id wins, as argmax), every draw of a seeded sampler (no ties
    at the cut there: the full-logits top-k takes any of tied tokens, as llama.cpp's)."""
    from cera.graph.ops import top_k
    from cera.generation.sampling import Candidates

    rng = np.random.default_rng(5)
    for trial in range(200):
        logits = rng.normal(size=64).astype(np.float32)
        if trial % 3 == 0 and trial % 2:
            logits = np.round(logits, 1)  # many ties (greedy)
        banned = [int(i) for i in np.argsort(-logits)[: trial % 4]] + [63]  # often the best ones
        opts = SamplingOptions(temperature=0) if trial % 2 else SamplingOptions(temperature=0.8, top_k=5, seed=trial)
        full, cut = Sampler(opts, banned=banned), Sampler(opts, banned=banned)
        need, k = cut.needs()
        ids = top_k(None, logits[None, :], k=k)[0].astype(np.int64)
        for _ in range(3):
            want = full.choose(Candidates(logits=logits.copy()), [])
            got = cut.choose(Candidates(ids=ids.copy(), values=logits[ids].astype(np.float64)), [])
            assert got == want, (trial, banned, k)


def test_the_device_top_k_gives_the_draws_of_the_full_logits():
    """Sampling from the top k ids and values a graph returns draws exactly what sampling
    from all logits draws (same seed, no ties at the cut)."""
    from cera.generation.sampling import Candidates

    rng = np.random.default_rng(7)
    logits = rng.standard_normal(500).astype(np.float32) * 3
    opts = SamplingOptions(temperature=0.9, top_k=30, top_p=0.9, min_p=0.02, seed=11)
    full, part = Sampler(opts), Sampler(opts)
    ids = np.argsort(-logits, kind="stable")[:30]
    for _ in range(200):
        a = full.choose(Candidates(logits=logits.copy()), [])
        b = part.choose(Candidates(ids=ids.astype(np.int64), values=logits[ids].astype(np.float64)), [])
        assert a == b


def test_a_mask_processor_plugs_into_the_chain():
    """A grammar is one more processor: it masks logits and hears which token was chosen."""
    from cera.generation.sampling import Processor

    class OnlyEven(Processor):
        def __init__(self):
            self.seen = []

        def apply(self, c, history):
            c.logits[1::2] = -np.inf

        def accept(self, token):
            self.seen.append(token)

    mask = OnlyEven()
    s = Sampler(SamplingOptions(temperature=1.0, seed=3), extra=[mask])
    logits = np.zeros(10, np.float32)
    logits[7] = 10.0
    picks = [s.sample(logits) for _ in range(50)]
    assert all(p % 2 == 0 for p in picks) and mask.seen == picks


def test_log_probabilities_of_the_chosen_tokens(smollm2_path):
    import cera
    from cera.generation.sampling import log_softmax_at

    m = cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    s = m.new_session(n_ctx=64)
    s.append_text("Hello")
    logits = s.evaluate().copy()
    events = list(s.events(max_tokens=1, temperature=0, logprobs=True, top_logprobs=3))
    first = events[0]
    assert first.logprob == pytest.approx(float(log_softmax_at(logits, [first.id])[0]), abs=1e-9)
    assert [t for t, _ in first.top_logprobs][0] == first.id == int(np.argmax(logits))
    assert events[-1].summary.logprobs == [first.logprob]
