"""The GE2E encoder's front end: a mel power spectrogram, in numpy.

Resemblyzer computes ``librosa.feature.melspectrogram(y, sr=16000, n_fft=400,
hop_length=160, n_mels=40)``: frames centred on every 160th sample (the signal
zero-padded by 200 samples on each side, librosa 0.10's default), a periodic Hann window
of 400 samples, the squared magnitude of the real FFT, and the mel filterbank stored in
the GGUF (``mel_filters``). It is a power spectrogram, not a log one: the encoder was
trained on that. Computed in float64 and returned as float32 (frames, 40).
"""

from __future__ import annotations

import numpy as np


def hann_periodic(n: int) -> np.ndarray:
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)


def mel_power(samples: np.ndarray, filters: np.ndarray, n_fft: int = 400, hop: int = 160) -> np.ndarray:
    """(1 + len(samples) // hop, n_mels) mel power frames of mono float32 PCM."""
    x = np.asarray(samples, dtype=np.float64)
    pad = n_fft // 2
    padded = np.zeros(len(x) + 2 * pad)
    padded[pad : pad + len(x)] = x
    n_frames = 1 + len(x) // hop
    frames = np.lib.stride_tricks.as_strided(
        padded, shape=(n_frames, n_fft), strides=(hop * padded.itemsize, padded.itemsize), writeable=False
    )
    spec = np.fft.rfft(frames * hann_periodic(n_fft), axis=-1)
    power = spec.real**2 + spec.imag**2
    return (power @ filters.astype(np.float64).T).astype(np.float32)
