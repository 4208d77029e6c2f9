"""Online clustering of speaker embeddings: speakers in order of arrival.

Each embedding (L2-normalized) goes to the nearest speaker by cosine distance
(1 - cosine similarity to the speaker's centroid, the normalized sum of its embeddings);
if the nearest is farther than ``threshold`` (``threshold + YOUNG_MARGIN`` from a speaker
heard for under ``YOUNG_S`` seconds, whose centroid is still noisy) and fewer than
``max_speakers`` are known, it starts a new speaker. Speaker indices are given in the
order speakers first appear. The decision for an embedding is final: nothing is
relabelled later, so turns can be handed out as soon as they are heard.
"""

from __future__ import annotations

import numpy as np

from cera.errors import AudioError

from .thresholds import DEFAULT_MAX_SPEAKERS, DEFAULT_THRESHOLD, YOUNG_MARGIN, YOUNG_S


class OnlineClusters:
    def __init__(self, threshold: float = DEFAULT_THRESHOLD, max_speakers: int = DEFAULT_MAX_SPEAKERS):
        if not 0.0 < threshold < 2.0:
            raise AudioError(f"a cosine-distance threshold must be in (0, 2), got {threshold}")
        if not (isinstance(max_speakers, int) and max_speakers >= 1):
            raise AudioError(f"max_speakers must be a whole number of at least 1, got {max_speakers!r}")
        self.threshold = float(threshold)
        self.max_speakers = max_speakers
        self._sums: list[np.ndarray] = []
        self._firm: list[bool] = []  # opened or joined by an embedding that may open a speaker
        self._seconds: list[float] = []  # the weights (seconds of audio) in each centroid

    @property
    def n_speakers(self) -> int:
        return len(self._sums)

    def reset(self) -> None:
        self._sums = []
        self._firm = []
        self._seconds = []

    def distances(self, embedding: np.ndarray) -> np.ndarray:
        """Cosine distance of ``embedding`` to each speaker's centroid, in speaker order."""
        if not self._sums:
            return np.zeros(0)
        c = np.stack(self._sums)
        c = c / np.linalg.norm(c, axis=1, keepdims=True)
        e = np.asarray(embedding, np.float64)
        return 1.0 - c @ (e / np.linalg.norm(e))

    def assign(self, embedding: np.ndarray, weight: float = 1.0, may_open: bool = True) -> int:
        """The speaker of ``embedding`` (a new one where it is far from all and ``may_open``),
        updating its centroid. With ``may_open`` false (a piece too short to trust) it goes to
        the nearest known speaker; where none is known it opens one all the same, but only
        provisionally: the first embedding that may open a speaker and is far from it takes
        that slot over (its centroid restarts), so a short first piece leaves no speaker of
        its own."""
        e = np.asarray(embedding, np.float64)
        if e.ndim != 1 or not np.all(np.isfinite(e)) or not np.linalg.norm(e) > 0:
            raise AudioError("a speaker embedding must be a finite, non-zero vector")
        e = e / np.linalg.norm(e)
        d = self.distances(e)
        # a speaker heard for less than YOUNG_S has a noisy centroid: it reaches YOUNG_MARGIN farther
        reach = self.threshold + YOUNG_MARGIN * (np.asarray(self._seconds) < YOUNG_S)
        if len(d) and (np.any(d <= reach) or len(d) >= self.max_speakers or not may_open):
            k = int(np.argmin(d))
            self._sums[k] = self._sums[k] + weight * e
            self._seconds[k] += weight
            self._firm[k] = self._firm[k] or may_open
            return k
        if may_open and not all(self._firm):
            k = self._firm.index(False)
            self._sums[k], self._firm[k], self._seconds[k] = weight * e, True, weight
            return k
        self._sums.append(weight * e)
        self._firm.append(may_open)
        self._seconds.append(weight)
        return len(self._sums) - 1
