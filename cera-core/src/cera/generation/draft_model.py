"""Speculative decoding with a draft model.

A smaller model of the same vocabulary (the draft, attached with
`cera.engine.LoadedModel.set_draft`) proposes up to ``draft_max`` tokens, one cheap step
each, on its own session; the target verifies them all in one exact-rows pass
(`cera.generation.verification`) and keeps the run it accepts. The draft's session holds
the conversation as the target does: before each round it is synced to the target's
tokens, which cuts its state back past the tokens the target refused.

Greedy decoding: the draft proposes its argmax, the target keeps the draft tokens equal
to its own argmax and then adds its own choice, so the output is plain greedy decoding's,
token for token.

Sampling: the speculative sampling rule (Leviathan, Kalman and Matias 2023; Chen et al.
2023). A draft token x drawn from the draft's distribution q is kept with probability
min(1, p(x) / q(x)), p being the target's distribution at that row; the first token
refused is replaced by one drawn from max(0, p - q), normalised; when every draft token
is kept, one more is drawn from p after them. Each token so comes out distributed as the
target's own p. Both p and q are what the generation's sampling chain (penalties, banned
tokens, top-k, top-p, min-p, temperature: `cera.generation.sampling`) makes of each
model's logits. The same seed repeats a speculative run; it does not repeat a plain one
(the random numbers are used differently).

A draft stops early where its confidence (the probability it gives its token) falls below
``draft_p_min``; a draft shorter than ``draft_min`` tokens is not verified (the token is
evaluated plainly).
"""

from __future__ import annotations

import numpy as np

from ..errors import IncompatibleDraft, InvalidOptions, SessionError
from ..graph.builder import ALL_LOGITS, LAST_LOGITS, NONE, Outputs
from .decode_step import Draw, Halt, Stepper
from .sampling import Candidates
from .sink import FinishReason
from .verification import keep, verify

# Vocabularies may differ in size by this many tokens (llama.cpp's speculative example
# allows 128: padding rows and a few added specials), their common ids being the same tokens.
MAX_VOCAB_SIZE_DIFFERENCE = 128


def check_vocabularies(target, draft) -> None:
    """Raise IncompatibleDraft unless ``draft`` (a loaded model) proposes tokens that mean
    the same to ``target``: the same tokenizer kind, the same text for every common id,
    the same BOS and EOS, sizes within MAX_VOCAB_SIZE_DIFFERENCE."""
    a, b = target.tokenizer, draft.tokenizer
    names = f"the draft model {draft.name!r} and the target {target.name!r}"
    fix = "use a draft model of the target's family (the same tokenizer)"
    if a.kind != b.kind:
        raise IncompatibleDraft(f"{names} have different tokenizers ({b.kind} and {a.kind}); {fix}")
    if abs(a.n_vocab - b.n_vocab) > MAX_VOCAB_SIZE_DIFFERENCE or abs(target.model.n_vocab - draft.model.n_vocab) > MAX_VOCAB_SIZE_DIFFERENCE:
        raise IncompatibleDraft(
            f"{names} have vocabularies of {b.n_vocab} and {a.n_vocab} tokens (more than "
            f"{MAX_VOCAB_SIZE_DIFFERENCE} apart); {fix}"
        )
    for slot in ("bos", "eos"):
        x, y = getattr(b, f"{slot}_id"), getattr(a, f"{slot}_id")
        if x != y:
            raise IncompatibleDraft(f"{names} have different {slot.upper()} tokens ({x} and {y}); {fix}")
    ta, tb = a.vocab.tokens, b.vocab.tokens
    n = min(len(ta), len(tb))
    if ta[:n] != tb[:n]:
        i = next(i for i in range(n) if ta[i] != tb[i])
        raise IncompatibleDraft(f"{names} differ at token {i} ({tb[i]!r} and {ta[i]!r}); {fix}")


def draft_session(session):
    """The draft model's session beside ``session`` (made on first use, of the same size)."""
    draft = session.loaded.draft
    d = session.draft_session
    if d is None or d.loaded is not draft or d.n_ctx < session.n_ctx:
        d = draft.new_session(n_ctx=session.n_ctx, n_batch=session.n_batch)
        session.draft_session = d
    return d


