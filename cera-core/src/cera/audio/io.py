"""Reading audio files for audio components.

Files are decoded by libsndfile (through `soundfile`): WAV, FLAC, Ogg Vorbis, Opus, AIFF,
CAF, and MP3 where the libsndfile is 1.1 or newer. Multi-channel audio is downmixed to
mono by averaging the channels (`cera.audio.pcm.downmix`), then resampled to the
component's rate with libsoxr (through `soxr`, quality "HQ"). Both libraries come with
the ``audio`` extra of cera-core: ``pip install 'cera-core[audio]'``.

Every problem is an `AudioError` naming the file: not there, not audio, empty or a single
sample, NaN or infinite samples, or a sample rate that would need resampling when the
caller forbade it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import attrs
import numpy as np

from ..errors import AudioError
from .pcm import as_pcm, downmix

RESAMPLE_QUALITY = "HQ"


@attrs.frozen
class AudioClip:
    """Mono float32 PCM read from a file, at ``sample_rate``."""

    samples: np.ndarray
    sample_rate: int
    source_rate: int  # the file's own rate
    source_channels: int
    path: str | None = None

    @property
    def duration(self) -> float:
        return len(self.samples) / self.sample_rate

    @property
    def resampled(self) -> bool:
        return self.sample_rate != self.source_rate


def _soundfile():
    try:
        import soundfile
    except ImportError as e:
        raise AudioError(
            "reading audio files needs the `soundfile` package: pip install 'cera-core[audio]'"
        ) from e
    except OSError as e:  # the wheel's bundled libsndfile (or the system one) failed to load
        raise AudioError(f"soundfile is installed but libsndfile could not be loaded: {e}") from e
    return soundfile


def resample(samples: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """Resample mono float32 PCM with libsoxr ("HQ"); returns float32."""
    if from_rate == to_rate:
        return samples
    try:
        import soxr
    except ImportError as e:
        raise AudioError(
            f"resampling {from_rate} Hz to {to_rate} Hz needs the `soxr` package: pip install 'cera-core[audio]'"
        ) from e
    out = soxr.resample(samples, from_rate, to_rate, quality=RESAMPLE_QUALITY)
    return np.ascontiguousarray(out, dtype=np.float32)


def choose_rate(source_rate: int, rates: Sequence[int]) -> int:
    """The rate to run at: the file's own if the component serves it, else the first one."""
    return source_rate if source_rate in rates else rates[0]


def read_audio(
    path: str | os.PathLike,
    sample_rate: int | Sequence[int] | None = None,
    *,
    resample_ok: bool = True,
) -> AudioClip:
    """Read an audio file as mono float32 PCM.

    ``sample_rate``: the rate wanted, or several accepted ones (the file's own is kept when
    accepted, else the first is used), or None for the file's own rate. With
    ``resample_ok=False`` a file at a rate that is not accepted is an error instead.
    """
    sf = _soundfile()
    path = Path(path)
    if not path.exists():
        raise AudioError(f"{path}: no such file")
    if path.is_dir():
        raise AudioError(f"{path}: is a directory, not an audio file")
    if path.stat().st_size == 0:
        raise AudioError(f"{path}: is empty (0 bytes), not a recording")
    try:
        with sf.SoundFile(str(path)) as f:
            source_rate = int(f.samplerate)
            channels = int(f.channels)
            data = f.read(dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        raise AudioError(
            f"{path}: not an audio file that libsndfile can read ({e}); "
            f"use WAV, FLAC, Ogg/Opus, AIFF or MP3, or convert the file (for example with sox or ffmpeg)"
        ) from None
    n = data.shape[0]
    if n == 0:
        raise AudioError(f"{path}: holds no samples (an empty recording)")
    if n == 1:
        raise AudioError(f"{path}: holds a single sample, too short to be a recording")

    finite = np.isfinite(data)
    if not finite.all():
        flat = int(np.argmin(finite.reshape(-1)))
        i, ch = divmod(flat, channels)
        kind = "NaN" if np.isnan(data[i, ch]) else "infinite"
        raise AudioError(
            f"{path}: sample {i} ({i / source_rate:.3f} s) of channel {ch} is {kind}; "
            f"the file is damaged or was written with invalid float values"
        )

    if sample_rate is None:
        target = source_rate
    elif isinstance(sample_rate, int):
        target = sample_rate
    else:
        rates = [int(r) for r in sample_rate]
        if not rates:
            raise AudioError("read_audio: sample_rate lists no rate")
        target = choose_rate(source_rate, rates)
    if target <= 0:
        raise AudioError(f"read_audio: sample rate must be positive, got {target}")
    if target != source_rate and not resample_ok:
        rates = [sample_rate] if isinstance(sample_rate, int) else list(sample_rate)
        needed = f"{rates[0]} Hz" if len(rates) == 1 else "one of " + ", ".join(map(str, rates)) + " Hz"
        raise AudioError(
            f"{path}: recorded at {source_rate} Hz, but {needed} is needed and resampling is turned off; "
            f"allow resampling, or convert the file (for example `sox in.wav -r {target} out.wav`)"
        )
    mono = downmix(data)
    mono = resample(mono, source_rate, target)
    mono = as_pcm(mono, str(path), sample_rate=target)
    return AudioClip(
        samples=mono, sample_rate=target, source_rate=source_rate, source_channels=channels, path=str(path)
    )
