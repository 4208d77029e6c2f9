"""Helpers of the Whisper tests (a module of its own: conftest names collide across folders)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"


def clip(name: str) -> np.ndarray:
    import soundfile as sf

    x, rate = sf.read(str(DATA / f"{name}.flac"), dtype="float32")
    assert rate == 16000 and x.ndim == 1
    return x


def edit_distance(a, b) -> int:
    """Levenshtein distance between two sequences."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def words(text: str) -> list[str]:
    return [w.strip(".,?!;:").lower() for w in text.split() if w.strip(".,?!;:")]
