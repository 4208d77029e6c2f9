"""From per-frame speech probabilities to speech segments, for any VAD.

The rules are those of the silero-vad package's ``get_speech_timestamps`` (v6.2), which
most users of a VAD know, so that the same probabilities and parameters give the same
segments, to the sample:

- speech starts at the first frame whose probability is >= ``threshold``; once in speech,
  a frame below ``neg_threshold`` (default ``max(threshold - 0.15, 0.01)``) starts a
  candidate silence, which ends the segment (at the silence's first frame) when it lasts
  ``min_silence_duration_ms``; a frame back at >= ``threshold`` cancels it;
- a segment that grows past ``max_speech_duration_s`` is cut: at the longest silence
  longer than ``min_silence_at_max_speech_ms`` seen inside it (or, with
  ``use_max_possible_silence_at_max_speech=False``, at the last such silence), else hard at
  the current frame;
- segments not longer than ``min_speech_duration_ms`` are dropped; a segment still open
  when the audio ends runs to the end of the audio;
- finally each segment is padded by ``speech_pad_ms`` on both sides; where two segments are
  closer than two pads, the gap between them is split in half instead.

Arithmetic follows the reference exactly (durations converted to samples as floats,
integer truncation where it truncates), including its quirks.

`SpeechSegmenter` applies the rules as probabilities arrive and hands out each segment as
soon as no later frame can change it: once the speech has ended and either the next
segment has started or the audio has run two pads past the end. `speech_segments` is the
offline form, and gives exactly the same list.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import attrs

from ..errors import AudioError


def _check_probability(instance, attribute, value):
    if value is None and attribute.name == "neg_threshold":
        return
    if not isinstance(value, (int, float)) or not (0.0 <= value <= 1.0):
        raise AudioError(f"{attribute.name} must be a probability between 0 and 1, got {value!r}")


def _check_non_negative(instance, attribute, value):
    if not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
        raise AudioError(f"{attribute.name} must be a number >= 0, got {value!r}")


def _check_positive(instance, attribute, value):
    if not isinstance(value, (int, float)) or math.isnan(value) or value <= 0:
        raise AudioError(f"{attribute.name} must be a number > 0, got {value!r}")


@attrs.frozen
class SegmentParams:
    """How probabilities become segments; the defaults are silero-vad's."""

    threshold: float = attrs.field(default=0.5, validator=_check_probability)
    # None: max(threshold - 0.15, 0.01)
    neg_threshold: float | None = attrs.field(default=None, validator=_check_probability)
    min_speech_duration_ms: float = attrs.field(default=250, validator=_check_non_negative)
    min_silence_duration_ms: float = attrs.field(default=100, validator=_check_non_negative)
    speech_pad_ms: float = attrs.field(default=30, validator=_check_non_negative)
    max_speech_duration_s: float = attrs.field(default=math.inf, validator=_check_positive)
    min_silence_at_max_speech_ms: float = attrs.field(default=98, validator=_check_non_negative)
    use_max_possible_silence_at_max_speech: bool = True

    @property
    def effective_neg_threshold(self) -> float:
        if self.neg_threshold is None:
            return max(self.threshold - 0.15, 0.01)
        return self.neg_threshold


@attrs.frozen
class SpeechSegment:
    """A stretch of speech: ``start`` and ``end`` (exclusive) in samples at ``sample_rate``."""

    start: int
    end: int
    sample_rate: int

    @property
    def start_seconds(self) -> float:
        return self.start / self.sample_rate

    @property
    def end_seconds(self) -> float:
        return self.end / self.sample_rate

    @property
    def duration_seconds(self) -> float:
        return (self.end - self.start) / self.sample_rate

    def to_json(self) -> dict:
        return {
            "start": round(self.start_seconds, 6),
            "end": round(self.end_seconds, 6),
            "start_sample": self.start,
            "end_sample": self.end,
        }


