"""Sessions: one sequence's state that persists across calls, and the generation loop.

A session holds the tokens its state has evaluated. Appending text or tokens queues them;
the next `generate` (or `evaluate`) runs only what is queued, so a follow-up turn never
re-evaluates the conversation so far. A long prompt is evaluated in chunks of `n_batch`
tokens, and `cancel()` (safe from any thread) takes effect between chunks and between
generated tokens.

The session keeps what the last evaluation returned (the logits of the last position,
or only its argmax when greedy decoding asked for no more), so generating again from an
unchanged conversation re-evaluates nothing. A model whose state cannot be rewound
(recurrent layers) gets a snapshot of its state at the end of each prompt; a rewind
returns to the latest snapshot before the point and re-evaluates from there.

`events` runs the generation loop (`cera.generation.loop`: plain decoding or prompt
lookup over one step function, the stop rules once); `generate` (a sink and a summary)
and `stream` (text chunks) are adapters over it. A session evaluates alone, or through a `cera.generation.scheduler.
Scheduler` that batches the decode steps of many sessions into one forward pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import attrs
import numpy as np

from .decode_step import has_output
from ..errors import CeraError, ContextFull, GenerationError, ResourceExhausted, SessionError
from .events import EndEvent, GenerationSummary, TokenEvent
from .loop import generate
from ..graph.builder import LAST_LOGITS, NONE, Outputs
from .options import GenerateOptions, make_options
from .runtime import SeqStep
from .sink import FinishReason, Sink
from ..state import StateNotRewindable

__all__ = ["Checkpoint", "GenerateOptions", "GenerationSummary", "Session"]


@attrs.frozen
class Checkpoint:
    tokens: tuple[int, ...]
    pending: tuple[int, ...]
    state: object
    last: dict | None


PROMPT_ROWS = 64  # from this many tokens a prompt is evaluated with the prompt kernels throughout
MAX_SNAPSHOTS = 4
# A prompt evaluated for generation goes in passes sized to take about this long, so that
# cancel() takes effect within about that time (a pass is one call into the backend that
# nothing interrupts); never below CANCEL_MIN_CHUNK tokens, where the prompt kernels are
# still efficient, nor above n_batch. How a prompt is cut does not change its results.
CANCEL_LATENCY_S = 0.25
CANCEL_MIN_CHUNK = 128


class Session:
    """One conversation's state on a loaded model. See the module docstring."""

    def __init__(self, loaded, n_ctx: int, kv_type: str = "f16", n_batch: int = 512, scheduler=None,
                 swa_full: bool = False):  # fmt: skip
        for what, v in (("n_ctx", n_ctx), ("n_batch", n_batch)):
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise SessionError(f"{what} must be a positive integer, got {v!r}")
        self.loaded = loaded
        self.model = loaded.model
        self._n_vocab = int(self.model.n_vocab)
        self.tokenizer = loaded.tokenizer
        self.runner = loaded.runner
        self.n_batch = min(n_batch, n_ctx)
        self.scheduler = scheduler
        if scheduler is not None:
            self.state = scheduler.state
            self.slot = scheduler.acquire(self)
        else:
            self.state = self.runner.new_state(n_ctx, n_slots=1, kv_type=kv_type, n_batch=self.n_batch, swa_full=swa_full)
            self.slot = self.state.acquire()
        self.n_ctx = self.state.n_ctx
        self.tokens: list[int] = []  # evaluated, in the state
        self.pending: list[int] = []  # queued for the next evaluation
        self.last: dict | None = None  # what the last evaluation returned for its last position
        self.n_evaluated = 0  # tokens run through the model over the session's life
        self.n_shifted = 0  # tokens dropped by context shifts
        self.prefix_cache = getattr(loaded, "prefix_cache", None)  # cera.generation.prefix_cache (None: off)
        self._snapshots: list[tuple[int, object]] = []  # (tokens, state snapshot) for recurrent state
        self.draft_session = None  # the draft model's session (cera.generation.draft_model), made on first use
        self._cancelled = False  # set by cancel() from any thread (a bool: reads and writes are atomic)
        self._lock = threading.RLock()
        self.last_summary: GenerationSummary | None = None

    # -- input ------------------------------------------------------------------------

    def append_tokens(self, ids) -> None:
        if type(ids) in (list, tuple) and len(ids) == 1 and type(ids[0]) is int and 0 <= ids[0] < self._n_vocab:
            self.pending.append(ids[0])  # one plain token (a decode step): what the checks below would accept
            return
        try:
            ids = list(ids)
        except TypeError:
            raise SessionError(f"token ids must be a sequence of integers, got {ids!r:.80}") from None
        if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in ids):
            bad = next(t for t in ids if not isinstance(t, (int, np.integer)) or isinstance(t, bool))
            raise SessionError(f"token ids must be integers, got {bad!r:.40} ({type(bad).__name__})")
        ids = [int(t) for t in ids]
        n_vocab = self._n_vocab
        bad = [t for t in ids if not 0 <= t < n_vocab]
        if bad:
            raise SessionError(f"token ids {bad[:5]} are outside the vocabulary (0..{n_vocab - 1})")
        self.pending.extend(ids)

    def append_text(self, text: str, parse_special: bool = False, add_special: bool | None = None) -> list[int]:
        """Tokenize and queue text. ``add_special`` (default: only at the very start of
        the session) adds BOS/EOS as the vocabulary asks; ``parse_special`` turns
        special-token text such as ``<|im_start|>`` into those tokens (off for raw user text)."""
        if not isinstance(text, str):
            raise SessionError(f"text must be a string, got {type(text).__name__}")
        if add_special is None:
            add_special = not self.tokens and not self.pending
        ids = self.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)
        self.append_tokens(ids)
        return ids

    def sync_tokens(self, ids) -> int:
        """Make the session hold exactly ``ids``: keep the longest evaluated prefix they
        share, drop the rest of the state, and queue the remainder. Returns the number of
        tokens reused. This is how a chat re-renders the whole conversation each turn and
        still evaluates only the new part. When ``ids`` is what the session already holds,
        nothing is re-evaluated: the kept output of the last position serves."""
        ids = [int(t) for t in ids]
        with self._lock:
            common = 0
            for a, b in zip(self.tokens, ids, strict=False):  # lengths differ by design
                if a != b:
                    break
                common += 1
            if common == len(ids) == len(self.tokens) and self.last is not None:
                self.pending = []
                return common
            if common == len(ids) and common > 0:
                common -= 1  # no output kept for that position: evaluate its token again
            if common < len(self.tokens):
                common = self._rewind(common)
            self.pending = []
            self.append_tokens(ids[common:])
            return common

    # -- evaluation -----------------------------------------------------------------------

    def evaluate(self) -> np.ndarray | None:
        """Run the queued tokens through the model; returns the last token's logits."""
        with self._lock:
            try:
                if self.pending:
                    if self._evaluate(LAST_LOGITS) and self.prefix_cache is not None:
                        self._store_prefix()
                elif self.last is not None and "logits" not in self.last:
                    self._refresh_last(LAST_LOGITS)
            finally:
                self._cancelled = False  # see events()
            return None if self.last is None else self.last.get("logits")

    @property
    def logits(self) -> np.ndarray | None:
        return None if self.last is None else self.last.get("logits")

    def _seq_step(self, tokens) -> SeqStep:
        """``tokens`` as this sequence's next step: its slot, at the positions after what
        the state holds."""
        start = len(self.tokens)
        return SeqStep(self.slot, tuple(tokens), tuple(range(start, start + len(tokens))))

    def _forward(self, tokens: list[int], outputs: Outputs, **layout) -> dict:
        step = self._seq_step(tokens)
        if self.scheduler is not None:
            return self.scheduler.forward(self, step, outputs, **layout)
        return self.runner.forward(self.state, [step], outputs, **layout)

    def _use_prefix_cache(self) -> None:
        """Before evaluating: restore the longest cached prefix of what this session holds
        and queues, when it reaches further than what the state holds."""
        everything = self.tokens + self.pending
        found = self.prefix_cache.lookup(everything, cut=self.model.state.rewindable, state=self.state)
        if found is None:
            return
        entry, n = found
        whole = n == len(entry.tokens) and entry.last is not None and "logits" in entry.last
        if n == len(everything) and not whole:
            n -= 1  # keep one token to evaluate: the logits of the last position are needed
        if n <= len(self.tokens):
            return
        try:
            self.state.restore(self.slot, entry.snapshot)
            if n < len(entry.tokens):
                self.state.truncate(self.slot, n)
        except CeraError:  # a state of another shape, or a ring that cannot be cut: evaluate it all
            self.state.clear(self.slot)
            self.tokens, self.pending, self.last, self._snapshots = [], everything, None, []
            return
        self.tokens = list(entry.tokens[:n])
        self.pending = everything[n:]
        self.last = _copy(entry.last) if not self.pending else None
        self._snapshots = []

    def _store_prefix(self) -> None:
        if self.prefix_cache is not None and self.tokens and not self.pending:
            self.prefix_cache.store(self)

    def _evaluate(self, final: Outputs, responsive: bool = False) -> bool:
        """Evaluate the queue in chunks; the last chunk returns ``final``. False when
        cancelled between chunks (what was evaluated stays). ``responsive``: chunks sized
        by time (CANCEL_LATENCY_S) rather than n_batch alone."""
        held = len(self.tokens)
        if self.prefix_cache is not None and len(self.pending) > 1:
            self._use_prefix_cache()
        # A long prompt's rows all take the prompt kernels, however it is cut into passes
        # (by n_batch, or by a prompt-cache hit that leaves only its end to evaluate), so
        # they come out the same either way; short ones choose by their count, as llama.cpp.
        prompt_rows = len(self.pending) > 1 and (len(self.pending) >= PROMPT_ROWS or len(self.tokens) > held)
        self._check_room()
        size = min(self.n_batch, CANCEL_MIN_CHUNK) if responsive else self.n_batch
        while self.pending:
            if self._cancelled:
                return False
            chunk = self.pending[:size]
            last = len(chunk) == len(self.pending)
            t0 = time.perf_counter() if responsive else 0.0
            try:
                out = self._forward(chunk, final if last else NONE, prompt_rows=prompt_rows)
            except MemoryError as e:
                raise ResourceExhausted(f"out of memory evaluating {len(chunk)} tokens: {e}") from e
            if responsive:
                rate = len(chunk) / max(time.perf_counter() - t0, 1e-6)
                size = max(min(int(rate * CANCEL_LATENCY_S), self.n_batch), min(self.n_batch, CANCEL_MIN_CHUNK))
            self._took(len(chunk), out if last else None)
        return True

    def _check_room(self) -> None:
        if len(self.tokens) + len(self.pending) > self.n_ctx:
            raise ContextFull(
                f"{len(self.tokens)} tokens in the context plus {len(self.pending)} new ones exceed "
                f"its size of {self.n_ctx}; start a new session with a larger n_ctx or reset this one"
            )

    def _took(self, n: int, out: dict | None) -> None:
        """The first n queued tokens are evaluated; ``out``: the outputs of the pass that
        ended the queue (None for an earlier chunk)."""
        self.tokens.extend(self.pending[:n])
        del self.pending[:n]
        self.n_evaluated += n
        self.last = _row0(out) if out is not None else None

    def _refresh_last(self, want: Outputs) -> None:
        """The kept output of the last position lacks what is wanted now (only an argmax
        was read back): evaluate that position again."""
        if not self.tokens:
            raise SessionError("nothing to generate from: append text or tokens first")
        last_token, queued = self.tokens[-1], self.pending
        self.pending = []
        self._rewind(len(self.tokens) - 1)
        self.pending += [last_token, *queued]
        self._evaluate(want)

    def _rewind(self, n: int) -> int:
        """Cut the state back to its first n tokens; where it cannot be cut (recurrent
        state), restore the latest snapshot at or before n and queue the tokens from
        there to n. Returns the number of tokens the state now holds."""
        if n >= len(self.tokens):
            return len(self.tokens)
        why = self.state.can_truncate(self.slot, n)
        if why is None:
            self.state.truncate(self.slot, n)
            del self.tokens[n:]
            self.last = None
            self._snapshots = [(k, s) for k, s in self._snapshots if k <= n]
            return n
        best = None
        for k, snap in self._snapshots:
            if k <= n and (best is None or k > best[0]):
                best = (k, snap)
        redo_from = 0 if best is None else best[0]
        redo = self.tokens[redo_from:n]
        if best is None:
            self.state.clear(self.slot)
        else:
            self.state.restore(self.slot, best[1])
        del self.tokens[redo_from:]
        self.last = None
        self._snapshots = [(k, s) for k, s in self._snapshots if k <= redo_from]
        self.pending = redo + self.pending
        return redo_from

    def _drop_cells_from(self, n: int) -> None:
        """Forget evaluated tokens from index n on (cut the state back to n cells)."""
        self.state.truncate(self.slot, n)
        del self.tokens[n:]
        self.last = None

    def _shift_context(self, n_keep: int) -> None:
        """The context is full: keep the first ``n_keep`` tokens, drop half of the rest (the
        oldest), and go on, as llama.cpp's context shift does. The KV cells move and their
        keys are rotated back (`HostState.shift`); where the state cannot shift (recurrent
        layers, a sliding-window ring), the kept tokens are evaluated again from scratch,
        which is exact but costs a prompt's time."""
        everything = self.tokens + self.pending
        n_keep = max(0, min(int(n_keep), len(self.tokens) - 2))
        n_discard = (len(self.tokens) - n_keep) // 2
        if n_discard < 1:
            raise ContextFull("the context is full and nothing can be shifted out; use a larger n_ctx")
        try:
            self.state.shift(self.slot, n_keep, n_discard)
        except StateNotRewindable:
            self.state.clear(self.slot)
            kept = everything[:n_keep] + everything[n_keep + n_discard :]
            self.tokens, self.pending, self.last = [], kept, None
            self._snapshots = []
            self.n_shifted += n_discard
            return
        del self.tokens[n_keep : n_keep + n_discard]
        self._snapshots = []
        self.n_shifted += n_discard

    def _snapshot_here(self) -> None:
        """Keep a snapshot of non-rewindable state at this point (end of a prompt)."""
        if self.model.state.rewindable or not self.tokens:
            return
        n = len(self.tokens)
        if self._snapshots and self._snapshots[-1][0] == n:
            return
        self._snapshots.append((n, self.state.snapshot(self.slot)))
        del self._snapshots[:-MAX_SNAPSHOTS]

    # -- generation -------------------------------------------------------------------------

    def events(self, options: GenerateOptions | None = None, processors=(), **kw) -> Iterator[TokenEvent | EndEvent]:
        """Generate until a stop condition, yielding a `TokenEvent` per token and an
        `EndEvent` last. ``processors``: extra sampling processors (a grammar, ...). The
        loop and its strategies: `cera.generation.loop`."""
        options = make_options(options, kw)
        if self.scheduler is not None:
            self.scheduler.generating(self, True)
        try:
            yield from generate(self, options, processors)
        finally:
            # Cleared when a generation ends, not when one starts: a cancel() that comes just
            # before generate() cancels that generation instead of being lost.
            self._cancelled = False
            if self.scheduler is not None:
                self.scheduler.generating(self, False)

    def lockstep_events(self, options: GenerateOptions):
        """`events` for a driver that batches the decode steps of several sessions
        (`cera.generation.scheduler.Scheduler.generate_many`): each decode step is yielded as a
        `cera.generation.lockstep.DecodeStep` for the driver to run with the other sequences' steps."""
        try:
            yield from generate(self, options, (), lockstep=True)
        finally:
            self._cancelled = False

    def _ready_to_generate(self, needs: int) -> bool:
        """Before the first token: evaluate the queued prompt (its last position returns
        all logits, so any sampler can start), or make sure the kept output of the last
        position serves a sampler that ``needs`` it. False when cancelled."""
        if self.pending:
            ok = self._evaluate(LAST_LOGITS, responsive=True)
            if ok:
                self._store_prefix()
            self._snapshot_here()
            return ok
        if self.last is None:
            raise SessionError("nothing to generate from: append text or tokens first")
        if not has_output(self.last, needs):
            self._refresh_last(LAST_LOGITS)
        return True

    def generate(self, options: GenerateOptions | None = None, sink: Sink | None = None, **kw) -> GenerationSummary:
        """Generate until a stop condition; streams to ``sink`` and returns a summary. Any
        failure reaches the sink as FinishReason.ERROR (CANCELLED for Ctrl-C) and raises."""
        sink = sink or Sink()
        summary = None
        for event in guarded(self.events(options, **kw), sink):
            if isinstance(event, TokenEvent):
                sink.on_token(event.id)
                if event.text:
                    sink.on_text(event.text)
            else:
                if event.text:
                    sink.on_text(event.text)
                summary = event.summary
        if summary.error:
            sink.on_error(summary.error)
        sink.on_finish(summary.finish_reason)
        return summary

    def stream(self, options: GenerateOptions | None = None, **kw) -> Iterator[str]:
        """Generate, yielding UTF-8-safe text chunks; `last_summary` holds the summary after."""
        for event in guarded(self.events(options, **kw)):
            if event.text:
                yield event.text

    def stream_json(self, schema=None, options: GenerateOptions | None = None, **kw) -> Iterator[str]:
        """Stream the text of one JSON value that follows ``schema`` (a JSON Schema as a
        dict or JSON text; None: any JSON object). The joined chunks parse with
        `json.loads`; `last_summary.incomplete` says when a limit cut the value short."""
        constraint = {"json": True} if schema is None else {"json_schema": schema}
        yield from self.stream(options, **constraint, **kw)

    # -- control ------------------------------------------------------------------------------

    def cancel(self) -> None:
        """Stop the current evaluation or generation at the next chunk or token (a long
        prompt's chunks take about CANCEL_LATENCY_S); with none running, the next one stops
        before it starts. Thread-safe."""
        self._cancelled = True

    @property
    def cancelled(self) -> bool:
        """Whether `cancel` was called and the generation it stops has not ended yet."""
        return self._cancelled

    def reset(self) -> None:
        with self._lock:
            self.state.clear(self.slot)
            self.tokens = []
            self.pending = []
            self.last = None
            self._snapshots = []

    def truncate(self, n: int) -> None:
        """Keep only the first ``n`` evaluated tokens (e.g. to rewind a turn)."""
        with self._lock:
            if not isinstance(n, int) or not 0 <= n <= len(self.tokens):
                raise SessionError(f"cannot truncate to {n!r} tokens: the session holds {len(self.tokens)}")
            if n == len(self.tokens):
                self.pending = []
                return
            held = self._rewind(n)
            if held < n:  # restored an earlier snapshot: evaluate up to n again
                self._evaluate(NONE)
            self.pending = []
            self.last = None

    def checkpoint(self) -> Checkpoint:
        with self._lock:
            return Checkpoint(tuple(self.tokens), tuple(self.pending), self.state.snapshot(self.slot), _copy(self.last))

    def restore(self, cp: Checkpoint) -> None:
        if not isinstance(cp, Checkpoint):
            raise SessionError(f"restore takes a Checkpoint from checkpoint(), got {type(cp).__name__}")
        with self._lock:
            self.state.restore(self.slot, cp.state)
            self.tokens = list(cp.tokens)
            self.pending = list(cp.pending)
            self.last = _copy(cp.last)
            self._snapshots = []

    def save(self, path) -> None:
        """Write this session's state to a checkpoint file, atomically (`cera.formats.checkpoint`)."""
        from ..formats import checkpoint

        with self._lock:
            checkpoint.save(self, path)

    def load(self, path) -> None:
        """Restore a checkpoint file written by `save` from a session of the same model and
        KV precision; everything is checked before the session changes."""
        from ..formats import checkpoint

        checkpoint.restore(self, path)

    def close(self) -> None:
        """Give the session's slot back (sessions of a scheduler share one state), and its
        draft model's session's (`cera.generation.draft_model`)."""
        if self.draft_session is not None:
            self.draft_session.close()
            self.draft_session = None
        if self.scheduler is not None:
            self.scheduler.release(self)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


