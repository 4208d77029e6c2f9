"""Choosing the next token from logits.

The chain follows llama.cpp's default order: repetition penalty, top-k, top-p, min-p,
temperature, then a draw from the remaining distribution. Greedy decoding (temperature
<= 0 or top_k == 1) takes the arg-max after penalties. The same seed gives the same
tokens for the same logits.
"""

from __future__ import annotations

import os

import attrs
import numpy as np


@attrs.frozen
class SamplingOptions:
    temperature: float = 0.8
    top_k: int = 40  # 0: off
    top_p: float = 0.95  # 1.0: off
    min_p: float = 0.05  # 0.0: off
    repeat_penalty: float = 1.0  # 1.0: off
    repeat_last_n: int = 64  # tokens of history the penalty looks at; -1: all
    seed: int | None = None  # None: a fresh random seed

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0 or self.top_k == 1

    def __attrs_post_init__(self):
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.repeat_penalty <= 0.0:
            raise ValueError(f"repeat_penalty must be > 0, got {self.repeat_penalty}")


def apply_repeat_penalty(logits: np.ndarray, history, penalty: float, last_n: int) -> None:
    """llama.cpp's repetition penalty, in place: divide positive logits, multiply negative ones."""
    if penalty == 1.0 or not len(history) or last_n == 0:
        return
    recent = history if last_n < 0 else history[-last_n:]
    ids = np.unique(np.asarray(recent, dtype=np.int64))
    ids = ids[(ids >= 0) & (ids < logits.shape[0])]
    vals = logits[ids]
    logits[ids] = np.where(vals > 0, vals / penalty, vals * penalty)


class Sampler:
    def __init__(self, options: SamplingOptions | None = None):
        self.options = options or SamplingOptions()
        seed = self.options.seed
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little")
        self.rng = np.random.Generator(np.random.PCG64(seed))

    def sample(self, logits: np.ndarray, history=(), banned=None) -> int:
        """Pick a token id from ``logits`` ``[n_vocab]`` given the tokens so far."""
        o = self.options
        logits = np.array(logits, dtype=np.float32, copy=True).reshape(-1)
        apply_repeat_penalty(logits, history, o.repeat_penalty, o.repeat_last_n)
        if banned is not None and len(banned):
            logits[np.fromiter(banned, dtype=np.int64)] = -np.inf
        if o.greedy:
            return int(np.argmax(logits))

        # Candidates sorted by logit, best first.
        n = logits.shape[0]
        if 0 < o.top_k < n:
            ids = np.argpartition(-logits, o.top_k - 1)[: o.top_k]
        else:
            ids = np.arange(n)
        ids = ids[np.argsort(-logits[ids], kind="stable")]
        vals = logits[ids].astype(np.float64)
        ok = np.isfinite(vals)
        if not ok.all():
            ids, vals = ids[ok], vals[ok]
            if not len(ids):
                raise ValueError("every token is banned: nothing to sample")

        if o.top_p < 1.0:
            p = np.exp(vals - vals[0])
            p /= p.sum()
            keep = int(np.searchsorted(np.cumsum(p), o.top_p) + 1)
            ids, vals = ids[:keep], vals[:keep]
        if o.min_p > 0.0:
            keep = vals >= vals[0] + np.log(o.min_p)
            ids, vals = ids[keep], vals[keep]

        vals = vals / o.temperature
        p = np.exp(vals - vals[0])
        p /= p.sum()
        return int(ids[self.rng.choice(len(ids), p=p)])
