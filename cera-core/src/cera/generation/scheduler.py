"""Continuous batching: the decode steps of many sessions in one forward pass.

A `Scheduler` owns one state with a slot per sequence on a loaded model; its sessions
(`new_session`) are ordinary `Session`s whose forward passes come here. A prompt runs
alone, as it would in a session of its own. A decode step (one token) waits briefly for
the other sessions that are generating; the steps that arrived run as one batch, one row
per sequence, and each session gets its row. Sequences join and leave between steps.

The products of a decode batch keep each row's own arithmetic (the backend computes every
row as a one-row product would; `Layout.is_decode_batch`), and attention, norms and the
rest work row by row in each sequence's own slot, so a sequence's tokens are exactly the
tokens it would produce alone, whatever shares its batch. The weights are read once per
step for all rows, which is where the aggregate speed comes from.

Two ways to drive it: sessions in threads (each runs `generate`/`events` as usual, and a
step waits up to ``gather_seconds`` for the others), or `generate_many`, which decodes
several prompts in lockstep from one thread (benchmarks, batch jobs).
"""

from __future__ import annotations

import threading
import time

import attrs

from ..errors import ResourceExhausted, SessionError
from .events import EndEvent
from ..graph.builder import Outputs
from .lockstep import DecodeStep
from .options import GenerateOptions, make_options
from .runtime import SeqStep


@attrs.define(eq=False)
class _Request:
    session: object
    step: SeqStep
    outputs: Outputs
    result: dict | None = None
    error: BaseException | None = None
    done: bool = False


def merge_outputs(outputs: list[Outputs]) -> Outputs:
    kinds: list[str] = []
    for o in outputs:
        kinds += [k for k in o.kinds if k not in kinds]
    return Outputs(tuple(kinds), rows="last", k=max((o.k for o in outputs), default=0))


def split_rows(out: dict, n: int) -> list[dict]:
    """Per-row outputs of a batch (one output row per sequence)."""
    rows = [{} for _ in range(n)]
    for name, value in out.items():
        for i in range(n):
            rows[i][name] = value[i : i + 1]
    return rows