def guarded(events, sink: Sink | None = None):
    """Pass events through; on a failure tell the sink (ERROR, or CANCELLED for Ctrl-C)
    and raise a CeraError (an unexpected exception becomes a GenerationError)."""
    try:
        yield from events
    except KeyboardInterrupt:
        if sink is not None:
            sink.on_finish(FinishReason.CANCELLED)
        raise
    except CeraError as e:
        if sink is not None:
            sink.on_error(str(e))
            sink.on_finish(FinishReason.ERROR)
        raise
    except MemoryError as e:
        if sink is not None:
            sink.on_error(f"out of memory during generation: {e}")
            sink.on_finish(FinishReason.ERROR)
        raise ResourceExhausted(f"out of memory during generation: {e}") from e
    except Exception as e:
        if sink is not None:
            sink.on_error(f"generation failed: {type(e).__name__}: {e}")
            sink.on_finish(FinishReason.ERROR)
        raise GenerationError(f"generation failed: {type(e).__name__}: {e}") from e


def _row0(out: dict) -> dict:
    """The outputs of the (single) output row."""
    last = {}
    if "logits" in out:  # a view: a pass's outputs are its caller's own copies (Executable.run)
        last["logits"] = out["logits"].reshape(-1, out["logits"].shape[-1])[-1]
    if "argmax" in out:
        last["argmax"] = int(out["argmax"].reshape(-1)[-1])
    if "top_k_ids" in out:
        last["top_k"] = (out["top_k_ids"][-1].astype(np.int64), out["top_k_values"][-1].astype(np.float64))
    return last


def _copy(last: dict | None) -> dict | None:
    if last is None:
        return None
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in last.items()}
