"""The constraint as a step of the sampling chain.

Each step `apply` masks the candidates to what the grammar allows; `accept` advances
the grammar with the chosen token and hands the next mask's computation to a worker
thread, which runs while the session evaluates the forward pass (the CPU backend's pass
is one C call with the GIL released; llguidance computes masks with the GIL released
too), so by the next `apply` the mask is usually ready. The mask is a bit per token; it
is handed to the candidates packed (`Candidates.defer_mask`) and applied only where the
logits are read: greedy decoding takes the masked argmax without a masked copy. The
token budget rule and the JSON key and call-repeat guards, when they narrow a step,
work on the mask unpacked to booleans.
"""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import GenerationError, GrammarBudgetError, GrammarError
from ..generation.sampling import NEEDS_LOGITS, Candidates, Processor
from .constraint import Constraint, from_options

START_WAIT_S = 0.0005  # the longest `accept` waits for the mask's worker to start
# The hand-over to the worker (waking it, waiting for its start, then for its result) costs
# the sampling thread tens of microseconds on an idle core, but milliseconds on a machine
# whose cores are all busy (a woken thread waits for a time slice): while its running mean
# exceeds the mask's, `apply` computes the mask itself, trying the worker again every
# HANDOFF_PROBE masks.
HANDOFF_PROBE = 16
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="cera-grammar")
        return _pool


