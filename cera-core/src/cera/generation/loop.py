"""The generation loop: a strategy offers tokens, the loop decides where generation ends.

A strategy (`cera.generation.plain_decoding`, `cera.generation.prompt_lookup`,
`cera.generation.draft_model`: a session whose model has a draft attached) is a generator over the
session's `cera.generation.decode_step.Stepper` that offers each next token as a `Draw`; resuming
it means the loop took the token and generation goes on. The loop holds the stop rules,
once for every strategy: a stop token, a stop string, a complete grammar, a full context
(or a context shift, when asked for) and the length limit. Whatever ends the generation,
the last token taken is left queued in the session, not evaluated (a follow-up call
evaluates it), as a session that decodes plainly would hold it. In lockstep
(`cera.generation.lockstep`) the strategy's evaluations come out of the loop as `DecodeStep`s for
the driver.
"""

from __future__ import annotations

import time

from .decode_step import Draw, Halt, Stepper
from .draft_model import DraftSpeculation, draft_model_speculation
from ..errors import GenerationError
from .events import EndEvent, GenerationSummary, TokenEvent
from .lockstep import DecodeStep
from .plain_decoding import plain_decoding
from .prompt_lookup import PromptLookup, prompt_lookup
from .sink import FinishReason
from .stop_strings import StopStrings


def stop_reason(step: Stepper, hit: bool, full: bool) -> FinishReason | None:
    """Why generation ends after the token just taken, or None: it goes on."""
    if hit:
        return FinishReason.STOP_STRING
    if step.finished():
        return FinishReason.GRAMMAR  # the grammar is complete: nothing more may follow
    if full:
        return FinishReason.CONTEXT
    left = step.left()
    if left is not None and left <= 0:
        return FinishReason.LENGTH
    return None


def choose_strategy(step: Stepper):
    """Draft-model speculation where the model has a draft attached (unless ``draft_max``
    is 0), prompt lookup under ``spec``, else plain decoding."""
    s, options = step.session, step.options
    if getattr(s.loaded, "draft", None) is not None and options.draft_max > 0:
        return draft_model_speculation(step, DraftSpeculation(s, options, step.sampler))
    if options.spec:
        return prompt_lookup(step, PromptLookup(s, options, step.sampler))
    return plain_decoding(step)


def generate(session, options, processors=(), lockstep: bool = False):
    """The events of one generation on ``session`` (see `cera.generation.session.Session.events`)."""
    s = session
    with s._lock:
        step = Stepper(s, options, processors, lockstep)
        detok = s.tokenizer.detokenizer()
        stops = StopStrings(options.stop)
        text: list[str] = []
        n_prompt = len(s.pending)
        t0 = time.perf_counter()
        reason = None if s._ready_to_generate(step.needs) else FinishReason.CANCELLED
        if reason is None and step.left() is not None and step.left() <= 0:
            reason = FinishReason.LENGTH
        strategy = None if reason is not None else choose_strategy(step)  # a draft model evaluates the prompt too
        t1 = time.perf_counter()
        stop_token = error = None
        if reason is None:
            reason, stop_token, error = yield from _take_tokens(step, strategy, stops, detok, text)
        tail = ""
        if reason != FinishReason.STOP_STRING:
            tail, _ = stops.feed(detok.flush())
            tail += stops.flush()
            if tail:
                text.append(tail)
        t2 = time.perf_counter()
        summary = GenerationSummary(
            tokens=step.generated,
            text="".join(text),
            finish_reason=reason,
            n_prompt_tokens=n_prompt,
            prompt_seconds=t1 - t0,
            generate_seconds=t2 - t1,
            logprobs=step.logprobs if options.wants_logprobs else None,
            drafted=step.drafted,
            accepted=step.accepted,
            incomplete=reason != FinishReason.GRAMMAR and step.incomplete(),
            stop_token=stop_token,
            error=error,
        )
        s.last_summary = summary
        yield EndEvent(summary, tail)


def _take_tokens(step: Stepper, strategy, stops: StopStrings, detok, text: list[str]):
    """Take the strategy's tokens until one ends the generation; returns (reason, the stop
    token, the error)."""
    s, options = step.session, step.options
    try:
        for item in strategy:
            if isinstance(item, DecodeStep):
                yield item  # the driver evaluates it with the other sequences' steps
                continue
            if isinstance(item, Halt):
                return item.reason, None, item.error
            draw: Draw = item
            token, cell = draw.token, draw.cell
            if token in step.eog:
                if cell is not None:  # as plain decoding would hold it: the token not evaluated
                    s._drop_cells_from(cell)
                    s.last = {"argmax": token}
                return FinishReason.STOP_TOKEN, token, None
            step.generated.append(token)
            if draw.logprob is not None:
                step.logprobs.append(draw.logprob)
            piece, hit = stops.feed(detok.feed(token))
            if piece:
                text.append(piece)
            yield TokenEvent(token, piece, draw.logprob, draw.top)
            full = len(s.tokens) + len(s.pending) + (0 if cell is not None else 1) > s.n_ctx
            if full and options.context_shift and not hit:
                if cell is not None:
                    s._drop_cells_from(cell)
                s._shift_context(options.n_keep)
                full, cell = False, None
            reason = stop_reason(step, hit, full)
            if cell is None or reason is not None:
                if cell is not None:
                    s._drop_cells_from(cell)
                s.pending.append(token)
            if reason is not None:
                return reason, None, None
    finally:
        strategy.close()
    raise GenerationError("the generation strategy ended without a reason")  # pragma: no cover


__all__ = ["choose_strategy", "generate", "stop_reason"]
