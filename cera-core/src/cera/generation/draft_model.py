"""Speculative decoding with a draft model.

A smaller model of the same vocabulary (the draft, attached with
`cera.engine.LoadedModel.set_draft`) proposes up to ``draft_max`` tokens, one cheap step
each, on its own session; the target verifies them all in one exact-rows pass and keeps
what the rules of `cera.generation.verification` accept: under greedy decoding the output
is plain greedy decoding's, token for token; under sampling each token is distributed as
the target's own sampling chain (penalties, banned tokens, top-k, top-p, min-p,
temperature) would draw it, the draft's distribution q being what the same chain makes of
the draft's logits. The same seed repeats a speculative run; it does not repeat a plain
one (the random numbers are used differently).

The draft's session holds the conversation as the target's does: before each round it is
synced to the target's tokens (`Session.sync_tokens`), which cuts its state back past the
tokens the target refused, and follows a restored checkpoint, a reset or a context shift
the same way. A session of a scheduler drafts on a scheduler of the draft model with as
many slots (`Scheduler.draft_scheduler`), so that concurrent sequences share the draft's
state safely.

A draft stops early where its confidence (the probability it gives its token) falls below
``draft_p_min``; a draft shorter than ``draft_min`` tokens is not verified (the token is
evaluated plainly).

The draft proposes from the first ``draft_vocab`` token ids only, where its family and
backend can limit its output head (`Model.limits_vocab`, `Backend.weight_row_prefix`):
its head then computes those rows of its weight alone. BPE and SentencePiece vocabularies
number their tokens roughly by frequency, so the tokens a model writes are nearly all
among the first ones, and the head is the largest product of a small draft: for
Qwen2.5-Coder-0.5B (a 151,936-token head of width 896 in Q8_0) it is 40% of a decode step
(15.8 of 39.8 ms of CPU time, one thread), and 4 of the 1.5B's 128 greedy tokens on
benchmarks/bench_draft.py's code request lie beyond id 32,768. What the target keeps is
unchanged: greedy output stays plain decoding's, and under sampling q is the distribution
the draft token was drawn from (zero beyond the limit), which the acceptance rule corrects.
"""

from __future__ import annotations

import numpy as np

from ..errors import IncompatibleDraft, InvalidOptions
from ..graph.builder import ALL_LOGITS, LAST_LOGITS, NONE, Outputs
from .decode_step import Draw, Halt, Stepper
from .sampling import BanTokens, Penalties
from .sink import FinishReason
from .verification import draw, keep, speculative_accept, verify, verify_greedy

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
    """The draft model's session beside ``session`` (made on first use, of the same size;
    on the draft's scheduler when ``session`` belongs to a scheduler)."""
    draft = session.loaded.draft
    d = session.draft_session
    if d is not None and d.loaded is draft and d.n_ctx >= session.n_ctx:
        return d
    if d is not None:
        d.close()
    if session.scheduler is not None:
        d = session.scheduler.draft_scheduler().new_session()
    else:
        d = draft.new_session(n_ctx=session.n_ctx, n_batch=session.n_batch)
    session.draft_session = d
    return d


def _confidence(logits: np.ndarray) -> float:
    """The probability softmax(logits) gives its largest logit."""
    x = np.asarray(logits, np.float64)
    return float(1.0 / np.exp(x - x.max()).sum())


