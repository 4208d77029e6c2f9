"""Choosing the next token: a chain of processors over the candidates.

The default chain follows llama.cpp's order: penalties (repetition, presence and
frequency), token masks (banned tokens; a grammar's mask plugs in here), top-k, top-p,
min-p, temperature, then the draw. Each step is a small `Processor` object, so a grammar
(structured output), Whisper's timestamp rules or speculative verification is one more
object in the chain, not a change to the session.

Processors declare what they need from the forward pass (`needs`): greedy decoding
without penalties or masks reads back one integer (the device's argmax); a chain that
only cuts to the top k reads back k ids and values; anything that looks at every logit
reads them all. The same seed gives the same tokens for the same logits.
"""

from __future__ import annotations

import os

import attrs
import numpy as np

from ..errors import InvalidOptions, SessionError

# What a forward pass returns for the sampler, from cheapest to fullest.
NEEDS_ARGMAX, NEEDS_TOP_K, NEEDS_LOGITS = 0, 1, 2


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise InvalidOptions(msg)


@attrs.frozen
class SamplingOptions:
    temperature: float = 0.8
    top_k: int = 40  # 0: off
    top_p: float = 0.95  # 1.0: off
    min_p: float = 0.05  # 0.0: off
    repeat_penalty: float = 1.0  # 1.0: off
    repeat_last_n: int = 64  # tokens of history the penalties look at; -1: all
    presence_penalty: float = 0.0  # subtracted once from every token already present
    frequency_penalty: float = 0.0  # subtracted per occurrence
    seed: int | None = None  # None or negative: a fresh random seed

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0 or self.top_k == 1

    def __attrs_post_init__(self):
        for name in ("temperature", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty"):
            v = getattr(self, name)
            _check(
                isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and np.isfinite(v),
                f"{name} must be a finite number, got {v!r}",
            )
        for name in ("top_k", "repeat_last_n"):
            v = getattr(self, name)
            _check(isinstance(v, (int, np.integer)) and not isinstance(v, bool), f"{name} must be an integer, got {v!r}")
        _check(self.top_k >= 0, f"top_k must be >= 0, got {self.top_k}")
        _check(0.0 < self.top_p <= 1.0, f"top_p must be in (0, 1], got {self.top_p}")
        _check(0.0 <= self.min_p <= 1.0, f"min_p must be in [0, 1], got {self.min_p}")
        _check(self.repeat_penalty > 0.0, f"repeat_penalty must be > 0, got {self.repeat_penalty}")
        _check(self.repeat_last_n >= -1, f"repeat_last_n must be -1 (all) or >= 0, got {self.repeat_last_n}")
        _check(
            self.seed is None or (isinstance(self.seed, (int, np.integer)) and not isinstance(self.seed, bool)),
            f"seed must be an integer, got {self.seed!r}",
        )


class Candidates:
    """The tokens still in play. Full: ``logits`` over the whole vocabulary (float32,
    the processor's own copy). Narrowed: ``ids`` and their ``values`` (float64), best
    first, once a top-k cut (or the device's top-k) has picked them.

    Full logits may be given ``shared`` (another's array, copied on the first read of
    ``logits``); banned ids (`exclude`) and a grammar's mask (`defer_mask`) then stay
    pending until that read: greedy decoding takes `argmax` over them without a copy, so
    on a 262k vocabulary a constrained step costs one pass over the logits."""

    def __init__(self, logits: np.ndarray | None = None, ids: np.ndarray | None = None, values: np.ndarray | None = None,
                 shared: bool = False):  # fmt: skip
        self._logits = logits
        self._shared = shared and logits is not None
        self._words: np.ndarray | None = None  # a pending mask: a bit per token, little-endian u32 words
        self._n_masked = 0  # ids the pending mask covers; those from here on are excluded
        self._top: int | None = None  # np.argmax of the full logits as given, before any write
        self._excluded: np.ndarray | None = None  # ids to set to -inf on the first read (`exclude`)
        self.ids = ids
        self.values = values

    @property
    def logits(self) -> np.ndarray | None:
        self._top = None  # the reader may write
        if self._shared:
            self._logits, self._shared = np.array(self._logits, np.float32, copy=True), False
        if self._excluded is not None:
            ids, self._excluded = self._excluded, None
            self._logits[ids] = -np.inf
        if self._words is not None:
            words, n, self._words = self._words, self._n_masked, None
            apply_packed_mask(self._logits, words, n)
        return self._logits

    @logits.setter
    def logits(self, value: np.ndarray | None) -> None:
        self._logits, self._shared, self._words, self._top, self._excluded = value, False, None, None, None

    @property
    def full(self) -> bool:
        return self._logits is not None

    @property
    def n_full(self) -> int:
        """The length of the full logits (read without applying a pending mask)."""
        return self._logits.shape[0]

    def top(self) -> int:
        """np.argmax of the full logits, a pending mask not counted (kept until they are read)."""
        if self._top is None:
            self._top = int(np.argmax(self._logits))
        return self._top

    def has_nan(self) -> bool:
        """Whether the full logits hold a NaN (read without applying a pending mask):
        np.argmax stops at the first NaN, so the pass `argmax` needs tells, with no
        temporary (np.isnan(x).any() takes twice as long on a 262k vocabulary)."""
        return bool(np.isnan(self._logits[self.top()])) if self._logits.size else False

    def defer_mask(self, words: np.ndarray, n: int) -> None:
        """Allow only the ids whose bit is set in ``words`` (packed: id i is bit i % 32 of
        word i // 32), among the first ``n``; applied when ``logits`` is next read. The
        words must stay unchanged until then. Only one mask may be pending."""
        if self._words is not None:
            self.logits  # noqa: B018 - applies the mask already pending
        self._words, self._n_masked = words, n

    def exclude(self, ids: np.ndarray) -> None:
        """Set the logits of ``ids`` (valid ids) to -inf: at once if they are this object's
        own, else (shared) when ``logits`` is first read."""
        if not self._shared:
            self.logits[ids] = -np.inf
        elif self._excluded is None:
            self._excluded = ids
        else:
            self._excluded = np.concatenate([self._excluded, ids])

    def _allows(self, t: int) -> bool:
        """Whether the pending mask and exclusions leave id ``t``."""
        if self._words is not None and not (t < self._n_masked and (int(self._words[t >> 5]) >> (t & 31)) & 1):
            return False
        return self._excluded is None or not bool((self._excluded == t).any())

    def argmax(self) -> int:
        """The id of the largest logit that the pending mask and exclusions allow (the
        lowest id on a tie, as np.argmax): the largest logit overall when they leave it
        (the common case), else the masked array's argmax."""
        if self._words is not None or self._excluded is not None:
            t = self.top()
            if self._allows(t):
                return t  # every other logit is lower, or equal at a higher id
        return int(np.argmax(self.logits))

    def value_at(self, t: int) -> float:
        """The logit of id ``t``, pending masks counted (-inf where they exclude ``t``)."""
        return float(self._logits[t]) if self._allows(t) else float("-inf")

    def narrow(self, k: int = 0) -> None:
        """Keep the k best (all when k is 0 or at least the vocabulary), sorted best first."""
        if not self.full:
            if 0 < k < len(self.ids):
                self.ids, self.values = self.ids[:k], self.values[:k]
            return
        logits = self.logits
        n = logits.shape[0]
        if 0 < k < n:
            ids = np.argpartition(-logits, k - 1)[:k]
        else:
            ids = np.arange(n)
        ids = ids[np.argsort(-logits[ids], kind="stable")]
        self.ids, self.values, self.logits = ids, logits[ids].astype(np.float64), None


def apply_packed_mask(logits: np.ndarray, words: np.ndarray, n: int) -> None:
    """Set to -inf, in place, every logit whose bit in ``words`` is clear, and every logit
    at or beyond ``n`` (``words``: a bit per id, little-endian u32 words, as llguidance writes)."""
    m = min(n, logits.shape[0])
    bits = np.unpackbits(words.view(np.uint8), bitorder="little", count=m)
    np.copyto(logits[:m], -np.inf, where=bits == 0)
    logits[m:] = -np.inf


def all_finite(x: np.ndarray, top: int | None = None) -> bool:
    """Whether every value is finite: np.argmax and np.argmin land on the first NaN, else
    on the largest and smallest values, so two passes with no temporary tell (one, given
    ``top``, the flat np.argmax already known)."""
    if not x.size:
        return True
    top = int(np.argmax(x)) if top is None else top
    return bool(np.isfinite(x.flat[top]) and np.isfinite(x.flat[int(np.argmin(x))]))


class Processor:
    """One step of the chain. ``needs``: what of the forward pass it must see."""

    needs = NEEDS_LOGITS

    def apply(self, c: Candidates, history) -> None:
        """Change the candidates in place."""

    def accept(self, token: int) -> None:  # noqa: B027 - optional hook
        """Told the token that was chosen (stateful processors such as grammars advance)."""

    def finished(self) -> bool:
        """True when nothing more may follow (a grammar that is complete): the session
        ends the generation with FinishReason.GRAMMAR."""
        return False

    def incomplete(self) -> bool:
        """True when the output so far stops short of what this processor requires (a
        grammar not at a point where it can end); the summary reports it."""
        return False


def apply_repeat_penalty(logits: np.ndarray, history, penalty: float, last_n: int) -> None:
    """llama.cpp's repetition penalty, in place: divide positive logits, multiply negative ones."""
    if penalty == 1.0 or not len(history) or last_n == 0:
        return
    recent = history if last_n < 0 else history[-last_n:]
    ids = np.unique(np.asarray(recent, dtype=np.int64))
    ids = ids[(ids >= 0) & (ids < logits.shape[0])]
    vals = logits[ids]
    logits[ids] = np.where(vals > 0, vals / penalty, vals * penalty)


@attrs.define
class Penalties(Processor):
    """Repetition penalty (llama.cpp's) and OpenAI's presence and frequency penalties
    over the last ``last_n`` tokens of history."""

    repeat: float = 1.0
    presence: float = 0.0
    frequency: float = 0.0
    last_n: int = 64

    def apply(self, c: Candidates, history) -> None:
        if not len(history) or self.last_n == 0:
            return
        recent = history if self.last_n < 0 else history[-self.last_n :]
        if c.full:
            apply_repeat_penalty(c.logits, recent, self.repeat, -1)
            if self.presence or self.frequency:
                ids, counts = np.unique(np.asarray(recent, np.int64), return_counts=True)
                ok = (ids >= 0) & (ids < c.logits.shape[0])
                c.logits[ids[ok]] -= np.float32(self.presence) + np.float32(self.frequency) * counts[ok].astype(np.float32)
            return
        counts = {}
        for t in recent:
            counts[int(t)] = counts.get(int(t), 0) + 1
        for j, t in enumerate(c.ids):
            n = counts.get(int(t))
            if n:
                v = c.values[j]
                if self.repeat != 1.0:
                    v = v / self.repeat if v > 0 else v * self.repeat
                c.values[j] = v - self.presence - self.frequency * n


@attrs.define
class BanTokens(Processor):
    """Tokens that may never be chosen (end-of-generation tokens under ignore_eos)."""

    ids: tuple[int, ...] = ()

    def apply(self, c: Candidates, history) -> None:
        if not self.ids:
            return
        if c.full:
            banned = np.fromiter(self.ids, dtype=np.int64)
            c.exclude(banned[(banned >= 0) & (banned < c.n_full)])
        elif len(c.ids) <= 64:  # a top-k read-back: a set lookup each (np.isin costs ~10 us a call)
            banned = frozenset(self.ids)
            keep = np.array([t not in banned for t in c.ids.tolist()], dtype=bool)
            c.ids, c.values = c.ids[keep], c.values[keep]
        else:
            keep = ~np.isin(c.ids, np.fromiter(self.ids, dtype=np.int64))
            c.ids, c.values = c.ids[keep], c.values[keep]


@attrs.define
class TopK(Processor):
    k: int = 40
    needs = NEEDS_TOP_K

    def apply(self, c: Candidates, history) -> None:
        c.narrow(self.k)


@attrs.define
class TopP(Processor):
    p: float = 0.95
    needs = NEEDS_TOP_K

    def apply(self, c: Candidates, history) -> None:
        if self.p >= 1.0:
            return
        c.narrow()
        p = np.exp(c.values - c.values[0])
        p /= p.sum()
        keep = int(np.searchsorted(np.cumsum(p), self.p) + 1)
        c.ids, c.values = c.ids[:keep], c.values[:keep]


@attrs.define
class MinP(Processor):
    p: float = 0.05
    needs = NEEDS_TOP_K

    def apply(self, c: Candidates, history) -> None:
        if self.p <= 0.0:
            return
        c.narrow()
        keep = c.values >= c.values[0] + np.log(self.p)
        c.ids, c.values = c.ids[keep], c.values[keep]


@attrs.define
class Temperature(Processor):
    t: float = 0.8
    needs = NEEDS_TOP_K

    def apply(self, c: Candidates, history) -> None:
        c.narrow()
        c.values = c.values / self.t


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(8), "little")