class Scheduler:
    def __init__(self, loaded, n_slots: int = 4, n_ctx: int = 4096, kv_type: str = "f16", n_batch: int = 512,
                 gather_seconds: float = 0.002):  # fmt: skip
        if not isinstance(n_slots, int) or n_slots < 1:
            raise SessionError(f"n_slots must be a positive integer, got {n_slots!r}")
        self.loaded = loaded
        self.runner = loaded.runner
        self.n_batch = min(n_batch, n_ctx)
        self.state = self.runner.new_state(n_ctx, n_slots=n_slots, kv_type=kv_type, n_batch=self.n_batch)
        self.gather_seconds = gather_seconds
        self._cond = threading.Condition()
        self._run_lock = threading.Lock()  # one forward pass at a time on the shared state
        self._queue: list[_Request] = []
        self._leading = False
        self._generating: set[int] = set()
        self._draft = None  # the draft model's scheduler (draft_scheduler)
        self.n_batches = 0  # decode batches run (diagnostics)
        self.rows_per_batch: list[int] = []

    # -- sessions ---------------------------------------------------------------------------

    def new_session(self):
        from .session import Session

        return Session(self.loaded, n_ctx=self.state.n_ctx, kv_type=self.state.kv_type, n_batch=self.n_batch, scheduler=self)

    def draft_scheduler(self) -> Scheduler:
        """A scheduler of the loaded model's draft (`cera.engine.LoadedModel.set_draft`) with
        as many slots and as large a context, made on first use: the sessions of this one
        draft on its sessions (`cera.generation.draft_model`), whose passes it serialises."""
        draft = self.loaded.draft
        if draft is None:
            raise SessionError("this model has no draft model attached (set_draft)")
        with self._cond:
            if self._draft is None or self._draft.loaded is not draft:
                self._draft = Scheduler(draft, n_slots=self.state.n_slots, n_ctx=self.state.n_ctx,
                                        n_batch=self.n_batch, gather_seconds=0.0)  # fmt: skip
            return self._draft

    def acquire(self, session) -> int:
        with self._cond:
            return self.state.acquire()

    def release(self, session) -> None:
        with self._cond:
            self._generating.discard(id(session))
            self.state.release(session.slot)

    def generating(self, session, on: bool) -> None:
        """A session tells the scheduler it is in (or out of) a generation loop, so a batch
        waits for its next step."""
        with self._cond:
            if on:
                self._generating.add(id(session))
            else:
                self._generating.discard(id(session))
            self._cond.notify_all()

    # -- forward passes ----------------------------------------------------------------------

    def forward(self, session, step: SeqStep, outputs: Outputs, **layout) -> dict:
        if len(step.tokens) != 1 or layout.get("exact_rows") or layout.get("prompt_rows"):
            with self._run_lock:
                return self.runner.forward(self.state, [step], outputs, **layout)
        req = _Request(session, step, outputs)
        with self._cond:
            self._queue.append(req)
            self._cond.notify_all()
            while not req.done:
                if self._leading:
                    self._cond.wait()
                    continue
                self._leading = True
                deadline = time.perf_counter() + self.gather_seconds
                while len(self._queue) < max(1, len(self._generating)):
                    left = deadline - time.perf_counter()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                batch = self._queue[: self.state.n_slots]
                del self._queue[: len(batch)]
                self._cond.release()
                try:
                    self._run(batch)
                finally:
                    self._cond.acquire()
                    self._leading = False
                    self._cond.notify_all()
        if req.error is not None:
            raise req.error
        return req.result

    def _run(self, batch: list[_Request]) -> None:
        try:
            with self._run_lock:
                out = self.runner.forward(self.state, [r.step for r in batch], merge_outputs([r.outputs for r in batch]))
            rows = split_rows(out, len(batch))
            for r, row in zip(batch, rows, strict=True):
                r.result = row
        except BaseException as e:  # every request of the batch sees the failure
            for r in batch:
                r.error = e
        finally:
            self.n_batches += 1
            self.rows_per_batch.append(len(batch))
            for r in batch:
                r.done = True

    # -- many prompts at once ------------------------------------------------------------------

    def generate_many(self, prompts: list, options: GenerateOptions | None = None, **kw) -> list:
        """Generate from several prompts (token id lists or strings) together, in lockstep
        from this thread: each prompt is evaluated alone, then every step runs one decode
        row per sequence that is still generating (a sequence leaves when it stops).
        Returns each prompt's GenerationSummary, in order; the first failure is raised
        after all have ended.

        One thread rather than one per sequence: between two steps each sequence only
        picks its token, and doing that back to back costs less than waking a thread per
        sequence and passing the interpreter between them (measured on SmolLM2, 4
        sequences, 2 cores: most of the time between steps was those hand-overs)."""
        from .session import guarded  # session imports this module's users: here, not at the top

        options = make_options(options, kw)
        if len(prompts) > self.state.n_slots:
            raise SessionError(f"{len(prompts)} prompts for {self.state.n_slots} slots; make the scheduler with n_slots >= {len(prompts)}")
        sessions = [self.new_session() for _ in prompts]
        n = len(prompts)
        summaries: list = [None] * n
        errors: list = [None] * n
        steps: list = [None] * n  # each sequence's DecodeStep waiting for the next batch (None: ended)
        gens: list = []  # closed on the way out: a Ctrl-C leaves them suspended
        try:
            for s, p in zip(sessions, prompts, strict=True):
                if isinstance(p, str):
                    s.append_text(p)
                else:
                    s.append_tokens(p)
            gens += [guarded(s.lockstep_events(options)) for s in sessions]

            def advance(i: int, error: BaseException | None = None) -> None:
                """Run sequence i on to its next decode step, or to its end."""
                steps[i] = None
                try:
                    event = gens[i].throw(error) if error is not None else next(gens[i])
                    while not isinstance(event, DecodeStep):
                        if isinstance(event, EndEvent):
                            summaries[i] = event.summary
                        event = next(gens[i])
                    steps[i] = event
                except StopIteration:
                    pass
                except (KeyboardInterrupt, SystemExit):
                    raise  # Ctrl-C stops them all, now
                except BaseException as e:  # noqa: BLE001 - raised below, once every sequence has ended
                    errors[i] = e

            for i in range(n):
                advance(i)
            while True:
                batch, rows_in = [], []
                for i in range(n):
                    if steps[i] is None:
                        continue
                    if sessions[i].cancelled:  # the step is left undone: the sequence ends as cancelled
                        advance(i)
                        continue
                    rows_in.append(steps[i].row)
                    batch.append(i)
                if not batch:
                    if any(st is not None for st in steps):
                        continue
                    break
                try:
                    with self._run_lock:
                        out = self.runner.forward(self.state, rows_in, merge_outputs([steps[i].want for i in batch]))
                    rows = split_rows(out, len(batch))
                except (KeyboardInterrupt, SystemExit):
                    raise
                except BaseException as e:  # noqa: BLE001 - every sequence of the batch sees the failure
                    if isinstance(e, MemoryError):
                        e = ResourceExhausted(f"out of memory evaluating a decode batch of {len(batch)} rows: {e}")
                    for i in batch:
                        advance(i, e)
                    continue
                finally:
                    self.n_batches += 1
                    self.rows_per_batch.append(len(batch))
                for i, row in zip(batch, rows, strict=True):
                    steps[i].finish(row)
                    advance(i)
        finally:
            for g in gens:
                g.close()
            for s in sessions:
                s.close()
        for e in errors:
            if e is not None:
                raise e
        return summaries


__all__ = ["Scheduler", "merge_outputs", "split_rows"]
