"""Plain decoding: one token per step, sampled from the last output, then evaluated."""

from __future__ import annotations

from .decode_step import Halt, Stepper
from .sink import FinishReason


def plain_decoding(step: Stepper):
    """Offer a token drawn from the last output; once the loop takes it (it is queued),
    evaluate it and go on. Ends with a `Halt`, or when the loop stops asking."""
    while True:
        draw = step.draw()
        yield draw
        if isinstance(draw, Halt):
            return
        if not (yield from step.evaluate()):
            yield Halt(FinishReason.CANCELLED)
            return


__all__ = ["plain_decoding"]
