"""Whisper's features of a recording, whole in memory or streamed from a file.

`ArrayFeatures` holds the log-mel features of samples in memory (`mel.log_mel`): right for
clips. `StreamedFeatures` gives the same features, window by window, for a recording of
any length in memory that does not grow with it: a first pass over the file finds the
maximum of the log-mel values (Whisper clamps every value to within 8 of it, over the
whole recording), a second pass computes each 30 s window's frames when the transcription
reaches it, from a buffer of samples that moves forward with it. Each frame is computed
from the same samples by the same operations as `mel.log_mel` computes it (the same
reflection at both ends, the same hop of zeros at the tail), so both give equal features.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from . import mel as melmod

HOP, HALF = melmod.HOP, melmod.N_FFT // 2
# Below this many samples (10 minutes at 16 kHz) a recording is read whole: its features
# take about 19 MB, the streamed form's two passes are not worth it.
STREAM_MIN_SAMPLES = 600 * melmod.SAMPLE_RATE
PASS_FRAMES = melmod.N_FRAMES  # frames computed at a time in the first pass


class ArrayFeatures:
    """Features ``[n_mels, frames]`` held in memory."""

    def __init__(self, features: np.ndarray, n_samples: int):
        self.features = features
        self.n_samples = n_samples

    @property
    def n_frames(self) -> int:
        return self.features.shape[-1]

    def window(self, start: int, length: int) -> np.ndarray:
        return melmod.window(self.features, start, length)


class _Frames:
    """Raw log10-mel frames (before Whisper's clamp) of a stream of sample blocks, asked
    for in increasing order; the samples before the frames asked for are let go."""

    def __init__(self, blocks: Iterable[np.ndarray], filters: np.ndarray):
        self.blocks = iter(blocks)
        self.filters = filters
        self.buf = np.zeros(0, np.float32)
        self.start = 0  # index in x (the samples and a hop of zeros) of buf[0]
        self.n_x: int | None = None  # len(x), once the stream has ended

    @property
    def end(self) -> int:
        return self.start + len(self.buf)

    def pull(self) -> bool:
        """One more block into the buffer; False once the stream has ended."""
        if self.n_x is not None:
            return False
        block = next(self.blocks, None)
        if block is None:
            self.buf = np.concatenate([self.buf, np.zeros(HOP, np.float32)])  # log_mel's pad_tail
            self.n_x = self.end
            return False
        self.buf = np.concatenate([self.buf, np.asarray(block, np.float32)])
        return True

    @property
    def n_frames(self) -> int:
        return self.n_x // HOP

    def ready(self) -> int:
        """How many frames can be computed from the samples at hand."""
        if self.n_x is not None:
            return self.n_frames
        # frame t needs x up to t * HOP + HALF (exclusive), no reflection on the right
        return max(0, (self.end - HALF) // HOP)

    def raw(self, a: int, b: int) -> np.ndarray:
        """Frames [a, b) as float32 log10 of the mel power (``[n_mels, b - a]``)."""
        while self.n_x is None and self.end < (b - 1) * HOP + HALF + 1:
            self.pull()
        b = min(b, self.n_frames) if self.n_x is not None else b
        idx = np.arange(a * HOP - HALF, (b - 1) * HOP + HALF, dtype=np.int64)
        idx = np.abs(idx)  # the reflection at the start: x[-i] = x[i]
        if self.n_x is not None:
            idx = np.where(idx >= self.n_x, 2 * (self.n_x - 1) - idx, idx)  # and at the end
        seg = self.buf[idx - self.start]
        frames = np.lib.stride_tricks.as_strided(seg, (b - a, melmod.N_FFT), (HOP * seg.strides[0], seg.strides[0]))
        spec = np.fft.rfft(frames * melmod.hann(), axis=-1).astype(np.complex64)
        power = np.abs(spec).T ** 2
        return np.log10(np.maximum(self.filters @ power, 1e-10))

    def release_before(self, frame: int) -> None:
        keep = max(0, frame * HOP - HALF - 1)
        if keep > self.start:
            self.buf = self.buf[keep - self.start :].copy()
            self.start = keep


class StreamedFeatures:
    """The features of a recording that ``open_blocks()`` streams (16 kHz mono float32
    blocks; called once per pass, it must give the same samples each time), computed a
    window at a time in the order a transcription asks for them."""

    def __init__(self, open_blocks: Callable[[], Iterable[np.ndarray]], filters: np.ndarray,
                 on_block: Callable[[np.ndarray], None] | None = None):  # fmt: skip
        self._open = open_blocks
        self.filters = filters
        first = _Frames(_watch(open_blocks(), on_block), filters)
        peak, done = None, 0
        while first.pull() or first.n_x is not None:
            ready = first.ready()
            while ready - done >= PASS_FRAMES or (first.n_x is not None and done < ready):
                b = min(done + PASS_FRAMES, ready)
                m = first.raw(done, b).max()
                peak = m if peak is None else max(peak, m)
                done = b
                first.release_before(done)
            if first.n_x is not None:
                break
        self.n_samples = first.n_x - HOP
        self._n_frames = first.n_frames
        self.floor = peak - 8.0  # float32, as log_mel's `logm.max() - 8.0`
        self._second: _Frames | None = None
        self._at = 0

    @property
    def n_frames(self) -> int:
        return self._n_frames

    def window(self, start: int, length: int) -> np.ndarray:
        """Frames [start, start + length) as one window ``[3000, n_mels]`` (see `mel.window`)."""
        if self._second is None or start < self._at:  # the first window, or one asked for again from behind
            self._second = _Frames(self._open(), self.filters)
        self._at = start
        out = np.zeros((melmod.N_FRAMES, self.filters.shape[0]), np.float32)
        stop = min(start + length, start + melmod.N_FRAMES, self._n_frames)
        if stop > start:
            logm = np.maximum(self._second.raw(start, stop), self.floor)
            out[: stop - start] = ((logm + 4.0) / 4.0).astype(np.float32).T
        self._second.release_before(start)
        return out


def _watch(blocks, on_block):
    for b in blocks:
        if on_block is not None:
            on_block(b)
        yield b
