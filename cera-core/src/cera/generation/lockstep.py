"""Lockstep batching: a session's decode step evaluated by a driver with other sessions'.

`cera.generation.scheduler.Scheduler.generate_many` runs several sessions' generations from one
thread. Each session's generation (`Session.lockstep_events`) yields a `DecodeStep`
where it would evaluate its next token alone; the driver gathers the steps of every
sequence still generating, runs their rows as one forward pass, and hands each its row
of the outputs (`DecodeStep.finish`). A step left unfinished ends that generation as
cancelled.
"""

from __future__ import annotations

import attrs

from ..graph.builder import Outputs
from .runtime import SeqStep


@attrs.define(eq=False)
class DecodeStep:
    """One sequence's decode step for the driver: its batch ``row`` and the outputs it
    wants; ``finish`` gives it its row of the batch's outputs."""

    row: SeqStep
    want: Outputs
    result: dict | None = None
    done: bool = False

    def finish(self, out: dict) -> None:
        self.result, self.done = out, True


def evaluate_in_lockstep(session, want: Outputs):
    """Evaluate the session's one queued token through the driver (a generator that
    yields the `DecodeStep`); returns False when the driver left it undone."""
    session._check_room()
    request = DecodeStep(session._seq_step(session.pending[:1]), want)
    yield request
    if not request.done:
        return False
    session._took(1, request.result)
    return True


__all__ = ["DecodeStep", "evaluate_in_lockstep"]
