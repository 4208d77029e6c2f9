"""Verifying a draft in one pass: the queued tokens and the drafted ones go through the
model together, every row computed as a one-token step would compute it
(`Layout.exact_rows`), so each row's output is what plain decoding would have seen there.
The strategies that draft (`cera.generation.prompt_lookup`, `cera.generation.draft_model`)
decide from those rows how much of the draft to keep; `keep` cuts the rest away."""

from __future__ import annotations

from ..graph.builder import Outputs


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


__all__ = ["keep", "verify"]