class SpeechSegmenter:
    """Turns a stream of per-frame probabilities into finished speech segments.

    Feed one probability per frame of ``frame_samples`` samples with `push` (every frame
    full except possibly the last), then call `finish` with the total number of samples.
    Both return the segments that became final, in order.
    """

    def __init__(self, *, sample_rate: int, frame_samples: int, params: SegmentParams | None = None):
        if not isinstance(sample_rate, int) or sample_rate <= 0:
            raise AudioError(f"sample_rate must be a positive integer, got {sample_rate!r}")
        if not isinstance(frame_samples, int) or frame_samples <= 0:
            raise AudioError(f"frame_samples must be a positive integer, got {frame_samples!r}")
        p = params or SegmentParams()
        self.params = p
        self.sample_rate = sample_rate
        self.frame_samples = frame_samples
        sr = sample_rate
        # Sample counts as the reference computes them (floats; compared, never rounded).
        self._min_speech = sr * p.min_speech_duration_ms / 1000
        self._pad = sr * p.speech_pad_ms / 1000
        self._max_speech = sr * p.max_speech_duration_s - frame_samples - 2 * self._pad
        self._min_silence = sr * p.min_silence_duration_ms / 1000
        self._min_silence_at_max = sr * p.min_silence_at_max_speech_ms / 1000
        self._threshold = p.threshold
        self._neg_threshold = p.effective_neg_threshold
        self._use_longest = p.use_max_possible_silence_at_max_speech

        self.frames = 0
        self._finished = False
        # The detection state machine (names as in the reference).
        self._triggered = False
        self._start: int | None = None  # start of the speech being collected
        self._temp_end = 0  # first sample of a candidate silence inside speech (0: none)
        self._prev_end = 0  # where to cut if the speech gets too long
        self._next_start = 0
        self._possible_ends: list[tuple[int, int]] = []  # (silence start, silence length)
        # Padding needs the neighbour: the last closed segment waits here until its end is fixed.
        self._closed = 0  # raw segments closed so far
        self._last_raw_end = 0  # raw end of the last closed segment
        self._waiting: tuple[int, int] | None = None  # (final start, raw end) of a segment not yet handed out

    @property
    def settled(self) -> int:
        """Samples before which every segment has been handed out: the start of the speech
        still open or waiting for its end, else all the frames pushed."""
        at = self.frame_samples * self.frames
        if self._waiting is not None:
            at = min(at, self._waiting[0])
        if self._triggered and self._start is not None:
            at = min(at, max(0, int(self._start - self._pad)))
        return int(at)

    # -- detection ------------------------------------------------------------------

    def push(self, prob: float) -> list[SpeechSegment]:
        """Add the probability of the next frame; returns the segments that became final."""
        if self._finished:
            raise AudioError("this SpeechSegmenter has finished; make a new one for a new stream")
        prob = float(prob)
        if not (0.0 <= prob <= 1.0):  # also refuses NaN
            raise AudioError(f"frame {self.frames}: speech probability {prob!r} is not between 0 and 1")
        out: list[SpeechSegment] = []
        cur = self.frame_samples * self.frames
        self.frames += 1
        self._step(prob, cur, out)
        self._release_if_settled(out)
        return out

    def push_many(self, probs: Iterable[float]) -> list[SpeechSegment]:
        out: list[SpeechSegment] = []
        for p in probs:
            out.extend(self.push(p))
        return out

    def _step(self, prob: float, cur: int, out: list[SpeechSegment]) -> None:
        threshold = self._threshold
        if prob >= threshold and self._temp_end:
            # Speech came back after a candidate silence: remember the silence if it was long.
            silence = cur - self._temp_end
            if silence > self._min_silence_at_max:
                self._possible_ends.append((self._temp_end, silence))
            self._temp_end = 0
            if self._next_start < self._prev_end:
                self._next_start = cur

        if prob >= threshold and not self._triggered:
            self._triggered = True
            self._start = cur
            return

        if self._triggered and cur - self._start > self._max_speech:
            if self._cut_long_speech(cur, out):
                return

        if prob < self._neg_threshold and self._triggered:
            if not self._temp_end:
                self._temp_end = cur
            silence_now = cur - self._temp_end
            if not self._use_longest and silence_now > self._min_silence_at_max:
                self._prev_end = self._temp_end
            if silence_now < self._min_silence:
                return
            if self._temp_end - self._start > self._min_speech:
                self._close(self._start, self._temp_end, out)
            self._start = None
            self._prev_end = self._next_start = self._temp_end = 0
            self._triggered = False
            self._possible_ends = []

    def _cut_long_speech(self, cur: int, out: list[SpeechSegment]) -> bool:
        """Cut a segment that grew too long; True if it was cut hard at this frame."""
        if self._use_longest and self._possible_ends:
            # Cut at the longest silence seen inside this speech (the first of equals).
            best_end, best_len = self._possible_ends[0]
            for end, length in self._possible_ends[1:]:
                if length > best_len:
                    best_end, best_len = end, length
            self._close(self._start, best_end, out)
            next_start = best_end + best_len
            # The reference compares with prev_end + cur here, which holds for any silence
            # already over; kept as is, to give the same segments.
            if next_start < best_end + cur:
                self._start = next_start
            else:
                self._start = None
                self._triggered = False
            self._prev_end = self._next_start = self._temp_end = 0
            self._possible_ends = []
            return False
        if self._prev_end:
            self._close(self._start, self._prev_end, out)
            if self._next_start < self._prev_end:
                self._start = None
                self._triggered = False
            else:
                self._start = self._next_start
            self._prev_end = self._next_start = self._temp_end = 0
            self._possible_ends = []
            return False
        self._close(self._start, cur, out)
        self._start = None
        self._prev_end = self._next_start = self._temp_end = 0
        self._triggered = False
        self._possible_ends = []
        return True

    # -- padding and handing out ------------------------------------------------------

    def _close(self, start: int, end: int, out: list[SpeechSegment]) -> None:
        """A raw segment is complete: fix the previous one's end and this one's start."""
        pad = self._pad
        if self._closed == 0:
            final_start = int(max(0, start - pad))
        else:
            silence = start - self._last_raw_end
            if silence < 2 * pad:
                if self._waiting is not None:
                    self._emit(self._waiting[0], self._last_raw_end + int(silence // 2), out)
                final_start = int(max(0, start - silence // 2))
            else:
                if self._waiting is not None:
                    # Here the audio is known to reach past end + pad (this start lies beyond it).
                    self._emit(self._waiting[0], int(self._last_raw_end + pad), out)
                final_start = int(max(0, start - pad))
        self._waiting = (final_start, end)
        self._last_raw_end = end
        self._closed += 1

    def _release_if_settled(self, out: list[SpeechSegment]) -> None:
        """Hand out the waiting segment once no later frame can move its end."""
        if self._waiting is None:
            return
        pad = self._pad
        end = self._last_raw_end
        # The earliest start the next segment can still get, and the least audio length.
        earliest_next = self._start if self._start is not None else self.frame_samples * self.frames
        least_length = self.frame_samples * (self.frames - 1) + 1
        if earliest_next - end >= 2 * pad and least_length >= end + pad:
            self._emit(self._waiting[0], int(end + pad), out)
            self._waiting = None

    def _emit(self, start: int, end: int, out: list[SpeechSegment]) -> None:
        out.append(SpeechSegment(int(start), int(end), self.sample_rate))

    def finish(self, total_samples: int | None = None) -> list[SpeechSegment]:
        """End of the audio: ``total_samples`` long (default: frames x frame_samples)."""
        if self._finished:
            return []
        self._finished = True
        length = self.frame_samples * self.frames if total_samples is None else int(total_samples)
        if length < self.frame_samples * (self.frames - 1) + (1 if self.frames else 0) or length > self.frame_samples * self.frames:
            raise AudioError(
                f"total_samples={total_samples} does not fit {self.frames} frames of {self.frame_samples} samples"
            )
        out: list[SpeechSegment] = []
        if self._start is not None and (length - self._start) > self._min_speech:
            self._close(self._start, length, out)
        if self._waiting is not None:
            self._emit(self._waiting[0], int(min(length, self._last_raw_end + self._pad)), out)
            self._waiting = None
        return out


def iter_speech_segments(
    probs: Iterable[float],
    *,
    sample_rate: int,
    frame_samples: int,
    params: SegmentParams | None = None,
    total_samples: int | None = None,
) -> Iterator[SpeechSegment]:
    """Yield speech segments while iterating over per-frame probabilities."""
    seg = SpeechSegmenter(sample_rate=sample_rate, frame_samples=frame_samples, params=params)
    for p in probs:
        yield from seg.push(p)
    yield from seg.finish(total_samples)


def speech_segments(
    probs: Iterable[float],
    *,
    sample_rate: int,
    frame_samples: int,
    params: SegmentParams | None = None,
    total_samples: int | None = None,
) -> list[SpeechSegment]:
    """All speech segments of a complete sequence of per-frame probabilities."""
    return list(
        iter_speech_segments(
            probs, sample_rate=sample_rate, frame_samples=frame_samples, params=params, total_samples=total_samples
        )
    )