def probabilities(sampler, logits: np.ndarray, history, n_vocab: int) -> np.ndarray:
    """The distribution ``sampler``'s chain draws from, given ``logits``: float64 over
    ``n_vocab`` ids (one-hot at the choice for greedy decoding)."""
    x = np.full(n_vocab, -np.inf, np.float32)
    m = min(n_vocab, logits.shape[-1])
    x[:m] = logits[:m]  # a larger draft vocabulary's extra ids are never proposed
    c = Candidates(logits=x)
    for p in sampler.masks:
        p.apply(c, history)
    out = np.zeros(n_vocab, np.float64)
    if sampler.options.greedy:
        out[int(np.argmax(c.logits))] = 1.0
        return out
    for p in sampler.cuts:
        p.apply(c, history)
    ok = np.isfinite(c.values)
    ids, values = c.ids[ok], c.values[ok]
    if not len(ids):
        raise SessionError("every token is excluded (banned or masked): nothing to sample")
    w = np.exp(values - values.max())
    out[ids] = w / w.sum()
    return out


def _draw(rng, p: np.ndarray) -> int:
    """A token drawn from p (float64, summing to about 1)."""
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(p) - 1))


def _confidence(logits: np.ndarray) -> float:
    """The probability softmax(logits) gives its largest logit."""
    x = np.asarray(logits, np.float64)
    return float(1.0 / np.exp(x - x.max()).sum())


