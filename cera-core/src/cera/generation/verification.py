"""Verifying a draft in one pass: the queued tokens and the drafted ones go through the
model together, every row computed as a one-token step would compute it
(`Layout.exact_rows`), so each row's output is what plain decoding would have seen there.
The strategies that draft (`cera.generation.prompt_lookup`, `cera.generation.draft_model`)
verify here and keep what the rules below accept; `keep` cuts the rest away.

Two rules decide how much of a draft is kept:

- greedy (`verify_greedy`): the draft tokens equal to the model's own argmax, then the
  model's argmax after them. The output is plain greedy decoding's, token for token.
- speculative sampling (`speculative_accept`; Leviathan, Kalman and Matias 2023; Chen et
  al. 2023): draft token x, drawn from the drafter's distribution q, is kept with
  probability min(1, p(x) / q(x)), p being the model's distribution at its row; the first
  token refused is replaced by one drawn from max(0, p - q), normalised; when every draft
  token is kept, one more is drawn from p after them. Each token so comes out distributed
  as the model's own p, whatever q is.
"""

from __future__ import annotations

import numpy as np

from ..graph.builder import Outputs

ALL_ARGMAX = Outputs(("argmax",), rows="all")


def verify(session, draft: list[int], outputs: Outputs) -> tuple[dict, int, int]:
    """Evaluate the queue and ``draft`` in one exact-rows pass, returning ``outputs`` for
    every row. Returns (the outputs, the tokens the state held before, the number of
    queued tokens before the draft). Row ``n_queued - 1 + i`` is the model's output after
    draft token i - 1 (i = 0: after the queue), the row that judges draft token i."""
    s = session
    n_before, n_queued = len(s.tokens), len(s.pending)
    batch = s.pending + draft
    out = s._forward(batch, outputs, exact_rows=True)
    s.tokens.extend(batch)
    s.pending = []
    s.n_evaluated += len(batch)
    return out, n_before, n_queued


def keep(session, n_before: int, n_queued: int, accepted: int) -> int:
    """Keep the queue and the first ``accepted`` draft tokens of a verified pass; the state
    is cut back past the rest. Returns the row of the last kept token's output."""
    s = session
    n = n_before + n_queued + accepted
    if n < len(s.tokens):
        s.state.truncate(s.slot, n)
        del s.tokens[n:]
    return n_queued - 1 + accepted


def verify_greedy(session, draft: list[int]) -> tuple[int, int]:
    """Verify ``draft`` reading back one argmax per row and keep the run the model agrees
    with. Returns (draft tokens accepted, the model's choice after them); the session's
    last output is that choice, and the accepted tokens are evaluated."""
    s = session
    out, n_before, n_queued = verify(s, draft, ALL_ARGMAX)
    choice = [int(t) for t in out["argmax"].reshape(-1)]
    accepted = 0
    while accepted < len(draft) and choice[n_queued - 1 + accepted] == draft[accepted]:
        accepted += 1
    after = choice[keep(s, n_before, n_queued, accepted)]
    s.last = {"argmax": after}
    return accepted, after


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """max(0, p - q), normalised: what a refused draft token is replaced from (p itself
    where p and q are equal, which then refuses nothing)."""
    r = np.maximum(p - q, 0.0)
    total = r.sum()
    return r / total if total > 0 else p


def draw(rng: np.random.Generator, p: np.ndarray) -> int:
    """A token drawn from ``p`` (float64 probabilities; normalised here)."""
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(p) - 1))


def speculative_accept(p_rows, q_rows, draft: list[int], rng: np.random.Generator) -> tuple[int, int]:
    """The speculative sampling rule (see the module docstring). ``p_rows[i]``: the model's
    distribution judging draft token i (``len(draft) + 1`` rows: the last follows the whole
    draft); ``q_rows[i]``: the distribution draft token i was drawn from. Returns (draft
    tokens accepted, the token after them)."""
    for i, x in enumerate(draft):
        p, q = p_rows[i], q_rows[i]
        if p[x] >= q[x] or rng.random() * q[x] < p[x]:
            continue
        return i, draw(rng, residual(p, q))
    return len(draft), draw(rng, p_rows[len(draft)])


__all__ = ["ALL_ARGMAX", "draw", "keep", "residual", "speculative_accept", "verify", "verify_greedy"]
