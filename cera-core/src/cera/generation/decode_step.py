"""The step every generation strategy shares: draw a token from the last output, and
evaluate what is queued.

A `Stepper` holds what a generation decided at its start (the sampler with its
processors, the tokens that end it, what each pass reads back) and what it has produced
so far. Strategies (`cera.generation.plain_decoding`, `cera.generation.prompt_lookup`,
`cera.generation.draft_model`) are generators over it
that offer tokens as `Draw`s (or end with a `Halt`); the generation loop
(`cera.generation.loop`) decides whether each token ends the generation.
"""

from __future__ import annotations

import attrs
import numpy as np

from ..graph.builder import LAST_LOGITS, Outputs
from .lockstep import evaluate_in_lockstep
from .sampling import NEEDS_ARGMAX, NEEDS_LOGITS, NEEDS_TOP_K, Candidates, Sampler, all_finite, log_softmax_at
from .sink import FinishReason

_OUTPUTS = {NEEDS_ARGMAX: Outputs(("argmax",)), NEEDS_LOGITS: LAST_LOGITS}
# Greedy decoding reads back one integer per token; every this many tokens it reads the
# logits instead, so that a model computing NaN or infinities is noticed (the prompt's
# last position, and every step of sampling, are always checked).
FINITE_CHECK_EVERY = 16


@attrs.frozen
class Draw:
    """A token a strategy offers. ``cell`` None: sampled from the last output, not yet
    evaluated; else a verified draft token, already evaluated in that cell."""

    token: int
    logprob: float | None = None
    top: tuple | None = None
    cell: int | None = None


@attrs.frozen
class Halt:
    """A strategy's end before its next token (cancelled, or the model's output broken)."""

    reason: FinishReason
    error: str | None = None


class Stepper:
    """One generation's sampler and the step function over it (see the module docstring).
    ``lockstep``: queued tokens are evaluated by a driver (`cera.generation.lockstep`)."""

    def __init__(self, session, options, processors, lockstep: bool = False):
        self.session = session
        self.options = options
        self.lockstep = lockstep
        eog = set(session.tokenizer.eog_ids) | set(options.stop_tokens)
        if options.ignore_eos:
            eog = set(options.stop_tokens)
        self.eog = eog
        if options.constrained:  # a grammar, schema, JSON or regex: one more processor (cera.grammar)
            from ..grammar import processor_for

            room = None if options.context_shift else session.n_ctx - len(session.tokens) - len(session.pending)
            processors = [*processors, processor_for(options, session.tokenizer, session.model.n_vocab, room)]
        banned = session.tokenizer.eog_ids if options.ignore_eos else ()
        self.sampler = Sampler(options.sampling(), extra=processors, banned=banned)
        needs, k = self.sampler.needs()
        if options.wants_logprobs or (needs == NEEDS_TOP_K and k >= session.model.n_vocab):
            needs, k = NEEDS_LOGITS, 0
        self.needs = needs
        self.want = Outputs(("top_k",), k=k) if needs == NEEDS_TOP_K else _OUTPUTS[needs]
        self.generated: list[int] = []
        self.logprobs: list[float] = []
        self.drafted = self.accepted = 0  # draft tokens verified and kept (prompt lookup, a draft model)

    def left(self) -> int | None:
        """Tokens the generation may still produce (None: no limit)."""
        limit = self.options.max_tokens
        return None if limit is None else limit - len(self.generated)

    def finished(self) -> bool:
        """A processor says nothing more may follow (a complete grammar)."""
        return any(p.finished() for p in self.sampler.processors)

    def incomplete(self) -> bool:
        return any(p.incomplete() for p in self.sampler.processors)

    # -- the step -------------------------------------------------------------------------------

    def draw(self) -> Draw | Halt:
        """The next token, chosen from the session's last output."""
        s = self.session
        if s.cancelled:
            return Halt(FinishReason.CANCELLED)
        c = _candidates(s.last)
        broken = _not_finite(s.last, c)
        if broken:
            return Halt(FinishReason.ERROR, (
                f"the model's logits at step {len(self.generated)} (position {len(s.tokens) - 1}) are not "
                f"finite ({broken}): its weights or hyperparameters are broken"
            ))  # fmt: skip
        token = self.sampler.choose(c, s.tokens + s.pending)
        logprob, top = _logprobs(s.last, token, self.options)
        return Draw(token, logprob, top)

    def evaluate(self):
        """Evaluate what is queued (a generator: in lockstep it yields the driver's
        `cera.generation.lockstep.DecodeStep`); returns False when cancelled."""
        want = self.want
        if self.needs != NEEDS_LOGITS and len(self.generated) % FINITE_CHECK_EVERY == 0:
            want = LAST_LOGITS  # the periodic look at the logits (FINITE_CHECK_EVERY)
        if self.lockstep and len(self.session.pending) == 1:
            return (yield from evaluate_in_lockstep(self.session, want))
        return self.session._evaluate(want)


def has_output(last: dict, needs: int) -> bool:
    """Whether the kept output of the last position serves a sampler that ``needs`` it."""
    if "logits" in last:
        return True
    if needs == NEEDS_ARGMAX:
        return "argmax" in last
    return False


def _not_finite(last: dict | None, c: Candidates | None = None) -> str | None:
    """What is wrong with the logits (or top-k values) read back, or None: they are finite,
    or only an argmax was read back. ``c``: the candidates made of them (its argmax serves)."""
    values = last.get("logits") if last else None
    if values is None and last and "top_k" in last:
        values = last["top_k"][1]
    if values is None:
        return None
    if all_finite(values, c.top() if c is not None and c.full else None):
        return None
    finite = np.isfinite(values)
    nan = int(np.isnan(values).sum())
    return f"{nan} NaN and {values.size - int(finite.sum()) - nan} infinite of {values.size} values"


def _candidates(last: dict) -> Candidates:
    if "logits" in last:
        return Candidates(logits=last["logits"], shared=True)  # copied only if a processor writes to it
    if "top_k" in last:
        ids, vals = last["top_k"]
        return Candidates(ids=ids.copy(), values=vals.copy())
    token = last["argmax"]
    return Candidates(ids=np.array([token], np.int64), values=np.zeros(1))


def _logprobs(last: dict, token: int, options):
    if not options.wants_logprobs or "logits" not in last:
        return None, None
    logits = last["logits"]
    lp = float(log_softmax_at(logits, [token])[0])
    top = None
    if options.top_logprobs:
        k = min(options.top_logprobs, logits.shape[0])
        ids = np.argsort(-logits, kind="stable")[:k]
        top = tuple(zip((int(i) for i in ids), (float(v) for v in log_softmax_at(logits, ids)), strict=True))
    return lp, top


__all__ = ["FINITE_CHECK_EVERY", "Draw", "Halt", "Stepper", "has_output"]