class DraftSpeculation:
    """Drafting on the draft model's session and verification on the target's (see the
    module docstring). ``drafted`` and ``accepted`` count the draft tokens verified and kept."""

    def __init__(self, session, options, sampler):
        draft = session.loaded.draft
        if draft is None:
            raise InvalidOptions("draft-model speculation needs a draft model: attach one with set_draft (-md/--model-draft)")
        stateful = [m for m in sampler.masks if not isinstance(m, (Penalties, BanTokens))]  # grammars, tool calls
        if options.wants_logprobs or options.constrained or stateful:
            raise InvalidOptions(
                "speculative decoding with a draft model does not report log-probabilities or follow grammars, "
                "schemas, regular expressions or other sampling processors; leave those out, or set draft_max=0 "
                "(--draft-max 0) for plain decoding"
            )
        if options.draft_min > options.draft_max:
            raise InvalidOptions(f"draft_min ({options.draft_min}) must not exceed draft_max ({options.draft_max})")
        self.s = session
        self.sampler = sampler
        self.n_vocab = int(session.model.n_vocab)
        self.max, self.min, self.p_min = options.draft_max, max(1, options.draft_min), options.draft_p_min
        self.greedy = sampler.options.greedy
        self.argmax_only = self.greedy and not sampler.masks  # the target reads back one id per row
        # the draft's own random numbers, independent of those that accept or refuse its tokens
        self.rng = np.random.Generator(np.random.PCG64(int(sampler.rng.integers(2**63))))
        self.d = draft_session(session)
        head = min(options.draft_vocab, self.n_vocab)
        can = draft.model.limits_vocab and draft.backend.weight_row_prefix
        self.head = head if can and 0 < head < int(draft.model.n_vocab) else 0
        self.out = Outputs(("logits",), vocab=self.head) if self.head else LAST_LOGITS
        self.drafted = self.accepted = 0
        self.d.sync_tokens(session.tokens)  # the prompt, evaluated before the first token
        self.d._evaluate(NONE)

    def propose(self, history: list[int], room: int) -> tuple[list[int], list[np.ndarray]]:
        """Up to ``room`` draft tokens after ``history``, with the distributions they were
        drawn from (one-hot under greedy decoding; None where only argmaxes are compared)."""
        d = self.d
        d.sync_tokens(history)
        if not d.pending and (d.last is None or "logits" not in d.last):
            d._refresh_last(self.out)
        if d.pending:
            d._evaluate(self.out)
        d._snapshot_here()  # recurrent state: the next round's rewind restores this point
        tokens: list[int] = []
        dists: list[np.ndarray] = []
        while len(tokens) < room:
            if d.pending:
                d._evaluate(self.out)
            logits = d.last["logits"]  # the first self.head ids' where the head is limited
            if self.argmax_only:  # the rows judge by argmax alone: no distribution needed
                q = None
                x = int(np.argmax(logits[: self.n_vocab]))
                sure = _confidence(logits) if self.p_min > 0 else 1.0
            elif self.greedy:
                q = self.sampler.distribution(logits, history + tokens, self.n_vocab)
                x = int(np.argmax(q))
                sure = _confidence(logits) if self.p_min > 0 else 1.0
            else:
                q = self.sampler.distribution(logits, history + tokens, self.n_vocab)
                x = draw(self.rng, q)
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
            accepted, after = verify_greedy(s, draft)
        else:
            out, n_before, n_queued = verify(s, draft, ALL_LOGITS)
            rows = out["logits"].reshape(len(draft) + n_queued, -1)[n_queued - 1 :]
            if not np.isfinite(rows).all():
                keep(s, n_before, n_queued, 0)
                return Halt(FinishReason.ERROR, (
                    f"the model's logits at position {len(s.tokens) - 1} are not finite: its weights or "
                    f"hyperparameters are broken"
                ))  # fmt: skip
            ps = [self.sampler.distribution(rows[i], history + draft[:i], self.n_vocab) for i in range(len(draft) + 1)]
            if self.greedy:  # one-hot rows: the model's argmax, as plain decoding takes it
                accepted = 0
                while accepted < len(draft) and ps[accepted][draft[accepted]] == 1.0:
                    accepted += 1
                after = int(np.argmax(ps[accepted]))
            else:
                accepted, after = speculative_accept(ps, dists, draft, self.sampler.rng)
            keep(s, n_before, n_queued, accepted)
            s.last = {"logits": rows[accepted].copy()}  # the row after the last kept token
        self.drafted += len(draft)
        self.accepted += accepted
        return draft[:accepted], after


def draft_model_speculation(step: Stepper, spec: DraftSpeculation):
    """Offer the first token as plain decoding does; then, with the newest token queued,
    run a round: offer the accepted draft tokens (already evaluated) and the token after
    them (queued by the loop), and go on. Where no draft is verified the queued token is
    evaluated plainly and the next one drawn."""
    s = step.session
    while True:
        first = step.draw()
        yield first
        if isinstance(first, Halt):
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


__all__ = ["MAX_VOCAB_SIZE_DIFFERENCE", "DraftSpeculation", "check_vocabularies", "draft_model_speculation", "draft_session"]
