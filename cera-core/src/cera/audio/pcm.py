"""Checking PCM handed to audio components: mono float32, finite."""

from __future__ import annotations

import numpy as np

from ..errors import AudioError


def as_pcm(samples, what: str = "samples", offset: int = 0, sample_rate: int | None = None) -> np.ndarray:
    """``samples`` as a contiguous 1-D float32 array, or an `AudioError` saying what is wrong.

    Floating-point input of any width is accepted (nominal range -1..1; louder values are
    passed on, as a clipped recording would be). Integer PCM is refused rather than
    guessed at: its scale depends on the bit depth. ``offset`` (samples already seen in the
    stream) and ``sample_rate`` only make error messages point at the right place.
    """
    if isinstance(samples, np.ndarray):
        x = samples
    else:
        try:
            x = np.asarray(samples)
        except Exception as e:
            raise AudioError(f"{what}: not an array of samples ({type(e).__name__}: {e})") from None
    if x.dtype.kind in "iub":
        raise AudioError(
            f"{what}: {x.dtype} samples; audio components take float PCM in -1..1 "
            f"(for int16 PCM, divide by 32768 and pass float32)"
        )
    if x.dtype.kind != "f":
        raise AudioError(f"{what}: expected float PCM samples, got an array of dtype {x.dtype}")
    if x.ndim != 1:
        if x.ndim == 2 and 1 in x.shape:
            x = x.reshape(-1)
        else:
            raise AudioError(
                f"{what}: expected mono PCM (one dimension), got shape {x.shape}; "
                f"downmix channels first (cera.audio.downmix averages them)"
            )
    x = np.ascontiguousarray(x, dtype=np.float32)
    finite = np.isfinite(x)
    if not finite.all():
        i = int(np.argmin(finite))
        kind = "NaN" if np.isnan(x[i]) else "infinite"
        at = offset + i
        when = f" ({at / sample_rate:.3f} s)" if sample_rate else ""
        raise AudioError(f"{what}: sample {at}{when} is {kind}; audio must hold finite values only")
    return x


def downmix(frames: np.ndarray) -> np.ndarray:
    """Mono from (n, channels) audio: the arithmetic mean of the channels.

    Equal weights and no pan law: a signal present in only one of two channels comes out
    6 dB lower, one common to both comes out unchanged. The mean is taken in float64.
    """
    if frames.ndim == 1:
        return np.ascontiguousarray(frames, dtype=np.float32)
    if frames.ndim != 2:
        raise AudioError(f"expected (samples, channels) audio, got shape {frames.shape}")
    if frames.shape[1] == 1:
        return np.ascontiguousarray(frames[:, 0], dtype=np.float32)
    return frames.mean(axis=1, dtype=np.float64).astype(np.float32)