class GrammarProcessor(Processor):
    """Masks the logits to a `Constraint`. ``overlap``: compute the next mask on a worker
    thread while the forward pass runs (False, the default: compute it in `apply`). Inline is
    the default because it measured faster where the forward pass uses every core: Gemma 3
    270M, 2 threads on 2 cores, 128 tokens, quiet machine, commit cdf0a35
    (`python benchmarks/bench_grammar.py --threads 2 --tokens 128 --reps 5 --overlap-off`):
    constrained / free decode 0.983-0.986 inline against 0.952-0.974 with the worker."""

    needs = NEEDS_LOGITS

    def __init__(self, constraint: Constraint, tokenizer, n_vocab: int | None = None, overlap: bool = False,
                 budget: int | None = None):  # fmt: skip
        import llguidance

        from .vocab import ll_tokenizer, token_bytes_cached

        self.constraint = constraint
        self.n_vocab = max(n_vocab or 0, tokenizer.vocab.n_tokens)
        self.lt = ll_tokenizer(tokenizer, self.n_vocab)
        grammar = constraint.compile(tokenizer, self.n_vocab)
        self.matcher = llguidance.LLMatcher(self.lt, grammar, log_level=0)
        if self.matcher.is_error():
            raise GrammarError(f"the constraint cannot start: {self.matcher.get_error()}")
        self.overlap = overlap
        self._words = np.zeros((self.n_vocab + 31) // 32, np.int32)
        self._future = None
        self._fresh = False  # the mask in _words is for the current state
        self._stopped = False
        self._accepting = self.matcher.is_accepting()
        self.mask_seconds: list[float] = []  # time spent computing masks (the benchmark reads it)
        self.wait_seconds: list[float] = []  # time `apply` waited for a mask
        self.start_seconds: list[float] = []  # from handing a mask to the worker to its start
        self._n_scheduled = 0
        self._handing = 0.0  # the last hand-over's time in `accept`
        self._mask_cost = self._handoff_cost = 0.0  # running means (seconds): a mask; a hand-over
        self.active = not constraint.triggers
        # the token budget rule (cera.grammar.budget): the value completes within ``budget`` tokens
        self.budget = None
        if budget is not None or constraint.end_on_repeat:
            from .budget import BudgetRule

            self.budget = BudgetRule(self.matcher, self.lt, token_bytes_cached(tokenizer), self.n_vocab, budget,
                                     tokenizer.eog_ids)  # fmt: skip
            if self.active:
                self.budget.start()
                need = self.budget.shortest_at_start
                if budget is not None and 0 < budget < (need or 0):  # (0: evaluate the prompt alone)
                    raise GrammarBudgetError(
                        f"the shortest value the {constraint.kind.replace('_', ' ')} constraint allows takes {need} "
                        f"tokens, and the generation may write {budget}: raise -n/--max-tokens (max_tokens) to at "
                        f"least {need}, or make room in the context"
                    )
        self.keys = None  # no key twice in an object (cera.grammar.json_keys)
        if constraint.is_json and self.active:
            from .json_keys import KeyGuard

            self.keys = KeyGuard(token_bytes_cached(tokenizer))
        self.repeats = None  # the calls end at a repeated call (cera.grammar.call_repeats)
        if constraint.end_on_repeat:
            from .call_repeats import CallRepeats

            self.repeats = CallRepeats()
            tb = token_bytes_cached(tokenizer)
            self._token_bytes = tb
            self._braces = np.array([t for t, b in enumerate(tb) if b"}" in b and b[:1] != b"\xff"], np.int64)
        if not self.active:
            self._bytes = token_bytes_cached(tokenizer)
            self._text = b""
            self._triggers = constraint.triggers
            self._patterns = [re.compile(t.pattern) for t in self._triggers if t.pattern is not None]
        else:
            self._schedule()

    # -- the mask ------------------------------------------------------------------------

    def _compute(self, started=None, submitted: float = 0.0) -> None:
        t0 = time.perf_counter()
        if started is not None:
            self.start_seconds.append(t0 - submitted)
            started.release()  # the sampling thread goes on once this thread is inside llguidance
        self.matcher.unsafe_compute_mask_ptr(self._words.ctypes.data, self._words.nbytes)
        took = time.perf_counter() - t0
        self.mask_seconds.append(took)
        self._mask_cost += 0.25 * (took - self._mask_cost)

    def _schedule(self) -> None:
        """Hand the next mask to the worker (or leave it to `apply`, see HANDOFF_PROBE).

        The sampling thread holds the GIL until its next C call (the forward pass), so a
        worker only woken here could not start the mask before the pass, and would then
        compete with the pass for the cores. `accept` therefore waits (the GIL released)
        until the worker is inside llguidance: the mask runs beside the Python between
        passes, then during the pass."""
        self._fresh = False
        if not self.overlap or self._stopped:
            return
        self._n_scheduled += 1
        if self._handoff_cost > self._mask_cost and self._n_scheduled % HANDOFF_PROBE:
            return  # the hand-over costs more than the mask: `apply` computes it
        t0 = time.perf_counter()
        started = threading.Lock()
        started.acquire()
        self._future = _executor().submit(self._compute, started, t0)
        started.acquire(timeout=START_WAIT_S)  # (all workers busy with other sessions' masks: go on)
        self._handing = time.perf_counter() - t0

    def _ready(self) -> None:
        if self._future is not None:
            t0 = time.perf_counter()
            self._future.result()
            waited = time.perf_counter() - t0
            self.wait_seconds.append(waited)
            self._future = None
            self._handoff_cost += 0.25 * (self._handing + waited - self._handoff_cost)
        elif not self._fresh:
            self._compute()
        self._fresh = True

    def allowed(self) -> np.ndarray:
        """The tokens allowed now, as booleans over the vocabulary."""
        self._ready()
        return self._bools()

    def _bools(self) -> np.ndarray:
        bits = np.unpackbits(self._words.view(np.uint8), bitorder="little", count=self.n_vocab)
        return bits.view(bool)

    def apply(self, c: Candidates, history) -> None:
        if not self.active:
            return
        self._ready()
        ok = None  # the allowed tokens as booleans: made only where a guard or the budget narrows them
        if self.keys is not None:
            banned = self.keys.banned()
            if banned:
                ok = self._bools()
                kept = ok.copy()
                kept[banned] = False
                if kept.any():  # never a dead end: the grammar's own choice wins over the guard
                    ok = kept
        if self.repeats is not None and not self.repeats.repeated and self.repeats.seen:
            ok = self._bools() if ok is None else ok
            here = self._braces[ok[self._braces]]
            banned = [int(t) for t in here if self.repeats.runs_past_repeat(self._token_bytes[t])]
            if banned:
                kept = ok.copy()
                kept[banned] = False
                if kept.any():
                    ok = kept
        if self.budget is not None and self.budget.engaged():
            if c.full:
                logits = c.logits
            else:
                logits = np.full(self.n_vocab, -np.inf, np.float32)
                inside = c.ids < self.n_vocab
                logits[c.ids[inside]] = c.values[inside]
            ok = (self._bools() if ok is None else ok).copy()
            self.budget.narrow(ok, logits)
        if c.full:
            if ok is None:  # the grammar's mask alone: left packed, applied when the logits are read
                c.defer_mask(self._words.copy(), self.n_vocab)
                return
            n = min(c.n_full, self.n_vocab)
            logits = c.logits
            np.copyto(logits[:n], -np.inf, where=~ok[:n])
            if len(logits) > n:
                logits[n:] = -np.inf
        else:
            if ok is None:
                inside = c.ids < self.n_vocab
                ids = np.where(inside, c.ids, 0)
                keep = inside & ((self._words[ids >> 5].view(np.uint32) >> (ids & 31).astype(np.uint32)) & 1).astype(bool)
            else:
                keep = ok[np.minimum(c.ids, self.n_vocab - 1)] & (c.ids < self.n_vocab)
            c.ids, c.values = c.ids[keep], c.values[keep]

    def accept(self, token: int) -> None:
        if not self.active:
            if self.budget is not None:
                self.budget.counted()
            self._watch(token)
            if self.active and self.budget is not None:
                self.budget.restarted()
            return
        if self._future is not None:  # chosen without apply (not expected): let the mask finish first
            self._ready()
        if not self.matcher.consume_token(int(token)):
            raise GenerationError(f"the grammar rejected token {token}: {self.matcher.get_error()}")
        if self.budget is not None:
            self.budget.accepted(int(token))
        if self.keys is not None or self.repeats is not None:
            piece = self.lt.decode_bytes([int(token)])
            if self.keys is not None:
                self.keys.feed(piece)
            if self.repeats is not None and self.repeats.feed(piece):
                self.budget.close()
        self._note_state()
        self._schedule()

    def _note_state(self) -> None:
        # read now, on this thread: the matcher is busy on the worker once the next mask starts
        self._stopped = self.matcher.is_stopped()
        self._accepting = self.matcher.is_accepting()

    # -- lazy constraints --------------------------------------------------------------

    def _watch(self, token: int) -> None:
        """Before a trigger: look for one in what was generated; when found, give the
        grammar everything from the trigger on and start masking."""
        start = None
        for t in self._triggers:
            if t.token is not None and t.token == token:
                self._activate(tokens=[int(token)])
                return
        piece = self._bytes[token] if token < len(self._bytes) else b""
        if piece[:1] == b"\xff":
            piece = b""  # a special token is no text
        self._text += piece
        text = self._text.decode("utf-8", "surrogateescape")
        for t in self._triggers:
            if t.word is not None:
                at = text.find(t.word)
                if at >= 0:
                    start = at if start is None else min(start, at)
        for p in self._patterns:
            m = p.search(text)
            if m:
                at = next((m.start(g) for g in range(1, (m.lastindex or 0) + 1) if m.group(g)), m.start())
                start = at if start is None else min(start, at)
        if start is not None:
            self._activate(data=text[start:].encode("utf-8", "surrogateescape"))

    def _activate(self, tokens=None, data: bytes | None = None) -> None:
        self.active = True
        if data is not None:
            tokens = self.lt.tokenize_bytes(data)
            self.trigger_text = data.decode("utf-8", "replace")
        if tokens and not self.matcher.consume_tokens(tokens):
            shown = self.trigger_text if data is not None else f"token {tokens[0]}"
            raise GrammarError(f"the lazy grammar does not accept what its trigger starts ({shown!r:.80}): {self.matcher.get_error()}")
        taken = data if data is not None else self.lt.decode_bytes([int(t) for t in tokens or ()])
        if self.keys is None and self.constraint.is_json:
            from .json_keys import KeyGuard

            self.keys = KeyGuard(self._bytes)
        for guard in (self.keys, self.repeats):
            if guard is not None:
                guard.feed(taken)
        self._note_state()
        self._schedule()

    # -- how it ends ---------------------------------------------------------------------

    def finished(self) -> bool:
        """The grammar is complete and allows nothing more."""
        return self.active and self._stopped

    def incomplete(self) -> bool:
        """The output so far stops short of what the grammar requires."""
        return self.active and not self._accepting

    def shortest(self) -> int | None:
        """Tokens of the grammar's shortest value from its start (with a budget; None: not known)."""
        return self.budget.shortest_at_start if self.budget is not None else None


def processor_for(options, tokenizer, n_vocab: int | None = None, room: int | None = None) -> GrammarProcessor | None:
    """The processor for a `GenerateOptions`' constraint, or None when it has none.
    ``room``: the tokens the context has left for the generation (None: no limit)."""
    constraint = from_options(options)
    if constraint is None:
        return None
    limits = [n for n in (getattr(options, "max_tokens", None), room) if n is not None]
    return GrammarProcessor(constraint, tokenizer, n_vocab, budget=min(limits) if limits else None)
