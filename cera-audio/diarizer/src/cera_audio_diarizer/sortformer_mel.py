"""The Streaming Sortformer's front end: NeMo's log-mel filterbank, computed as audio arrives.

NeMo's ``AudioToMelSpectrogramPreprocessor`` (as configured for Sortformer: no dither at
inference, no normalization) computes, for ``n`` samples, ``n // hop`` frames: the signal
pre-emphasized (``y[t] = x[t] - 0.97 x[t-1]``, the first sample kept), a centred STFT
(zero padding of ``n_fft / 2`` on both sides; a symmetric Hann window of ``win_length``
centred in ``n_fft``), the power spectrum through Slaney mel filters, ``log(x + 2^-24)``.

`MelStream` gives the same frames from a stream: frame ``k`` is computed as soon as the
samples it covers (up to ``k * hop + n_fft / 2``) have arrived, and `finish` computes the
last ones with the zero padding of the end.
"""

from __future__ import annotations

import numpy as np

LOG_GUARD = 2.0**-24


class MelStream:
    def __init__(self, filters: np.ndarray, n_fft: int, win_length: int, hop: int, preemph: float = 0.97):
        self.filters = np.asarray(filters, np.float64)
        self.n_fft, self.hop, self.preemph = int(n_fft), int(hop), float(preemph)
        window = np.hanning(win_length) if win_length > 1 else np.ones(1)
        left = (self.n_fft - win_length) // 2
        self.window = np.zeros(self.n_fft)
        self.window[left : left + win_length] = window
        self.reset()

    def reset(self) -> None:
        half = self.n_fft // 2
        self._y = np.zeros(half)  # pre-emphasized samples from stream index self._start
        self._start = -half
        self._last = None  # the last raw sample (pre-emphasis carries it over)
        self._seen = 0
        self.frames = 0  # frames handed out so far

    def _frames_until(self, n_frames: int) -> np.ndarray:
        k0 = self.frames
        if n_frames <= k0:
            return np.zeros((0, len(self.filters)), np.float32)
        half = self.n_fft // 2
        at = k0 * self.hop - half - self._start
        idx = at + np.arange(n_frames - k0)[:, None] * self.hop + np.arange(self.n_fft)[None, :]
        spec = np.fft.rfft(self._y[idx] * self.window, axis=1)
        power = spec.real**2 + spec.imag**2
        mel = np.log(power @ self.filters.T + LOG_GUARD)
        self.frames = n_frames
        drop = self.frames * self.hop - half - self._start
        self._y = self._y[drop:]
        self._start += drop
        return mel.astype(np.float32)

    def push(self, x: np.ndarray) -> np.ndarray:
        """Feed samples; returns the frames ``[m, n_mels]`` that are now complete."""
        x = np.asarray(x, np.float64)
        if len(x) == 0:
            return self._frames_until(self.frames)
        prev = np.concatenate([[x[0] if self._last is None else self._last], x[:-1]])
        y = x - self.preemph * prev
        if self._last is None:
            y[0] = x[0]
        self._last = x[-1]
        self._y = np.concatenate([self._y, y])
        self._seen += len(x)
        ready = max(0, (self._seen - self.n_fft // 2) // self.hop + 1) if self._seen >= self.n_fft // 2 else 0
        return self._frames_until(min(ready, self._seen // self.hop))

    def finish(self) -> np.ndarray:
        """The remaining frames (the end padded with zeros): ``n // hop`` frames in all."""
        self._y = np.concatenate([self._y, np.zeros(self.n_fft)])
        return self._frames_until(self._seen // self.hop)


def log_mel(samples: np.ndarray, filters, n_fft: int, win_length: int, hop: int, preemph: float = 0.97) -> np.ndarray:
    """The frames ``[n // hop, n_mels]`` of a whole recording."""
    m = MelStream(filters, n_fft, win_length, hop, preemph)
    return np.concatenate([m.push(samples), m.finish()])
