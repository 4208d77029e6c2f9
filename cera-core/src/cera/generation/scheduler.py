"""Continuous batching: the decode steps of many sessions in one forward pass, and their
prompts in chunks between those steps.

A `Scheduler` owns one state with a slot per sequence on a loaded model; its sessions
(`new_session`) are ordinary `Session`s whose forward passes come here. The passes run in
rounds: one decode batch (the next token of every sequence that is generating, one row
each), then one prompt pass (the next chunk of the prompts waiting, up to ``prompt_chunk``
tokens in all). A session cuts a long prompt into chunks (``prompt_chunk`` tokens shared
among the prompts being evaluated at the time, so that their chunks fill one pass
together), so prompts of any length delay the other sequences' next tokens by one pass of
``prompt_chunk`` tokens at most, and a stream never stalls behind another's prompt. Sequences join and leave between
rounds.

Each sequence's tokens are exactly those it would produce alone, whatever shares its
passes: the products of a decode batch keep each row's own arithmetic (the backend
computes every row as a one-row product would; `Layout.is_decode_batch`); a long prompt's
rows all take the prompt kernels (`Layout.prompt_rows`), whose rows come out the same
however the prompt is cut and whatever other sequences' rows share the pass; attention,
norms and the rest work row by row in each sequence's own slot. A short prompt (under
`cera.generation.session.PROMPT_ROWS` tokens, whose kernels a session alone chooses by
its row count) and an `exact_rows` pass run alone, as one round's prompt pass. The weights
are read once per pass for all rows, which is where the aggregate speed comes from.

Two ways to drive it: sessions in threads (each runs `generate`/`events` as usual; a round
is led by one of the waiting threads, and gathers the steps of every generating session,
waiting while they keep arriving, up to ``gather_seconds`` after the latest), or
`generate_many`, which decodes several prompts in lockstep from one thread (benchmarks,
batch jobs).
"""

from __future__ import annotations

import collections
import threading
import time

import attrs

from ..errors import ResourceExhausted, SessionError
from .events import EndEvent
from ..graph.builder import Outputs
from .lockstep import DecodeStep
from .options import GenerateOptions, make_options
from .runtime import SeqStep

PROMPT_CHUNK = 128  # tokens of prompt per pass: where the prompt kernels are still efficient
GATHER_CAP_S = 0.05  # the longest a round waits for the steps of sessions between prompt chunks
# The longest a round waits for a decoding session's next step: a prompt pass never runs
# while a sequence that is decoding is between two of its steps (unless its caller takes
# this long between tokens), so a prompt delays a stream's token by one pass at most
STEP_WAIT_S = 0.05
MIN_SHARE = 16  # the fewest tokens of a prompt's chunk when several prompts share a pass
LOG_SIZE = 4096  # passes kept in the log (diagnostics, tests)
BATCHED_OUTPUTS = frozenset(("logits", "argmax", "top_k"))  # per-sequence outputs a shared pass can split


@attrs.define(eq=False)
class _Request:
    session: object
    step: SeqStep
    outputs: Outputs
    kind: str  # "decode" (one token), "prompt" (a chunk other prompts' chunks may join), "alone"
    layout: dict
    result: dict | None = None
    error: BaseException | None = None
    done: bool = False


@attrs.frozen
class Pass:
    """One forward pass the scheduler ran: a ``decode`` batch or a ``prompt`` pass, the
    state slots of its sequences and each one's number of tokens."""

    kind: str
    slots: tuple[int, ...]
    tokens: tuple[int, ...]


def merge_outputs(outputs: list[Outputs]) -> Outputs:
    kinds: list[str] = []
    for o in outputs:
        kinds += [k for k in o.kinds if k not in kinds]
    vocab = 0 if any(not o.vocab for o in outputs) else max(o.vocab for o in outputs)  # logits as the widest asks
    return Outputs(tuple(kinds), rows="last", k=max((o.k for o in outputs), default=0), vocab=vocab)


def split_rows(out: dict, n: int) -> list[dict]:
    """Per-row outputs of a batch (one output row per sequence)."""
    rows = [{} for _ in range(n)]
    for name, value in out.items():
        for i in range(n):
            rows[i][name] = value[i : i + 1]
    return rows


