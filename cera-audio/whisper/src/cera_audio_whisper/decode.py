"""Decoding one 30 s window: greedy, beam search, and sampling at a temperature.

The encoder's memory is stored once (slot 0); the other slots a search uses (beams,
samples) hold only their hypotheses' caches and read slot 0's memory (the decoder's
cross-attention is shared within a batch). Each step runs the decoder on one new token
per live hypothesis as one batch (`cera.generation.runtime.Runner.forward`), and the rules of `rules.py` mask the logits
before a token is chosen. Log-probabilities are those of the masked logits (as
CTranslate2 and Whisper score hypotheses).

The prompt (previous text, the start-of-transcript sequence) is evaluated once in slot 0:
first up to and including the start token, whose logits give the no-speech probability
(and the language, see `detect_language`), then the rest.
"""

from __future__ import annotations

import attrs
import numpy as np

from cera.graph.builder import Outputs
from cera.generation.runtime import SeqStep
from cera.generation.sampling import Candidates

from .rules import log_prob, log_softmax

LOGITS = Outputs(("logits",))


# -- the state's slots ------------------------------------------------------------------------
# Beams and samples start from the prompt's cache, so slots are copied rather than
# recomputed. kv_reset touches only the bookkeeping every `cera.state.HostState` keeps on
# the host; the copies are the state's own (`HostState.copy_cells`: on the device for a
# GPU backend's state).


def kv_reset(state, slot: int) -> None:
    """Forget a slot's self-attention cells but keep its cross-attention memory."""
    n = int(state.n_filled[slot])
    state.pos[slot, :n] = -1
    state.n_filled[slot] = 0


# -- results ------------------------------------------------------------------------------------


@attrs.frozen
class DecodeResult:
    tokens: tuple[int, ...]  # sampled tokens, without the end token
    sum_logprob: float  # including the end token's, when it was reached
    no_speech_prob: float
    temperature: float

    @property
    def avg_logprob(self) -> float:
        return self.sum_logprob / (len(self.tokens) + 1)


@attrs.frozen
class DecodeOptions:
    beam_size: int = 5
    best_of: int = 5
    patience: float = 1.0
    length_penalty: float = 1.0
    max_length: int = 448  # prompt and sampled tokens together


def _log_softmax_parts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's log-softmax as ``z - lse[:, None]`` (`rules.log_softmax_rows`'s
    arithmetic, the last subtraction left to the few entries a step reads)."""
    x = np.asarray(x, np.float64)
    m = np.max(x, axis=-1, keepdims=True)
    z = x - np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return z, np.log(np.sum(np.exp(z), axis=-1))


BLOCK = 64  # logits per block in `_best`


def _best(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of at least the ``k`` largest finite values of the row ``x`` (all of them
    on a tie at the k-th), in no order; fewer where fewer are finite. The k-th largest
    block maximum is a lower bound of the k-th largest value (k blocks reach it), so only
    the values at or above it are candidates: a compare over the row instead of a
    partition of it (with the timestamp rules masking most of a row, numpy's partition
    took 3.6 ms a step on 5 x 51,864 logits)."""
    n = x.shape[0] // BLOCK * BLOCK
    maxima = x[:n].reshape(-1, BLOCK).max(axis=1)
    if n < x.shape[0]:
        maxima = np.append(maxima, x[n:].max())
    k = min(k, maxima.shape[0])
    lower = -np.partition(-maxima, k - 1)[k - 1]
    if not np.isfinite(lower):  # fewer than k blocks hold an allowed token: take the allowed ones
        return np.flatnonzero(np.isfinite(x))
    return np.flatnonzero(x >= lower)


