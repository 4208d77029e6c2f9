"""Whisper's decoding rules as processors of cera's sampling chain (`cera.generation.sampling.Processor`).

Each looks at one hypothesis's logits over the whole vocabulary and masks what Whisper
forbids there; ``history`` is the tokens sampled so far after the prompt. Together, in
this order, they are the rules faster-whisper (CTranslate2) and whisper.cpp apply:

1. `SuppressTokens`: never these (non-speech symbols, the task and start tokens, ...).
2. `SuppressBlank`: not a blank or the end at the first sampled position.
3. `TimestampRules`: the first token is a timestamp (at most ``max_initial`` steps of
   0.02 s); timestamps come in pairs (two in a row are followed by text, one after text
   by another timestamp or the end); they never decrease, and a segment's end is later
   than its start; and where the timestamps together are likelier than any single text
   token, a timestamp it is.
"""

from __future__ import annotations

import numpy as np

from cera.generation.sampling import Candidates, Processor

NEG = -np.inf

# Symbols that are never spoken: speaker tags, music notes, brackets (Whisper's list of
# "non-speech" tokens; basic punctuation stays allowed).
_SYMBOLS = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』') + (
    "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
)
_MUSIC = "♩♪♫♬♭♮♯"  # U+2640..U+267F: a first token of their UTF-8 form is safe to suppress


def non_speech_tokens(encode) -> list[int]:
    """Tokens to suppress so that no speaker tags or annotations are transcribed.
    ``encode(text) -> ids`` without special tokens."""
    out = {encode(" -")[0], encode(" '")[0]}
    for sym in _SYMBOLS + list(_MUSIC):
        for ids in (encode(sym), encode(" " + sym)):
            if len(ids) == 1 or sym in _MUSIC:
                out.add(ids[0])
    return sorted(out)


class SuppressTokens(Processor):
    def __init__(self, ids):
        self.ids = np.asarray(sorted(set(int(i) for i in ids)), np.int64)

    def apply(self, c: Candidates, history) -> None:
        c.logits[self.ids[self.ids < len(c.logits)]] = NEG


class SuppressBlank(Processor):
    """At the first sampled position: not a blank (" ") and not the end."""

    def __init__(self, ids):
        self.ids = np.asarray(sorted(set(int(i) for i in ids)), np.int64)

    def apply(self, c: Candidates, history) -> None:
        if len(history) == 0:
            c.logits[self.ids] = NEG


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    m = np.max(x)
    if not np.isfinite(m):
        return np.full_like(x, NEG)
    z = x - m
    return z - np.log(np.sum(np.exp(z)))


def log_prob(x: np.ndarray, t: int) -> float:
    """``log_softmax(x)[t]`` (the same arithmetic), without the whole row's subtraction."""
    x = np.asarray(x, np.float64)
    m = np.max(x)
    if not np.isfinite(m):
        return NEG
    z = x - m
    return float(z[t] - np.log(np.sum(np.exp(z))))


def log_softmax_rows(x: np.ndarray) -> np.ndarray:
    """`log_softmax` of each row (rows with nothing allowed stay -inf)."""
    x = np.asarray(x, np.float64)
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    z = x - m
    with np.errstate(divide="ignore"):
        return z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))


class TimestampRules(Processor):
    def __init__(self, eot: int, no_timestamps: int, timestamp_begin: int, max_initial: int | None):
        self.eot = eot
        self.no_timestamps = no_timestamps
        self.ts = timestamp_begin
        self.max_initial = max_initial

    def apply(self, c: Candidates, history) -> None:
        x = c.logits
        ts = self.ts
        x[self.no_timestamps] = NEG
        n = len(history)
        if n == 0:
            x[:ts] = NEG  # start with a timestamp
            if self.max_initial is not None:
                x[ts + self.max_initial + 1 :] = NEG
        else:
            last = history[-1]
            penultimate = history[-2] if n >= 2 else last
            if last >= ts:
                if penultimate >= ts:
                    x[ts:] = NEG  # a pair just closed: text (or the end) follows
                else:
                    x[: self.eot] = NEG  # a segment's end: another timestamp or the end
            stamps = [t for t in history if t >= ts]
            if stamps:
                # never earlier than the last timestamp; a new segment starts after the
                # last one ended (strictly later unless it closes a pair)
                floor = stamps[-1] if (last >= ts and penultimate < ts) else stamps[-1] + 1
                x[ts:floor] = NEG
        # The timestamps' total probability against the likeliest text token: the softmax's
        # normaliser is common to both, so logits compare as log-probabilities do.
        stamps_x = x[ts:].astype(np.float64)
        top = stamps_x.max()
        if np.isfinite(top):
            total = top + np.log(np.sum(np.exp(stamps_x - top)))
            if total > np.max(x[:ts]):
                x[:ts] = NEG
