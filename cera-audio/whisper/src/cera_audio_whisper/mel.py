"""Whisper's log-mel front end, in numpy.

What Whisper computes (and faster-whisper's numpy port of it): 16 kHz PCM, a periodic
Hann window of 400 samples, a hop of 160, the signal reflect-padded by 200 at both ends
(centred frames), power spectra of the 201 one-sided bins, the last frame dropped, a
Slaney-style mel filterbank (80 or 128 bands up to 8 kHz, each triangle normalised to
unit area), log10 of the power clamped at 1e-10, values below the maximum minus 8
raised to it, and (x + 4) / 4. faster-whisper pads the audio with one hop of zeros
before all this and takes the maximum over the whole file; cera does the same so that
both see the same features.
"""

from __future__ import annotations

import math

import numpy as np

SAMPLE_RATE = 16000
N_FFT = 400
HOP = 160
CHUNK_SECONDS = 30
N_SAMPLES = SAMPLE_RATE * CHUNK_SECONDS
N_FRAMES = N_SAMPLES // HOP  # 3000 frames per window

# Slaney's mel scale: linear below 1 kHz (200/3 Hz per mel), logarithmic above.
_F_SP = 200.0 / 3.0
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = math.log(6.4) / 27.0


def hz_to_mel(f: float) -> float:
    if f < _MIN_LOG_HZ:
        return f / _F_SP
    return _MIN_LOG_MEL + math.log(f / _MIN_LOG_HZ) / _LOGSTEP


def mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, np.float64)
    return np.where(m < _MIN_LOG_MEL, m * _F_SP, _MIN_LOG_HZ * np.exp(_LOGSTEP * (m - _MIN_LOG_MEL)))


def mel_filterbank(n_mels: int, sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """[n_mels, n_fft // 2 + 1] float32 triangles, area-normalised (librosa's norm="slaney")."""
    bins = np.arange(n_fft // 2 + 1, dtype=np.float64) * sample_rate / n_fft
    edges = mel_to_hz(np.linspace(0.0, hz_to_mel(sample_rate / 2), n_mels + 2))
    widths = np.diff(edges)
    out = np.zeros((n_mels, len(bins)))
    for i in range(n_mels):
        rising = (bins - edges[i]) / widths[i]
        falling = (edges[i + 2] - bins) / widths[i + 1]
        out[i] = np.maximum(0.0, np.minimum(rising, falling)) * (2.0 / (edges[i + 2] - edges[i]))
    return out.astype(np.float32)


def hann(n: int = N_FFT) -> np.ndarray:
    """The periodic Hann window (the symmetric one of n + 1 points without its last)."""
    k = np.arange(n, dtype=np.float64)
    return (0.5 - 0.5 * np.cos(2.0 * np.pi * k / n)).astype(np.float32)


def log_mel(samples: np.ndarray, filters: np.ndarray, pad_tail: int = HOP) -> np.ndarray:
    """Log-mel features ``[n_mels, frames]`` float32 of 16 kHz mono PCM (one frame per hop)."""
    x = np.asarray(samples, np.float32)
    if pad_tail:
        x = np.concatenate([x, np.zeros(pad_tail, np.float32)])
    half = N_FFT // 2
    if len(x) <= half:  # reflect padding needs more samples than half a window
        x = np.concatenate([x, np.zeros(half + 1 - len(x), np.float32)])
    x = np.pad(x, (half, half), mode="reflect")
    n_frames = 1 + (len(x) - N_FFT) // HOP
    frames = np.lib.stride_tricks.as_strided(x, (n_frames, N_FFT), (HOP * x.strides[0], x.strides[0]))
    spec = np.fft.rfft(frames * hann(), axis=-1).astype(np.complex64)
    power = np.abs(spec[:-1]).T ** 2  # [bins, frames - 1]
    mel = filters @ power
    logm = np.log10(np.maximum(mel, 1e-10))
    logm = np.maximum(logm, logm.max() - 8.0)
    return ((logm + 4.0) / 4.0).astype(np.float32)


def window(features: np.ndarray, start: int, length: int) -> np.ndarray:
    """Frames [start, start + length) zero-padded (or cut) to one 30 s window: ``[3000, n_mels]``
    (frames as rows, the layout the encoder's convolution takes)."""
    seg = features[:, start : start + length]
    out = np.zeros((N_FRAMES, features.shape[0]), np.float32)
    n = min(seg.shape[1], N_FRAMES)
    out[:n] = seg[:, :n].T
    return out
