"""The speculative sampling rule (`cera.generation.verification.speculative_accept`) keeps
the target's distribution, whatever the draft's: checked by chi-square tests with fixed
seeds against the target's own probabilities, on small random vocabularies, and shown to
catch a rule that is subtly wrong. `Sampler.distribution`, which both sides of the rule use,
is the distribution `Sampler.sample` draws from."""

from __future__ import annotations

import numpy as np
import pytest

from cera.generation.sampling import Sampler, SamplingOptions
from cera.generation.verification import draw, residual, speculative_accept

V = 5  # vocabulary of the synthetic tests
N = 40_000


def chi2_critical(df: int, z: float = 3.29) -> float:
    """The chi-square quantile at the normal quantile z (3.29: p = 0.0005), by the
    Wilson-Hilferty approximation (good to a few percent for df >= 3)."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * np.sqrt(a)) ** 3


def chi2(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic of ``counts`` against ``probs``, and its degrees of freedom
    (cells of expected count below 5 pooled out of the test, as usual)."""
    n = counts.sum()
    expected = probs * n
    ok = expected >= 5
    stat = float((((counts - expected) ** 2)[ok] / expected[ok]).sum())
    return stat, int(ok.sum()) - 1


def _dists(rng, n: int, concentration: float = 1.0) -> np.ndarray:
    return rng.dirichlet(np.full(V, concentration), size=n)


def _run(rule, seed: int = 7):
    """N rounds of a two-token draft: returns the first emitted token of each round, and
    (first, second) for the rounds that kept the first draft token."""
    rng = np.random.default_rng(seed)
    p0 = _dists(rng, 1)[0]
    p1 = _dists(rng, V)  # the target's next distribution depends on the token before
    p2 = _dists(rng, 1)[0]
    q0, q1 = _dists(rng, 2, 0.5)  # a draft that disagrees with the target
    draft_rng, judge_rng = np.random.default_rng(seed + 1), np.random.default_rng(seed + 2)
    first = np.zeros(V, np.int64)
    second = np.zeros((V, V), np.int64)
    for _ in range(N):
        x0, x1 = draw(draft_rng, q0), draw(draft_rng, q1)
        accepted, after = rule([p0, p1[x0], p2], [q0, q1], [x0, x1], judge_rng)
        out = [x0, x1][:accepted] + [after]
        first[out[0]] += 1
        if accepted >= 1:
            second[out[0], out[1]] += 1
    return (p0, p1, q0), first, second


def _check(rule, seed: int = 7) -> tuple[float, float, float, float]:
    (p0, p1, q0), first, second = _run(rule, seed)
    stat1, df1 = chi2(first, p0)
    stat2 = df2 = 0
    for a in range(V):
        if second[a].sum() > 50:
            s, d = chi2(second[a], p1[a])
            stat2, df2 = stat2 + s, df2 + d
    return stat1, chi2_critical(df1), stat2, chi2_critical(df2)


@pytest.mark.parametrize("seed", [7, 11])
def test_the_rule_keeps_the_target_distribution(seed):
    stat1, crit1, stat2, crit2 = _check(speculative_accept, seed)
    assert stat1 < crit1, f"first token: chi-square {stat1:.1f} >= {crit1:.1f}"
    assert stat2 < crit2, f"second token: chi-square {stat2:.1f} >= {crit2:.1f}"


def test_the_check_can_fail():
    """The same check rejects the draft's distribution and a rule that replaces a refused
    token from p instead of max(0, p - q)."""
    (p0, _, q0), first, _ = _run(speculative_accept)
    stat, df = chi2(first, q0)
    assert stat > 10 * chi2_critical(df)

    def from_p(p_rows, q_rows, draft, rng):
        for i, x in enumerate(draft):
            p, q = p_rows[i], q_rows[i]
            if p[x] >= q[x] or rng.random() * q[x] < p[x]:
                continue
            return i, draw(rng, p)
        return len(draft), draw(rng, p_rows[len(draft)])

    stat1, crit1, _, _ = _check(from_p)
    assert stat1 > crit1


def test_residual_is_the_normalised_positive_part():
    rng = np.random.default_rng(3)
    p, q = _dists(rng, 2)
    r = np.clip(p - q, 0, None)
    np.testing.assert_allclose(residual(p, q), r / r.sum(), rtol=1e-12)
    np.testing.assert_array_equal(residual(p, p), p)  # nothing is refused where they are equal
    # the rule's closed form: kept with min(p, q), replaced from the residual otherwise, is p
    kept = np.minimum(p, q)
    np.testing.assert_allclose(kept + (1 - kept.sum()) * residual(p, q), p, rtol=1e-12)


def test_one_hot_distributions_give_the_greedy_rule():
    """Greedy decoding's distributions are one-hot: the rule keeps the draft tokens equal to
    the target's argmax and then takes the target's argmax, whatever the random numbers."""
    eye = np.eye(V)
    target = [3, 1, 4, 0]
    cases = {(3, 1, 4): (3, 0), (3, 2, 4): (1, 1), (0, 1, 4): (0, 3), (3,): (1, 1)}
    for draft, expected in cases.items():
        p_rows = [eye[t] for t in target[: len(draft) + 1]]
        q_rows = [eye[t] for t in draft]
        for seed in range(5):
            assert speculative_accept(p_rows, q_rows, list(draft), np.random.default_rng(seed)) == expected


@pytest.mark.parametrize(
    "options",
    [
        SamplingOptions(temperature=0.7, top_k=8, top_p=0.9, min_p=0.02, seed=5),
        SamplingOptions(temperature=1.3, top_k=0, top_p=1.0, min_p=0.0, seed=6),
        SamplingOptions(temperature=1.0, top_k=0, top_p=0.8, min_p=0.0, repeat_penalty=1.3, seed=7),
    ],
)
def test_distribution_is_what_the_sampler_draws_from(options):
    rng = np.random.default_rng(1)
    logits = (rng.standard_normal(24) * 2).astype(np.float32)
    history = [1, 2, 3, 5, 8]
    p = Sampler(options).distribution(logits, history, 24)
    assert p.dtype == np.float64 and abs(p.sum() - 1) < 1e-12
    sampler = Sampler(options)
    counts = np.bincount([sampler.sample(logits, history) for _ in range(20_000)], minlength=24)
    assert counts[p == 0].sum() == 0  # the cuts: nothing outside them is ever drawn
    stat, df = chi2(counts, p)
    assert stat < chi2_critical(max(df, 3))


def test_distribution_pads_and_cuts_a_vocabulary_of_another_size():
    s = Sampler(SamplingOptions(temperature=0.0))
    logits = np.array([0.0, 3.0, 1.0, 9.0], np.float32)
    np.testing.assert_array_equal(s.distribution(logits, [], 3), [0, 1, 0])  # id 3 is beyond the target's vocabulary
    np.testing.assert_array_equal(s.distribution(logits, [], 6), [0, 0, 0, 1, 0, 0])
