"""Reading audio files for audio components.

Files are decoded by libsndfile (through `soundfile`): WAV, FLAC, Ogg Vorbis, Opus, AIFF,
CAF, and MP3 where the libsndfile is 1.1 or newer. Multi-channel audio is downmixed to
mono by averaging the channels (`cera.audio.pcm.downmix`), then resampled to the
component's rate with libsoxr (through `soxr`, quality "HQ"). Both libraries are
dependencies of this distribution, cera-audio-io.

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

from cera.errors import AudioError
from cera.audio.pcm import as_pcm, downmix

RESAMPLE_QUALITY = "HQ"
# The sample rates a recording may have. A header claiming 1 Hz makes a 32 KB file "last"
# 16,000 s, which resampling to 16 kHz turns into a gigabyte; telephone audio is 8 kHz and
# the highest studio rate 768 kHz.
MIN_SAMPLE_RATE = 1000
MAX_SAMPLE_RATE = 768_000
MAX_CHANNELS = 256  # libsndfile's own limit is 1024; a block of 1024 channels is 256 MB


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
            "reading audio files needs the `soundfile` package: pip install cera-audio-io"
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
            f"resampling {from_rate} Hz to {to_rate} Hz needs the `soxr` package: pip install cera-audio-io"
        ) from e
    out = soxr.resample(samples, from_rate, to_rate, quality=RESAMPLE_QUALITY)
    return np.ascontiguousarray(out, dtype=np.float32)


def choose_rate(source_rate: int, rates: Sequence[int]) -> int:
    """The rate to run at: the file's own if the component serves it, else the first one."""
    return source_rate if source_rate in rates else rates[0]


# Frames read from a file at a time: a block of a 48 kHz stereo file is about 0.5 MB, so
# reading, checking, downmixing and resampling take the same memory whatever its length.
BLOCK_FRAMES = 1 << 16


@attrs.frozen
class AudioInfo:
    """What `open_audio` found out about a file before reading its samples."""

    path: str
    sample_rate: int  # the rate the blocks come at
    source_rate: int
    source_channels: int
    frames: int  # at the source rate


class AudioStream:
    """Mono float32 blocks of an audio file at the rate asked for, read, checked, downmixed
    and resampled a block at a time (see `open_audio`). Iterate once; close when done (or
    use it as a context manager)."""

    def __init__(self, handle, info: AudioInfo, block_frames: int = BLOCK_FRAMES):
        self._file = handle
        self.info = info
        self.block_frames = block_frames

    def __iter__(self):
        sf_file, info = self._file, self.info
        stream = None
        if info.sample_rate != info.source_rate:
            soxr = _soxr(info.source_rate, info.sample_rate)
            stream = soxr.ResampleStream(info.source_rate, info.sample_rate, 1, dtype="float32",
                                         quality=RESAMPLE_QUALITY)  # fmt: skip
        at = 0
        while True:
            data = sf_file.read(self.block_frames, dtype="float32", always_2d=True)
            n = data.shape[0]
            if n:
                _check_finite(data, info, at)
                at += n
                mono = downmix(data)
                if stream is not None:
                    mono = np.ascontiguousarray(stream.resample_chunk(mono, last=False), dtype=np.float32)
                if len(mono):
                    yield mono
            if n < self.block_frames:
                break
        if stream is not None:
            tail = np.ascontiguousarray(stream.resample_chunk(np.zeros(0, np.float32), last=True), dtype=np.float32)
            if len(tail):
                yield tail

    def close(self) -> None:
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _soxr(from_rate: int, to_rate: int):
    try:
        import soxr
    except ImportError as e:
        raise AudioError(
            f"resampling {from_rate} Hz to {to_rate} Hz needs the `soxr` package: pip install cera-audio-io"
        ) from e
    return soxr


def _check_finite(data: np.ndarray, info: AudioInfo, at: int) -> None:
    finite = np.isfinite(data)
    if finite.all():
        return
    flat = int(np.argmin(finite.reshape(-1)))
    i, ch = divmod(flat, data.shape[1])
    i += at
    kind = "NaN" if np.isnan(data.reshape(-1)[flat]) else "infinite"
    raise AudioError(
        f"{info.path}: sample {i} ({i / info.source_rate:.3f} s) of channel {ch} is {kind}; "
        f"the file is damaged or was written with invalid float values"
    )


def open_audio(
    path: str | os.PathLike,
    sample_rate: int | Sequence[int] | None = None,
    *,
    resample_ok: bool = True,
    block_frames: int = BLOCK_FRAMES,
) -> AudioStream:
    """Open an audio file for reading as mono float32 PCM in blocks (`AudioStream`), in
    memory that does not grow with the file's length. ``sample_rate`` and ``resample_ok``
    as for `read_audio`."""
    sf = _soundfile()
    path = Path(path)
    if not path.exists():
        raise AudioError(f"{path}: no such file")
    if path.is_dir():
        raise AudioError(f"{path}: is a directory, not an audio file")
    if not path.is_file():
        raise AudioError(f"{path}: is not a regular file (a pipe, socket or device)")
    if path.stat().st_size == 0:
        raise AudioError(f"{path}: is empty (0 bytes), not a recording")
    try:
        handle = sf.SoundFile(str(path))
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        raise AudioError(
            f"{path}: not an audio file that libsndfile can read ({e}); "
            f"use WAV, FLAC, Ogg/Opus, AIFF or MP3, or convert the file (for example with sox or ffmpeg)"
        ) from None
    try:
        source_rate = int(handle.samplerate)
        channels = int(handle.channels)
        frames = int(handle.frames)
        if source_rate <= 0 or channels <= 0:
            raise AudioError(f"{path}: a header with {channels} channels at {source_rate} Hz")
        if not MIN_SAMPLE_RATE <= source_rate <= MAX_SAMPLE_RATE:
            raise AudioError(
                f"{path}: its header claims a sample rate of {source_rate} Hz; cera reads recordings made at "
                f"{MIN_SAMPLE_RATE} to {MAX_SAMPLE_RATE} Hz. The header is damaged, or convert the file "
                f"(for example `sox in.wav -r 16000 out.wav`)"
            )
        if channels > MAX_CHANNELS:
            raise AudioError(f"{path}: its header claims {channels} channels; cera reads at most {MAX_CHANNELS}")
        if frames == 0:
            raise AudioError(f"{path}: holds no samples (an empty recording)")
        if frames == 1:
            raise AudioError(f"{path}: holds a single sample, too short to be a recording")
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
    except BaseException:
        handle.close()
        raise
    info = AudioInfo(str(path), target, source_rate, channels, frames)
    return AudioStream(handle, info, block_frames)


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

    The file is read in blocks (`open_audio`): memory is the result (mono, at the rate
    asked for) plus a block, however many channels or how high a rate the file has.
    """
    with open_audio(path, sample_rate, resample_ok=resample_ok) as stream:
        info = stream.info
        try:
            blocks = list(stream)
        except (RuntimeError, TypeError, ValueError) as e:  # libsndfile failing mid-file
            raise AudioError(f"{path}: reading the samples failed ({e}); the file is damaged") from None
    mono = np.concatenate(blocks) if blocks else np.zeros(0, np.float32)
    if len(mono) < 2:
        raise AudioError(f"{path}: holds too few samples to be a recording")
    mono = as_pcm(mono, str(path), sample_rate=info.sample_rate)
    return AudioClip(
        samples=mono, sample_rate=info.sample_rate, source_rate=info.source_rate,
        source_channels=info.source_channels, path=str(path),
    )  # fmt: skip