class WindowDecoder:
    """Decodes windows of one model with one set of rules."""

    def __init__(self, model, processors, seed: int | None = None):
        self.model = model
        self.processors = processors
        self.rng = np.random.default_rng(seed)
        self.eot = model.tokens["eot"]

    def _masked(self, logits: np.ndarray, history) -> np.ndarray:
        c = Candidates(np.array(logits, np.float32, copy=True))
        for p in self.processors:
            p.apply(c, history)
        return c.logits

    def _step(self, state, slots, tokens, positions) -> np.ndarray:
        steps = [SeqStep(s, [t], [p]) for s, t, p in zip(slots, tokens, positions, strict=True)]
        return self.model.dec_runner.forward(state, steps, LOGITS)["logits"]

    def prompt(self, state, prompt: list[int], sot_index: int) -> tuple[np.ndarray, np.ndarray]:
        """Evaluate the prompt in slot 0: (logits at the start token, logits at the end)."""
        kv_reset(state, 0)
        head = prompt[: sot_index + 1]
        at_sot = self.model.dec_runner.forward(state, [SeqStep(0, head, range(len(head)))], LOGITS)["logits"][0]
        rest = prompt[sot_index + 1 :]
        if not rest:
            return at_sot, at_sot
        last = self.model.dec_runner.forward(
            state, [SeqStep(0, rest, range(len(head), len(prompt)))], LOGITS
        )["logits"][0]  # fmt: skip
        return at_sot, last

    def no_speech(self, at_sot: np.ndarray) -> float:
        p = np.exp(log_softmax(at_sot))
        return float(p[self.model.tokens["no_speech"]])

    def greedy(self, state, prompt, sot_index, opts: DecodeOptions) -> DecodeResult:
        at_sot, logits = self.prompt(state, prompt, sot_index)
        tokens: list[int] = []
        total = 0.0
        pos = len(prompt)
        while True:
            x = self._masked(logits, tokens)
            t = int(np.argmax(x))
            total += log_prob(x, t)
            if t == self.eot:
                break
            tokens.append(t)
            if pos + 1 >= opts.max_length:
                break
            logits = self._step(state, [0], [t], [pos])[0]
            pos += 1
        return DecodeResult(tuple(tokens), total, self.no_speech(at_sot), 0.0)

    def sample(self, state, prompt, sot_index, opts: DecodeOptions, temperature: float) -> DecodeResult:
        """best_of hypotheses sampled at ``temperature``; the one of best normalised score."""
        n = max(1, opts.best_of)
        at_sot, logits = self.prompt(state, prompt, sot_index)
        state.copy_cells([0] * (n - 1), list(range(1, n)))
        hyps = [[] for _ in range(n)]
        scores = [0.0] * n
        done = [False] * n
        rows = [logits] * n
        slot_of = list(range(n))  # the batch reads slot 0's memory: slot 0 always holds a live one
        pos = len(prompt)
        while not all(done):
            live, chosen = [], []
            for i in range(n):
                if done[i]:
                    continue
                x = self._masked(rows[i], hyps[i])
                lp = log_softmax(x)
                p = np.exp(log_softmax(x / temperature))
                t = int(self.rng.choice(len(p), p=p / p.sum()))
                scores[i] += float(lp[t])
                if t == self.eot:
                    done[i] = True
                    continue
                hyps[i].append(t)
                if pos + 1 >= opts.max_length:
                    done[i] = True
                    continue
                live.append(i)
                chosen.append(t)
            if not live:
                break
            if all(slot_of[i] != 0 for i in live):  # slot 0's hypothesis ended: move a live one in
                state.copy_cells([slot_of[live[0]]], [0])
                slot_of[live[0]] = 0
            order = sorted(range(len(live)), key=lambda j: slot_of[live[j]])
            live, chosen = [live[j] for j in order], [chosen[j] for j in order]
            out = self._step(state, [slot_of[i] for i in live], chosen, [pos] * len(live))
            for j, i in enumerate(live):
                rows[i] = out[j]
            pos += 1
        best = max(range(n), key=lambda i: scores[i] / max(1, len(hyps[i])) ** opts.length_penalty)
        return DecodeResult(tuple(hyps[best]), scores[best], self.no_speech(at_sot), temperature)

    def beam(self, state, prompt, sot_index, opts: DecodeOptions) -> DecodeResult:
        """Beam search: each step, every beam's best continuations (by cumulative
        log-probability) compete; a candidate ending in the end token is finished, the
        others fill the beams again; done when beam_size * patience are finished. The
        result is the finished hypothesis of best score (sum / length ** length_penalty)."""
        K = opts.beam_size
        at_sot, logits = self.prompt(state, prompt, sot_index)
        beams: list[tuple[list[int], float]] = [([], 0.0)]
        rows = [logits]
        finished: list[tuple[list[int], float]] = []
        need = max(1, int(round(K * opts.patience)))
        pos = len(prompt)
        while True:
            cands = []
            masked = np.stack([self._masked(rows[b], toks) for b, (toks, _) in enumerate(beams)])
            z, lse = _log_softmax_parts(masked)  # log-probabilities z - lse, one numpy pass for all beams
            for b, (_toks, score) in enumerate(beams):
                top = _best(masked[b], K + 1)
                lp = z[b, top] - lse[b]
                order = np.lexsort((top, -lp))  # best first, lower id first on a tie
                for j in order[: K + 1]:
                    if np.isfinite(lp[j]):
                        cands.append((score + float(lp[j]), b, int(top[j])))
            cands.sort(key=lambda c: -c[0])
            new_beams, src = [], []
            for score, b, t in cands:
                if t == self.eot:
                    if len(finished) < need:
                        finished.append((beams[b][0], score))
                    continue
                new_beams.append((beams[b][0] + [t], score))
                src.append(b)
                if len(new_beams) == K:
                    break
            if len(finished) >= need or not new_beams or pos + 1 >= opts.max_length:
                if len(finished) < need or not finished:
                    finished += [(t, s) for t, s in new_beams[: need - len(finished)] or beams]
                break
            moved = [(s, d) for d, s in enumerate(src) if s != d]  # a beam that stays in its slot is not copied
            if moved:
                state.copy_cells([s for s, _ in moved], [d for _, d in moved])
            out = self._step(state, list(range(len(new_beams))), [t[-1] for t, _ in new_beams], [pos] * len(new_beams))
            beams = new_beams
            rows = list(out)
            pos += 1

        def norm(item):
            toks, s = item
            return s / max(1, len(toks)) ** opts.length_penalty

        toks, s = max(finished, key=norm)
        return DecodeResult(tuple(toks), s, self.no_speech(at_sot), 0.0)
