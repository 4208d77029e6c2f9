"""Sampling: each filter against a hand-derived expectation, and seeded reproducibility."""

import numpy as np
import pytest

from cera.sampling import Sampler, SamplingOptions, apply_repeat_penalty


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
