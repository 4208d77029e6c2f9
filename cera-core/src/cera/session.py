"""Sessions: a KV cache that persists across calls, and the generation loop.

A session holds the tokens its state has evaluated. Appending text or tokens queues them;
the next `generate` (or `evaluate`) runs only what is queued, so a follow-up turn never
re-evaluates the conversation so far. A long prompt is evaluated in chunks of `n_batch`
tokens, and `cancel()` (safe from any thread) takes effect between chunks and between
generated tokens.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import attrs
import numpy as np

from .errors import ContextFull, SessionError
from .sampling import Sampler, SamplingOptions
from .sink import FinishReason, Sink


@attrs.define
class GenerateOptions:
    """What to generate and when to stop. Sampling fields are those of `SamplingOptions`."""

    max_tokens: int | None = 256  # None: until the context is full
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    seed: int | None = None
    stop: tuple[str, ...] = attrs.field(default=(), converter=tuple)  # stop strings (not included in the text)
    stop_tokens: tuple[int, ...] = attrs.field(default=(), converter=tuple)  # extra stop token ids
    ignore_eos: bool = False  # never pick an end-of-generation token

    def sampling(self) -> SamplingOptions:
        return SamplingOptions(
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            min_p=self.min_p,
            repeat_penalty=self.repeat_penalty,
            repeat_last_n=self.repeat_last_n,
            seed=self.seed,
        )


@attrs.define
class GenerationSummary:
    tokens: list[int]
    text: str
    finish_reason: FinishReason
    n_prompt_tokens: int  # tokens evaluated before the first sample
    prompt_seconds: float
    generate_seconds: float

    @property
    def n_generated(self) -> int:
        return len(self.tokens)

    @property
    def prompt_tokens_per_second(self) -> float:
        return self.n_prompt_tokens / self.prompt_seconds if self.prompt_seconds > 0 else float("nan")

    @property
    def tokens_per_second(self) -> float:
        return self.n_generated / self.generate_seconds if self.generate_seconds > 0 else float("nan")


@attrs.frozen
class Checkpoint:
    tokens: tuple[int, ...]
    pending: tuple[int, ...]
    state: object
    logits: np.ndarray | None


class _StopStrings:
    """Holds back text that could be the start of a stop string."""

    def __init__(self, stops: tuple[str, ...]):
        self.stops = [s for s in stops if s]
        self.held = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """Returns (text safe to emit, whether a stop string was hit)."""
        if not self.stops:
            return text, False
        self.held += text
        hits = [(self.held.find(s), s) for s in self.stops if s in self.held]
        if hits:
            at = min(h[0] for h in hits)
            out, self.held = self.held[:at], ""
            return out, True
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.held)), keep, -1):
                if self.held.endswith(s[:k]):
                    keep = k
                    break
        out = self.held[: len(self.held) - keep]
        self.held = self.held[len(self.held) - keep :]
        return out, False

    def flush(self) -> str:
        out, self.held = self.held, ""
        return out


class Session:
    """One conversation's state on a loaded model. See the module docstring."""

    def __init__(self, loaded, n_ctx: int, kv_type: str = "f16", n_batch: int = 512):
        if n_ctx <= 0:
            raise SessionError(f"n_ctx must be positive, got {n_ctx}")
        if n_batch <= 0:
            raise SessionError(f"n_batch must be positive, got {n_batch}")
        self.loaded = loaded
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.backend = loaded.backend
        self.state = self.backend.new_state(self.model.state_layout(), n_ctx, kv_type)
        self.tokens: list[int] = []  # evaluated, in the state
        self.pending: list[int] = []  # queued for the next evaluation
        self.logits: np.ndarray | None = None  # logits after the last evaluated token
        self._cancel = threading.Event()
        self._lock = threading.Lock()

    # -- input ------------------------------------------------------------------

    def append_tokens(self, ids) -> None:
        ids = [int(t) for t in ids]
        n_vocab = self.model.n_vocab
        bad = [t for t in ids if not 0 <= t < n_vocab]
        if bad:
            raise SessionError(f"token ids {bad[:5]} are outside the vocabulary (0..{n_vocab - 1})")
        self.pending.extend(ids)

    def append_text(self, text: str, parse_special: bool = False, add_special: bool | None = None) -> list[int]:
        """Tokenize and queue text. ``add_special`` (default: only at the very start of
        the session) adds BOS/EOS as the vocabulary asks; ``parse_special`` turns
        special-token text such as ``<|im_start|>`` into those tokens (off for raw user text)."""
        if add_special is None:
            add_special = not self.tokens and not self.pending
        ids = self.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)
        self.append_tokens(ids)
        return ids

    def sync_tokens(self, ids) -> int:
        """Make the session hold exactly ``ids``: keep the longest evaluated prefix they
        share, drop the rest of the state, and queue the remainder. Returns the number of
        tokens reused. This is how a chat re-renders the whole conversation each turn and
        still evaluates only the new part."""
        ids = [int(t) for t in ids]
        common = 0
        for a, b in zip(self.tokens, ids, strict=False):  # lengths differ by design
            if a != b:
                break
            common += 1
        if common == len(ids) and common > 0:
            common -= 1  # re-evaluate the last token so there are fresh logits to sample from
        if common < len(self.tokens):
            self.truncate(common)
        self.pending = []
        self.append_tokens(ids[common:])
        return common

    # -- evaluation -------------------------------------------------------------

    def evaluate(self) -> np.ndarray | None:
        """Run the queued tokens through the model; returns the last token's logits."""
        with self._lock:
            return self._evaluate()

    def _evaluate(self) -> np.ndarray | None:
        if not self.pending:
            return self.logits
        if len(self.tokens) + len(self.pending) > self.n_ctx:
            raise ContextFull(
                f"{len(self.tokens)} tokens in the context plus {len(self.pending)} new ones exceed "
                f"its size of {self.n_ctx}; start a new session with a larger n_ctx or reset this one"
            )
        while self.pending:
            if self._cancel.is_set():
                return None
            chunk = self.pending[: self.n_batch]
            last = len(chunk) == len(self.pending)
            start = len(self.tokens)
            positions = np.arange(start, start + len(chunk), dtype=np.int32)
            self.state.begin(positions)
            try:
                tokens = np.asarray(chunk, dtype=np.int32)
                out = self.backend.execute(self.model, self.state, tokens, positions, "last" if last else "none")
            except BaseException:
                self.state.rollback()
                raise
            self.state.commit()
            self.tokens.extend(chunk)
            del self.pending[: len(chunk)]
            if last:
                self.logits = np.asarray(out, dtype=np.float32).reshape(-1)
        return self.logits

    # -- generation -------------------------------------------------------------

    def generate(self, options: GenerateOptions | None = None, sink: Sink | None = None, **kw) -> GenerationSummary:
        """Generate until a stop condition; streams to ``sink`` and returns a summary."""
        options = _options(options, kw)
        sink = sink or Sink()
        summary = None
        for event in self._run(options):
            if isinstance(event, GenerationSummary):
                summary = event
            elif isinstance(event, int):
                sink.on_token(event)
            else:
                sink.on_text(event)
        sink.on_finish(summary.finish_reason)
        return summary

    def stream(self, options: GenerateOptions | None = None, **kw) -> Iterator[str]:
        """Generate, yielding UTF-8-safe text chunks; `last_summary` holds the summary after."""
        options = _options(options, kw)
        for event in self._run(options):
            if isinstance(event, GenerationSummary):
                self.last_summary = event
            elif isinstance(event, str):
                yield event

    def _run(self, options: GenerateOptions):
        with self._lock:
            self._cancel.clear()
            eog = set(self.tokenizer.eog_ids) | set(options.stop_tokens)
            banned = self.tokenizer.eog_ids if options.ignore_eos else None
            if options.ignore_eos:
                eog = set(options.stop_tokens)
            sampler = Sampler(options.sampling())
            detok = self.tokenizer.detokenizer()
            stops = _StopStrings(options.stop)
            generated: list[int] = []
            text_parts: list[str] = []
            n_prompt = len(self.pending)
            t0 = time.perf_counter()
            logits = self._evaluate()
            t1 = time.perf_counter()
            reason = None
            if logits is None:
                reason = FinishReason.CANCELLED if self._cancel.is_set() else None
                if reason is None:
                    raise SessionError("nothing to generate from: append text or tokens first")
            limit = options.max_tokens
            while reason is None:
                if limit is not None and len(generated) >= limit:
                    reason = FinishReason.LENGTH
                    break
                if self._cancel.is_set():
                    reason = FinishReason.CANCELLED
                    break
                history = self.tokens + self.pending
                token = sampler.sample(logits, history, banned)
                if token in eog:
                    reason = FinishReason.STOP_TOKEN
                    break
                generated.append(token)
                yield token
                piece, hit = stops.feed(detok.feed(token))
                if piece:
                    text_parts.append(piece)
                    yield piece
                if hit:
                    reason = FinishReason.STOP_STRING
                    self.pending.append(token)
                    break
                if len(self.tokens) + len(self.pending) + 1 > self.n_ctx:
                    reason = FinishReason.CONTEXT
                    self.pending.append(token)
                    break
                self.pending.append(token)
                if limit is not None and len(generated) >= limit:
                    # The last token is queued, not evaluated: a follow-up call evaluates it.
                    reason = FinishReason.LENGTH
                    break
                logits = self._evaluate()
                if logits is None:
                    reason = FinishReason.CANCELLED
            if reason != FinishReason.STOP_STRING:
                tail, _ = stops.feed(detok.flush())
                tail += stops.flush()
                if tail:
                    text_parts.append(tail)
                    yield tail
            t2 = time.perf_counter()
            yield GenerationSummary(
                tokens=generated,
                text="".join(text_parts),
                finish_reason=reason,
                n_prompt_tokens=n_prompt,
                prompt_seconds=t1 - t0,
                generate_seconds=t2 - t1,
            )

    # -- control ----------------------------------------------------------------

    def cancel(self) -> None:
        """Stop the current evaluation or generation at the next chunk or token. Thread-safe."""
        self._cancel.set()

    def reset(self) -> None:
        with self._lock:
            self.state.truncate(0)
            self.tokens = []
            self.pending = []
            self.logits = None

    def truncate(self, n: int) -> None:
        """Keep only the first ``n`` evaluated tokens (e.g. to rewind a turn)."""
        if not 0 <= n <= len(self.tokens):
            raise SessionError(f"cannot truncate to {n} tokens: the session holds {len(self.tokens)}")
        self.state.truncate(n)
        del self.tokens[n:]
        self.pending = []
        self.logits = None

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(
            tuple(self.tokens),
            tuple(self.pending),
            self.state.snapshot(),
            None if self.logits is None else self.logits.copy(),
        )

    def restore(self, cp: Checkpoint) -> None:
        with self._lock:
            self.state.restore(cp.state)
            self.tokens = list(cp.tokens)
            self.pending = list(cp.pending)
            self.logits = None if cp.logits is None else cp.logits.copy()

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


def _options(options: GenerateOptions | None, kw: dict) -> GenerateOptions:
    if options is None:
        return GenerateOptions(**kw)
    if kw:
        return attrs.evolve(options, **kw)
    return options
