"""Speculative decoding with prompt lookup.

Draft the tokens that followed the last occurrence of the newest n-gram in the context,
verify them in one pass whose every row computes as a one-token step would
(`cera.generation.verification`), keep the run the model agrees with. The output is the greedy
output, token for token.
"""

from __future__ import annotations

import numpy as np

from .decode_step import Draw, Halt, Stepper
from ..errors import InvalidOptions
from .sink import FinishReason
from .verification import verify_greedy


class PromptLookup:
    """Drafting and verification on one session (see the module docstring)."""

    def __init__(self, session, options, sampler):
        if not sampler.options.greedy or sampler.masks or options.wants_logprobs:
            raise InvalidOptions(
                "speculative decoding (spec) gives exactly the greedy output, so it needs greedy decoding "
                "(temperature 0) without penalties, banned tokens, grammars or log-probabilities"
            )
        if not session.model.state.rewindable:
            raise InvalidOptions("speculative decoding needs state that can be rewound; this model has recurrent layers")
        if options.spec_ngram < 1 or options.spec_k < 1:
            raise InvalidOptions(f"spec_ngram and spec_k must be >= 1, got {options.spec_ngram} and {options.spec_k}")
        self.s = session
        self.ngram = options.spec_ngram
        self.k = options.spec_k
        self.drafted = self.accepted = 0

    def draft(self, history: list[int], room: int) -> list[int]:
        """The tokens that followed the latest earlier occurrence of history's last n-gram
        (the longest n from spec_ngram down to 1 that occurs)."""
        h = np.asarray(history, np.int64)
        for n in range(min(self.ngram, len(h) - 1), 0, -1):
            tail = h[-n:]
            # windows of n ending before the last position, latest first
            windows = np.lib.stride_tricks.sliding_window_view(h[:-1], n)
            hits = np.nonzero((windows == tail).all(axis=1))[0]
            if len(hits):
                start = int(hits[-1]) + n
                return h[start : start + min(self.k, room)].tolist()
        return []

    def step(self, left: int | None) -> list[int] | None:
        """With the newest token queued: draft, verify, keep what the model agrees with.
        Returns the accepted draft tokens (evaluated; the session's last output is the
        model's choice after them), or None when there was nothing to draft."""
        s = self.s
        room = s.n_ctx - len(s.tokens) - len(s.pending) - 1
        if left is not None:
            room = min(room, left - 1)
        draft = self.draft(s.tokens + s.pending, room) if room > 0 else []
        if not draft:
            return None
        accepted, _ = verify_greedy(s, draft)
        self.drafted += len(draft)
        self.accepted += accepted
        return draft[:accepted]


def prompt_lookup(step: Stepper, lookup: PromptLookup):
    """Offer drawn tokens as plain decoding does; after each, verify a draft, and offer the
    accepted draft tokens (already evaluated) before drawing again."""
    s = step.session
    queued: list[int] = []  # accepted draft tokens: the model's own greedy choices, evaluated
    while True:
        if queued:
            if s.cancelled:
                yield Halt(FinishReason.CANCELLED)
                return
            token = queued.pop(0)
            yield Draw(token, cell=len(s.tokens) - len(queued) - 1)
            if not s.pending:
                continue
            queued = []  # the loop shifted the context: the token is queued again, the rest are gone
        else:
            draw = step.draw()
            yield draw
            if isinstance(draw, Halt):
                return
        accepted = lookup.step(step.left())
        step.drafted, step.accepted = lookup.drafted, lookup.accepted
        if accepted is not None:
            queued = accepted
            continue
        if not (yield from step.evaluate()):
            yield Halt(FinishReason.CANCELLED)
            return


__all__ = ["PromptLookup", "prompt_lookup"]