class DraftSpeculation:
    """Drafting on the draft model's session and verification on the target's (see the
    module docstring)."""

    def __init__(self, session, options, sampler):
        if session.loaded.draft is None:
            raise InvalidOptions("draft-model speculation needs a draft model: attach one with set_draft (--model-draft)")
        if options.wants_logprobs or options.constrained:
            raise InvalidOptions(
                "speculative decoding with a draft model does not report log-probabilities or follow grammars, "
                "schemas or regular expressions; leave those out, or set draft_max=0 (--draft-max 0) for plain decoding"
            )
        if options.draft_min > options.draft_max:
            raise InvalidOptions(f"draft_min ({options.draft_min}) must not exceed draft_max ({options.draft_max})")
        if not 0.0 <= options.draft_p_min <= 1.0:
            raise InvalidOptions(f"draft_p_min must be in [0, 1], got {options.draft_p_min}")
        for what, loaded in (("target", session.loaded), ("draft", session.loaded.draft)):
            if not loaded.model.state.rewindable:
                raise InvalidOptions(
                    f"speculative decoding needs state that can be rewound; the {what} model "
                    f"{loaded.name!r} has recurrent layers"
                )
        self.s = session
        self.sampler = sampler
        self.n_vocab = int(session.model.n_vocab)
        self.max, self.min, self.p_min = options.draft_max, max(1, options.draft_min), options.draft_p_min
        self.greedy = sampler.options.greedy
        self.argmax_only = self.greedy and not sampler.masks  # the target reads back one id per row
        # the draft's own random numbers, independent of those that accept or refuse its tokens
        self.rng = np.random.Generator(np.random.PCG64(int(sampler.rng.integers(2**63))))
        self.d = draft_session(session)
        self.drafted = self.accepted = 0
        self.d.sync_tokens(session.tokens)  # the prompt, evaluated before the first token
        self.d._evaluate(NONE)

    def propose(self, history: list[int], room: int) -> tuple[list[int], list[np.ndarray]]:
        """Up to ``room`` draft tokens after ``history``, with the distributions they were
        drawn from."""
        d = self.d
        d.sync_tokens(history)
        tokens: list[int] = []
        dists: list[np.ndarray] = []
        while len(tokens) < room:
            d._evaluate(LAST_LOGITS)
            logits = d.last["logits"]
            q = probabilities(self.sampler, logits, history + tokens, self.n_vocab)
            if self.greedy:
                x = int(np.argmax(q))
                sure = _confidence(logits) if self.p_min > 0 else 1.0
            else:
                x = _draw(self.rng, q)
                sure = float(q.max())
            if sure < self.p_min:
                break
            tokens.append(x)
            dists.append(q)
            d.pending.append(x)
        return tokens, dists

    def round(self, left: int | None):
        """With the newest token queued: draft, verify, keep what the rule accepts.
        Returns (the accepted draft tokens, evaluated; the token after them, not
        evaluated), a Halt for a broken model, or None when no draft was verified."""
        s = self.s
        room = min(self.max, s.n_ctx - len(s.tokens) - len(s.pending) - 1)
        if left is not None:
            room = min(room, left - 1)
        if room < self.min:
            return None
        history = s.tokens + s.pending
        draft, dists = self.propose(history, room)
        if len(draft) < self.min:
            return None
        if self.argmax_only:
            out, n_before, n_queued = verify(s, draft, Outputs(("argmax",), rows="all"))
            choice = [int(t) for t in out["argmax"].reshape(-1)]
            accepted = 0
            while accepted < len(draft) and choice[n_queued - 1 + accepted] == draft[accepted]:
                accepted += 1
            after = choice[keep(s, n_before, n_queued, accepted)]
            s.last = {"argmax": after}
        else:
            out, n_before, n_queued = verify(s, draft, ALL_LOGITS)
            rows = out["logits"].reshape(len(draft) + n_queued, -1)
            if not np.isfinite(rows).all():
                keep(s, n_before, n_queued, 0)
                return Halt(FinishReason.ERROR, (
                    f"the model's logits at step {len(s.tokens) - n_before} (position {len(s.tokens) - 1}) are not "
                    f"finite: its weights or hyperparameters are broken"
                ))  # fmt: skip
            accepted, after = self._judge(rows[n_queued - 1 :], draft, dists, history)
            s.last = {"logits": rows[keep(s, n_before, n_queued, accepted)].copy()}
        self.drafted += len(draft)
        self.accepted += accepted
        return draft[:accepted], after

    def _judge(self, rows: np.ndarray, draft: list[int], dists, history) -> tuple[int, int]:
        """The speculative sampling rule over the target's ``rows`` (row i judges draft
        token i; the last row follows the whole draft): (tokens accepted, the next token)."""
        rng = self.sampler.rng
        for i, x in enumerate(draft):
            p = probabilities(self.sampler, rows[i], history + draft[:i], self.n_vocab)
            q = dists[i]
            if self.greedy:
                if p[x] == 1.0:
                    continue
                return i, int(np.argmax(p))
            if p[x] >= q[x] or rng.random() * q[x] < p[x]:
                continue
            residual = np.maximum(p - q, 0.0)
            return i, _draw(rng, residual if residual.sum() > 0 else p)
        p = probabilities(self.sampler, rows[len(draft)], history + draft, self.n_vocab)
        return len(draft), int(np.argmax(p)) if self.greedy else _draw(rng, p)


def draft_model_speculation(step: Stepper, spec: DraftSpeculation):
    """Offer the first token as plain decoding does; then, with the newest token queued,
    run a round: offer the accepted draft tokens (already evaluated) and the token after
    them (queued by the loop), and go on. Where no draft is verified the queued token is
    evaluated plainly and the next one drawn."""
    s = step.session
    while True:
        draw = step.draw()
        yield draw
        if isinstance(draw, Halt):
            return
        while True:
            result = spec.round(step.left())
            step.drafted, step.accepted = spec.drafted, spec.accepted
            if result is None:
                if not (yield from step.evaluate()):
                    yield Halt(FinishReason.CANCELLED)
                    return
                break
            if isinstance(result, Halt):
                yield result
                return
            accepted, after = result
            shifted = False
            for i, token in enumerate(accepted):
                if s.cancelled:
                    yield Halt(FinishReason.CANCELLED)
                    return
                yield Draw(token, cell=len(s.tokens) - len(accepted) + i)
                if s.pending:  # the loop shifted the context: this token is queued again, the rest are gone
                    shifted = True
                    break
            if shifted:
                continue
            if s.cancelled:
                yield Halt(FinishReason.CANCELLED)
                return
            yield Draw(after)


__all__ = ["MAX_VOCAB_SIZE_DIFFERENCE", "DraftSpeculation", "check_vocabularies", "draft_model_speculation", "probabilities"]
