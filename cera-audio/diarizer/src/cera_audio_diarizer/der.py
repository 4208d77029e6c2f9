"""Diarization error rate (DER) against a reference RTTM, and RTTM reading.

DER = (missed speech + false alarm + speaker confusion) / reference speech, as NIST's
md-eval computes it: time within ``collar`` seconds of any reference boundary (onset or
offset of a reference turn) is not scored, and hypothesis speakers are mapped one to one
onto reference speakers so as to maximize the time they agree on (the optimal mapping,
by trying every assignment where there are few speakers, else greedily). Overlapping
speech counts per speaker: a frame with two reference speakers and one hypothesis speaker
misses one. Computed on a 1 ms grid.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from pathlib import Path

import attrs
import numpy as np

from cera.errors import CeraError

STEP = 0.001  # seconds per grid cell


class RTTMError(CeraError):
    """An RTTM file or line that cannot be read."""


@attrs.frozen
class Turn:
    start: float
    end: float
    speaker: str


@attrs.frozen
class DERResult:
    der: float
    missed: float  # seconds
    false_alarm: float
    confusion: float
    scored: float  # reference speech scored, seconds
    mapping: dict

    def to_json(self) -> dict:
        return {"der": round(self.der, 5), "missed": round(self.missed, 3), "false_alarm": round(self.false_alarm, 3),
                "confusion": round(self.confusion, 3), "scored": round(self.scored, 3), "mapping": self.mapping}  # fmt: skip


def read_rttm(path: str | os.PathLike) -> list[Turn]:
    """The SPEAKER lines of an RTTM file (onset in field 4, duration in 5, speaker in 8)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise RTTMError(f"{path}: cannot read the RTTM file ({e.strerror})") from None
    turns = []
    for n, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0] != "SPEAKER":
            continue
        if len(fields) < 8:
            raise RTTMError(f"{path}:{n}: a SPEAKER line needs at least 8 fields, has {len(fields)}")
        try:
            start, dur = float(fields[3]), float(fields[4])
        except ValueError:
            raise RTTMError(f"{path}:{n}: onset {fields[3]!r} and duration {fields[4]!r} must be numbers") from None
        if not (start >= 0 and dur >= 0):
            raise RTTMError(f"{path}:{n}: negative onset or duration")
        turns.append(Turn(start, start + dur, fields[7]))
    return turns


def _grid(turns: Iterable[Turn], speakers: list[str], n: int) -> np.ndarray:
    g = np.zeros((len(speakers), n), bool)
    index = {s: i for i, s in enumerate(speakers)}
    for t in turns:
        a, b = int(round(t.start / STEP)), int(round(t.end / STEP))
        g[index[t.speaker], max(0, a) : max(0, min(b, n))] = True
    return g


def _best_mapping(agree: np.ndarray) -> list[tuple[int, int]]:
    """(hyp, ref) pairs maximizing the summed agreement ``agree[hyp, ref]``."""
    n_h, n_r = agree.shape
    if n_h == 0 or n_r == 0:
        return []
    if max(n_h, n_r) <= 7:
        best, best_pairs = -1.0, []
        if n_h <= n_r:
            for refs in itertools.permutations(range(n_r), n_h):
                score = sum(agree[h, r] for h, r in enumerate(refs))
                if score > best:
                    best, best_pairs = score, list(enumerate(refs))
        else:
            for hyps in itertools.permutations(range(n_h), n_r):
                score = sum(agree[h, r] for r, h in enumerate(hyps))
                if score > best:
                    best, best_pairs = score, [(h, r) for r, h in enumerate(hyps)]
        return best_pairs
    pairs, used_h, used_r = [], set(), set()
    for flat in np.argsort(-agree, axis=None):
        h, r = divmod(int(flat), n_r)
        if h not in used_h and r not in used_r:
            pairs.append((h, r))
            used_h.add(h)
            used_r.add(r)
    return pairs


def der(reference: list[Turn], hypothesis: list[Turn], collar: float = 0.25) -> DERResult:
    """The DER of ``hypothesis`` against ``reference`` (see the module docstring)."""
    end = max([t.end for t in reference] + [t.end for t in hypothesis] + [0.0])
    n = int(round(end / STEP)) + 1
    ref_spk = sorted({t.speaker for t in reference})
    hyp_spk = sorted({t.speaker for t in hypothesis})
    R = _grid(reference, ref_spk, n)
    H = _grid(hypothesis, hyp_spk, n)
    scored = np.ones(n, bool)
    c = int(round(collar / STEP))
    if c > 0:
        for t in reference:
            for edge in (t.start, t.end):
                e = int(round(edge / STEP))
                scored[max(0, e - c) : min(n, e + c)] = False
    R, H = R[:, scored], H[:, scored]
    n_ref, n_hyp = R.sum(axis=0), H.sum(axis=0)
    agree = (H[:, None, :] & R[None, :, :]).sum(axis=2).astype(float) if len(hyp_spk) and len(ref_spk) else np.zeros((len(hyp_spk), len(ref_spk)))
    pairs = _best_mapping(agree)
    correct = np.zeros(R.shape[1], int)
    for h, r in pairs:
        correct += H[h] & R[r]
    missed = np.maximum(n_ref - n_hyp, 0).sum() * STEP
    false_alarm = np.maximum(n_hyp - n_ref, 0).sum() * STEP
    confusion = (np.minimum(n_ref, n_hyp) - correct).sum() * STEP
    total = n_ref.sum() * STEP
    rate = (missed + false_alarm + confusion) / total if total > 0 else 0.0
    mapping = {hyp_spk[h]: ref_spk[r] for h, r in pairs}
    return DERResult(float(rate), float(missed), float(false_alarm), float(confusion), float(total), mapping)