class Scheduler:
    def __init__(self, loaded, n_slots: int = 4, n_ctx: int = 4096, kv_type: str = "f16", n_batch: int = 512,
                 gather_seconds: float = 0.002, prompt_chunk: int = PROMPT_CHUNK):  # fmt: skip
        if not isinstance(n_slots, int) or n_slots < 1:
            raise SessionError(f"n_slots must be a positive integer, got {n_slots!r}")
        if not isinstance(prompt_chunk, int) or isinstance(prompt_chunk, bool) or prompt_chunk < 1:
            raise SessionError(f"prompt_chunk must be a positive integer, got {prompt_chunk!r}")
        self.loaded = loaded
        self.runner = loaded.runner
        self.n_batch = min(n_batch, n_ctx)
        self.prompt_chunk = min(prompt_chunk, self.n_batch)
        self.state = self.runner.new_state(n_ctx, n_slots=n_slots, kv_type=kv_type, n_batch=self.n_batch)
        self.gather_seconds = gather_seconds
        # prompts share passes where every layer's state is cells of a KV cache (a recurrent
        # layer's state runs them alone, as a session of its own would)
        self.batch_prompts = bool(getattr(loaded.model.state, "rewindable", False))
        self._cond = threading.Condition()
        self._run_lock = threading.Lock()  # one forward pass at a time on the shared state
        self._queue: list[_Request] = []
        self._leading = False
        self._generating: set[int] = set()
        self._draft = None  # the draft model's scheduler (draft_scheduler)
        self._prompting: set[int] = set()
        self._decoding: set[int] = set()  # generating sessions whose last pass was a decode step
        self.step_wait = STEP_WAIT_S
        self.n_batches = 0  # decode batches run (diagnostics)
        self.rows_per_batch: collections.deque[int] = collections.deque(maxlen=LOG_SIZE)
        self.passes: collections.deque[Pass] = collections.deque(maxlen=LOG_SIZE)

    # -- sessions ---------------------------------------------------------------------------

    def new_session(self, adapters=None):
        from .session import Session

        adapters = getattr(self.loaded, "default_adapters", None) if adapters is None else adapters
        return Session(self.loaded, n_ctx=self.state.n_ctx, kv_type=self.state.kv_type, n_batch=self.n_batch, scheduler=self,
                       adapters=adapters)  # fmt: skip

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
            self._decoding.discard(id(session))
            self.state.release(session.slot)
            self._cond.notify_all()

    def generating(self, session, on: bool) -> None:
        """A session tells the scheduler it is in (or out of) a generation loop, so a round
        waits for its next step."""
        with self._cond:
            if on:
                self._generating.add(id(session))
            else:
                self._generating.discard(id(session))
                self._decoding.discard(id(session))
            self._cond.notify_all()

    def prompting(self, session, on: bool) -> None:
        """A session tells the scheduler it is (or no longer is) evaluating a long prompt in
        chunks, which share the prompt passes."""
        with self._cond:
            if on:
                self._prompting.add(id(session))
            else:
                self._prompting.discard(id(session))

    def chunk_size(self) -> int:
        """The tokens of a long prompt's next chunk: ``prompt_chunk`` shared among the
        prompts being evaluated (so theirs fill one pass together), never under
        MIN_SHARE tokens."""
        n = max(1, len(self._prompting)) if self.batch_prompts else 1
        return max(min(MIN_SHARE, self.prompt_chunk), self.prompt_chunk // n)

    # -- forward passes ----------------------------------------------------------------------

    def _kind(self, step: SeqStep, outputs: Outputs, layout: dict) -> str:
        if layout.get("exact_rows") or layout.get("embeds") is not None:  # an image's rows run alone
            return "alone"
        if len(step.tokens) == 1 and not layout.get("prompt_rows"):
            return "decode"
        if (layout.get("prompt_rows") and self.batch_prompts and outputs.rows == "last"
                and set(outputs.kinds) <= BATCHED_OUTPUTS):  # fmt: skip
            return "prompt"
        return "alone"

    def forward(self, session, step: SeqStep, outputs: Outputs, **layout) -> dict:
        req = _Request(session, step, outputs, self._kind(step, outputs, layout), layout)
        with self._cond:
            self._queue.append(req)
            self._cond.notify_all()
            while not req.done:
                if self._leading:
                    self._cond.wait()
                    continue
                self._leading = True
                try:
                    self._round()
                finally:
                    self._leading = False
                    self._cond.notify_all()
        if req.error is not None:
            raise req.error
        return req.result

    def _gather(self) -> None:
        """Wait (holding the condition) for a step of every generating session: up to
        ``step_wait`` for those whose last step was a decode step (they come back with their
        next one, or end), and for the others while steps keep arriving, up to
        ``gather_seconds`` after the latest (GATHER_CAP_S in all)."""
        t0 = latest = time.perf_counter()
        seen = len(self._queue)
        while True:
            queued = {id(r.session) for r in self._queue}
            now = time.perf_counter()
            left = 0.0
            if not self._decoding <= queued:
                left = t0 + self.step_wait - now
            if not self._generating <= queued:
                left = max(left, min(latest + self.gather_seconds, t0 + GATHER_CAP_S) - now)
            if left <= 0:
                return
            self._cond.wait(left)
            if len(self._queue) > seen:
                seen, latest = len(self._queue), time.perf_counter()

    def _pick_prompt(self) -> list[_Request]:
        """The next prompt pass: the first waiting chunk, with the batchable chunks after it
        while they fit ``prompt_chunk`` tokens in all (first come, first served)."""
        picked: list[_Request] = []
        total = 0
        for r in self._queue:
            if r.kind == "decode":
                continue
            if r.kind == "alone" or (picked and picked[0].kind == "alone"):
                if not picked:
                    picked.append(r)
                break
            n = len(r.step.tokens)
            if picked and total + n > self.prompt_chunk:
                break
            picked.append(r)
            total += n
        if len(picked) > 1 and all(len(r.step.tokens) == 1 for r in picked):
            picked = picked[:1]  # one-token rows together would make a decode batch's layout
        return picked

    def _round(self) -> None:
        """One round, led by a waiting thread (called holding the condition, which it lets
        go while the passes run): a decode batch, then a prompt pass."""
        self._gather()
        decode = [r for r in self._queue if r.kind == "decode"][: self.state.n_slots]
        prompt = self._pick_prompt()
        for r in decode + prompt:
            self._queue.remove(r)
        if decode:
            self._cond.release()
            try:
                self._run(decode, "decode")
            finally:
                self._cond.acquire()
            self._decoding |= {id(r.session) for r in decode} & self._generating
            self._cond.notify_all()  # those sequences go on while the prompt pass runs
        self._decoding -= {id(r.session) for r in prompt}
        if prompt:
            self._cond.release()
            try:
                self._run(prompt, "prompt")
            finally:
                self._cond.acquire()

    def _run(self, batch: list[_Request], kind: str) -> None:
        try:
            # sequences with different LoRA adapters (or none) go in one pass per set of adapters
            groups: dict = {}
            for r in batch:
                groups.setdefault(r.session.adapters, []).append(r)
            for adapters, group in groups.items():
                with self._run_lock:
                    if len(group) == 1:  # as the session alone would run it
                        r = group[0]
                        rows = [self.runner.forward(self.state, [r.step], r.outputs, adapters=adapters, **r.layout)]
                    else:
                        layout = {"prompt_rows": True} if kind == "prompt" else {}
                        out = self.runner.forward(self.state, [r.step for r in group],
                                                  merge_outputs([r.outputs for r in group]), adapters=adapters,
                                                  **layout)  # fmt: skip
                        rows = split_rows(out, len(group))
                for r, row in zip(group, rows, strict=True):
                    r.result = row
        except BaseException as e:  # every request of the pass sees the failure
            for r in batch:
                r.error = e
        finally:
            self.passes.append(Pass(kind, tuple(r.step.slot for r in batch), tuple(len(r.step.tokens) for r in batch)))
            if kind == "decode":
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
                    with self._run_lock:  # every session here applies the model's default adapters
                        out = self.runner.forward(self.state, rows_in, merge_outputs([steps[i].want for i in batch]),
                                                  adapters=sessions[0].adapters)  # fmt: skip
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
                    self.passes.append(Pass("decode", tuple(rows_in[j].slot for j in range(len(batch))), (1,) * len(batch)))
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


__all__ = ["PROMPT_CHUNK", "Pass", "Scheduler", "merge_outputs", "split_rows"]