class Sampler:
    """The chain for one generation: `SamplingOptions` become processors; ``extra``
    processors (a grammar, ...) go after the penalties and bans, before the cuts."""

    def __init__(self, options: SamplingOptions | None = None, extra=(), banned=()):
        self.options = o = options or SamplingOptions()
        seed = o.seed if o.seed is not None and o.seed >= 0 else fresh_seed()
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.masks: list[Processor] = []
        if o.repeat_penalty != 1.0 or o.presence_penalty or o.frequency_penalty:
            self.masks.append(Penalties(o.repeat_penalty, o.presence_penalty, o.frequency_penalty, o.repeat_last_n))
        if banned:
            self.masks.append(BanTokens(tuple(int(t) for t in banned)))
        self.masks.extend(extra)
        self.cuts: list[Processor] = []
        if not o.greedy:
            self.cuts = [TopK(o.top_k), TopP(o.top_p), MinP(o.min_p), Temperature(o.temperature)]

    @property
    def processors(self) -> list[Processor]:
        return self.masks + self.cuts

    def needs(self) -> tuple[int, int]:
        """(what the forward pass must return, k for a top-k read-back). Banned tokens
        (ignore_eos) need no whole logits: the best allowed tokens are among the top
        k + (number banned), so that many are read back instead."""
        if any(not isinstance(m, BanTokens) for m in self.masks):
            return NEEDS_LOGITS, 0
        n_banned = len({t for m in self.masks for t in m.ids})
        if self.options.greedy:
            return (NEEDS_TOP_K, n_banned + 1) if n_banned else (NEEDS_ARGMAX, 0)
        if 0 < self.options.top_k:
            return NEEDS_TOP_K, self.options.top_k + n_banned
        return NEEDS_LOGITS, 0

    def sample(self, logits: np.ndarray, history=(), banned=None) -> int:
        """Pick a token id from full ``logits`` ``[n_vocab]`` given the tokens so far."""
        extra = [BanTokens(tuple(int(t) for t in banned))] if banned is not None and len(banned) else []
        c = Candidates(logits=np.array(logits, dtype=np.float32, copy=True).reshape(-1))
        return self._choose(c, history, extra)

    def choose(self, c: Candidates, history) -> int:
        return self._choose(c, history, [])

    def distribution(self, logits: np.ndarray, history, n_vocab: int) -> np.ndarray:
        """What this chain draws from, given full ``logits``: float64 probabilities over
        ``n_vocab`` ids (a one-hot at the choice for greedy decoding). Logits beyond
        ``n_vocab`` are left out and missing ones count as excluded (a draft model's
        vocabulary may be a few padding rows larger or smaller). Stateful processors are
        not told of any choice (`Processor.accept`): speculative decoding judges draft
        tokens with it (`cera.generation.draft_model`)."""
        x = np.full(n_vocab, -np.inf, np.float32)
        m = min(n_vocab, logits.shape[-1])
        x[:m] = logits[:m]
        c = Candidates(logits=x)
        for p in self.masks:
            p.apply(c, history)
        out = np.zeros(n_vocab, np.float64)
        if self.options.greedy:
            out[int(np.argmax(c.logits))] = 1.0
            return out
        for p in self.cuts:
            p.apply(c, history)
        ok = np.isfinite(c.values)
        ids, values = c.ids[ok], c.values[ok]
        if not len(ids):
            raise SessionError("every token is excluded (banned or masked): nothing to sample")
        w = np.exp(values - values.max())
        out[ids] = w / w.sum()
        return out

    def _choose(self, c: Candidates, history, extra) -> int:
        if c.full and c.has_nan():
            raise SessionError("the model returned NaN logits: its weights or the computation are broken")
        for p in self.masks + extra:
            p.apply(c, history)
        if self.options.greedy:
            if c.full:
                token = c.argmax()
            elif not len(c.ids):
                raise SessionError("every token is excluded (banned or masked): nothing to sample")
            else:  # candidates come largest first, the lower id first on a tie: as argmax picks
                token = int(c.ids[int(np.argmax(c.values))])
        else:
            for p in self.cuts:
                p.apply(c, history)
            ok = np.isfinite(c.values)
            if not ok.all():
                c.ids, c.values = c.ids[ok], c.values[ok]
            if not len(c.ids):
                raise SessionError("every token is excluded (banned or masked): nothing to sample")
            p = np.exp(c.values - c.values[0])
            p /= p.sum()
            token = int(c.ids[self.rng.choice(len(c.ids), p=p)])
        if self.options.greedy and c.full and not np.isfinite(c.value_at(token)):
            raise SessionError("every token is excluded (banned or masked): nothing to sample")
        for p in self.processors:
            p.accept(token)
        return token


def log_softmax_at(logits: np.ndarray, ids) -> np.ndarray:
    """log p(id) under softmax(logits), for each id (float64)."""
    x = np.asarray(logits, np.float64).reshape(-1)
    m = x.max()
    lse = m + np.log(np.exp(x - m).sum())
    return x[np.asarray(ids, np.int64)] - lse


__all__ = [
    "BanTokens",
    "Candidates",
    "MinP",
    "Penalties",
    "Processor",
    "Sampler",
    "SamplingOptions",
    "Temperature",
    "TopK",
    "TopP",
    "all_finite",
    "apply_packed_mask",
    "apply_repeat_penalty",
    "log_softmax_at",
]
