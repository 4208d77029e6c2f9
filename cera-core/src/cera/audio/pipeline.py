"""`AudioPipeline`: one stream from wake word to labelled transcript.

The pipeline reads mono float32 PCM in chunks of any size and drives its components, each
loaded from its plugin: a keyword spotter (optional), a voice activity detector, a
transcriber, and a diarizer (optional), all on the same samples and one clock (seconds
from the first sample pushed since `reset`). It hands out typed events
(`cera.audio.events`) in one stream.

States (`PipelineState`):

- ``LISTENING_FOR_HOTWORD``: only the keyword spotter's detections matter; speech is not
  transcribed. A detection (`Hotword`) moves to
- ``LISTENING_FOR_SPEECH``: the VAD's first frame at or above ``speech_threshold`` opens
  an utterance; without speech for ``listen_timeout_ms`` the pipeline goes back to the
  wake word. Without a keyword spotter the pipeline starts here and returns here after
  every utterance: every utterance is transcribed.
- ``SPEECH_ACTIVE``: inside an utterance. `SpeechStart` is handed out once the speech has
  lasted ``min_speech_ms`` (a shorter burst, a click or the tail of the wake word, is
  dropped); the utterance ends when the VAD stays below ``neg_threshold`` for
  ``end_silence_ms`` (`SpeechEnd`, ``end_pad_ms`` after the silence began). An utterance
  that reaches ``max_utterance_ms`` is cut at its quietest VAD frame of the last
  ``split_search_ms`` (a `SpeechEnd` and a `SpeechStart` at the same time) and goes on;
  the VAD is never reset there, so its recurrent state keeps the context.
- ``TRANSCRIBING``: an utterance is with the transcriber; the pipeline listens on (for
  the wake word, or for speech without one), so the next command is not lost.

**Pre-roll.** A ring of the last ``pre_roll_ms`` of audio is kept while listening; an
utterance starts that long before the VAD frame that opened it (never before the wake
word's detection or the previous utterance's end), so the onset of speech that the VAD
recognises a few frames late, and speech right after the wake word, is not clipped.

**Transcription** runs on one worker thread, utterance after utterance, so `push` does not
wait for it (with ``wait=True`` it does: each push returns the transcripts of the
utterances it completed, which makes a file's events reproducible). `cancel` is wait-free:
it marks the running transcription cancelled and asks the transcriber to stop; its
utterance comes out as `TranscriptCancelled`, whatever the transcriber still computes.

**Speakers.** With a diarizer, each `Transcript` waits until the diarizer has covered its
end (`Diarizer.covered`) and then carries the label of the diarizer's speaker that overlaps
the utterance most (None where no speaker turn overlaps it).
"""

from __future__ import annotations

import collections
import concurrent.futures
import math
import threading

import attrs
import numpy as np

from ..errors import AudioError
from .events import Hotword, PipelineEvent, PipelineState, SpeechEnd, SpeechStart, Transcript, TranscriptCancelled
from .pcm import as_pcm


def _non_negative(instance, attribute, value):
    if not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
        raise AudioError(f"{attribute.name} must be a number >= 0, got {value!r}")


def _probability(instance, attribute, value):
    if value is None and attribute.name == "neg_threshold":
        return
    if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise AudioError(f"{attribute.name} must be a probability between 0 and 1, got {value!r}")


@attrs.frozen
class PipelineParams:
    """How the pipeline cuts the stream into utterances (see the module docstring)."""

    speech_threshold: float = attrs.field(default=0.5, validator=_probability)
    neg_threshold: float | None = attrs.field(default=None, validator=_probability)  # None: threshold - 0.15
    min_speech_ms: float = attrs.field(default=250, validator=_non_negative)
    end_silence_ms: float = attrs.field(default=500, validator=_non_negative)
    end_pad_ms: float = attrs.field(default=200, validator=_non_negative)
    pre_roll_ms: float = attrs.field(default=300, validator=_non_negative)
    max_utterance_ms: float = attrs.field(default=20000, validator=_non_negative)
    split_search_ms: float = attrs.field(default=1000, validator=_non_negative)
    listen_timeout_ms: float = attrs.field(default=5000, validator=_non_negative)

    def __attrs_post_init__(self):
        if self.max_utterance_ms < 1000:
            raise AudioError(f"max_utterance_ms {self.max_utterance_ms}: utterances shorter than 1 s cannot be transcribed")
        if self.split_search_ms >= self.max_utterance_ms:
            raise AudioError("split_search_ms must be shorter than max_utterance_ms")

    @property
    def effective_neg_threshold(self) -> float:
        return max(self.speech_threshold - 0.15, 0.01) if self.neg_threshold is None else self.neg_threshold


@attrs.define
class _Job:
    start: float
    end: float
    samples: np.ndarray
    cancelled: bool = False
    future: concurrent.futures.Future | None = None


class AudioPipeline:
    """Wake word -> VAD -> transcription -> speaker, one stream of events (module docstring).

    ``vad`` (a `VoiceActivityDetector`) and ``transcriber`` (a `Transcriber`) are needed;
    ``kws`` is any keyword spotter (``push(pcm) -> [Detection]``, ``reset()``,
    ``sample_rate``; a `KeywordSpotter` or cera-audio-kws's gated ``HotwordIterator``),
    ``diarizer`` a `Diarizer`. All run at one sample rate.
    """

    def __init__(self, vad, transcriber, kws=None, diarizer=None, params: PipelineParams | None = None,
                 wait: bool = False):  # fmt: skip
        self.vad, self.transcriber, self.kws, self.diarizer = vad, transcriber, kws, diarizer
        self.params = params or PipelineParams()
        self.wait = wait
        for name in ("process", "flush", "reset", "frame_samples", "sample_rate"):
            if not hasattr(vad, name):
                raise AudioError(f"{type(vad).__name__} is not a voice activity detector (it has no {name})")
        if not callable(getattr(transcriber, "transcribe", None)):
            raise AudioError(f"{type(transcriber).__name__} is not a transcriber (it has no transcribe())")
        if kws is not None and not (callable(getattr(kws, "push", None)) and callable(getattr(kws, "reset", None))):
            raise AudioError(f"{type(kws).__name__} is not a keyword spotter (it needs push() and reset())")
        if diarizer is not None and not all(hasattr(diarizer, n) for n in ("push", "flush", "reset", "covered")):
            raise AudioError(f"{type(diarizer).__name__} is not a Diarizer (it needs push, flush, reset, covered)")
        self.sample_rate = int(vad.sample_rate)
        for name, comp in (("transcriber", transcriber), ("keyword spotter", kws), ("diarizer", diarizer)):
            if comp is not None and int(getattr(comp, "sample_rate", 0)) != self.sample_rate:
                raise AudioError(
                    f"the {name} runs at {getattr(comp, 'sample_rate', None)} Hz and the VAD at {self.sample_rate} Hz; "
                    f"the pipeline's components must share one sample rate"
                )
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="cera-transcribe")
        self._lock = threading.Lock()
        self._running: _Job | None = None
        self._jobs: collections.deque[_Job] = collections.deque()
        self.reset()

    # -- state ----------------------------------------------------------------------------

    def _samples(self, ms: float) -> int:
        return int(round(ms * self.sample_rate / 1000))

    @property
    def _idle_mode(self) -> PipelineState:
        return PipelineState.LISTENING_FOR_HOTWORD if self.kws is not None else PipelineState.LISTENING_FOR_SPEECH

    @property
    def state(self) -> PipelineState:
        if self._mode is self._idle_mode and any(not j.future.done() for j in self._jobs if j.future is not None):
            return PipelineState.TRANSCRIBING
        return self._mode

    def reset(self) -> None:
        """Start a new stream: transcriptions not yet handed out are dropped, every component reset."""
        for job in list(self._jobs):
            job.cancelled = True
            if job.future is not None:
                job.future.cancel()
        if self._running is not None:
            self.transcriber.cancel()
        for job in list(self._jobs):
            if job.future is not None and not job.future.cancelled():
                concurrent.futures.wait([job.future])
        self._jobs.clear()
        self.vad.reset()
        if self.kws is not None:
            self.kws.reset()
        if self.diarizer is not None:
            self.diarizer.reset()
        self._mode = self._idle_mode
        self._seen = 0  # samples pushed
        self._frames = 0  # VAD frames processed
        self._audio = np.zeros(0, np.float32)
        self._audio_start = 0  # stream sample of self._audio[0]
        self._floor = 0  # no utterance starts before this sample
        self._deadline = math.inf  # listening for speech after the wake word ends here (sample)
        self._detections: list = []  # detections later than the last VAD frame processed
        self._turns: list = []  # the diarizer's turns so far
        self._diarized_all = False
        self._flushed = False
        self._new_utterance(None)

    def _new_utterance(self, start: int | None, trigger: int | None = None) -> None:
        self._utt_start = start
        self._trigger = trigger  # first frame at or above the threshold
        self._confirmed = False
        self._silence_start: int | None = None
        self._recent: collections.deque[tuple[int, float]] = collections.deque()  # (frame start, prob)

    # -- streaming --------------------------------------------------------------------------

    def push(self, pcm) -> list[PipelineEvent]:
        """Feed samples; returns the events they brought (and transcripts finished since)."""
        if self._flushed:
            raise AudioError("this pipeline was flushed; call reset() to start a new stream")
        x = as_pcm(pcm, "pcm", offset=self._seen, sample_rate=self.sample_rate)
        events: list[PipelineEvent] = []
        if self.kws is not None:
            self._detections += list(self.kws.push(x.copy()))
        if self.diarizer is not None:
            self._turns += self.diarizer.push(x)
        self._audio = np.concatenate([self._audio, x])
        self._seen += len(x)
        self._frames_of(self.vad.process(x), events)
        self._trim()
        return events + self._collect(wait=self.wait)

    def flush(self) -> list[PipelineEvent]:
        """End of the stream: the last utterance is closed and every transcription awaited."""
        if self._flushed:
            return []
        self._flushed = True
        events: list[PipelineEvent] = []
        if self.kws is not None and callable(getattr(self.kws, "flush", None)):
            self._detections += list(self.kws.flush())
        self._frames_of(self.vad.flush(), events)
        self._hotwords(math.inf, events)
        if self._mode is PipelineState.SPEECH_ACTIVE:
            if self._confirmed:
                self._end_utterance(self._seen, events)
            self._mode = self._idle_mode
        if self.diarizer is not None:
            self._turns += self.diarizer.flush()
            self._diarized_all = True
        return events + self._collect(wait=True)

    def _frames_of(self, probs, events: list) -> None:
        F = self.vad.frame_samples
        for p in probs:
            s = self._frames * F
            e = min(s + F, self._seen)
            self._hotwords(e, events)
            self._frame(s, e, float(p), events)
            self._frames += 1

    def _hotwords(self, until: float, events: list) -> None:
        sr = self.sample_rate
        while self._detections and self._detections[0].time * sr <= until:
            d = self._detections.pop(0)
            if self._mode is not PipelineState.LISTENING_FOR_HOTWORD:
                continue  # already awake: a repeated wake word changes nothing
            at = min(int(round(d.time * sr)), self._seen)
            events.append(Hotword(at / sr, d.wake_word, float(d.probability)))
            self._mode = PipelineState.LISTENING_FOR_SPEECH
            self._floor = max(self._floor, at)
            self._deadline = at + self._samples(self.params.listen_timeout_ms)

    def _frame(self, s: int, e: int, p: float, events: list) -> None:
        P = self.params
        speech = p >= P.speech_threshold
        if self._mode is PipelineState.LISTENING_FOR_HOTWORD:
            return
        if self._mode is PipelineState.LISTENING_FOR_SPEECH:
            if speech and e > self._floor:
                start = max(self._floor, s - self._samples(P.pre_roll_ms))
                self._mode = PipelineState.SPEECH_ACTIVE
                self._new_utterance(start, max(s, self._floor))
                self._recent.append((s, p))
            elif self.kws is not None and s >= self._deadline:
                self._mode = PipelineState.LISTENING_FOR_HOTWORD
            return
        # SPEECH_ACTIVE
        self._recent.append((s, p))
        while self._recent and self._recent[0][0] < e - self._samples(P.split_search_ms):
            self._recent.popleft()
        if speech:
            self._silence_start = None
            if not self._confirmed and e - self._trigger >= self._samples(P.min_speech_ms):
                self._confirmed = True
                events.append(SpeechStart(self._utt_start / self.sample_rate))
        elif p < P.effective_neg_threshold and self._silence_start is None:
            self._silence_start = s
        if self._silence_start is not None and e - self._silence_start >= self._samples(P.end_silence_ms):
            end = min(self._silence_start + self._samples(P.end_pad_ms), e)
            if self._confirmed:
                self._end_utterance(end, events)
                self._mode = self._idle_mode
            else:  # a burst too short to be speech: keep listening as before it
                self._mode = PipelineState.LISTENING_FOR_SPEECH
            self._new_utterance(None)
            return
        if self._confirmed and e - self._utt_start >= self._samples(P.max_utterance_ms):
            cut = min(self._recent, key=lambda fp: fp[1])[0] if self._recent else s
            cut = max(cut, self._utt_start + self._samples(P.max_utterance_ms - P.split_search_ms))
            self._end_utterance(cut, events)
            events.append(SpeechStart(cut / self.sample_rate))
            self._utt_start, self._confirmed = cut, True
            self._recent = collections.deque(fp for fp in self._recent if fp[0] >= cut)
            if self._silence_start is not None and self._silence_start < cut:
                self._silence_start = cut

    def _end_utterance(self, end: int, events: list) -> None:
        sr = self.sample_rate
        start = self._utt_start
        events.append(SpeechEnd(end / sr))
        samples = self._audio[start - self._audio_start : end - self._audio_start].copy()
        job = _Job(start / sr, end / sr, samples)
        job.future = self._executor.submit(self._transcribe, job)
        self._jobs.append(job)
        self._floor = end

    def _trim(self) -> None:
        if self._mode is PipelineState.SPEECH_ACTIVE:
            keep = self._utt_start
        else:
            keep = max(self._floor, self._frames * self.vad.frame_samples - self._samples(self.params.pre_roll_ms))
            keep = min(keep, self._frames * self.vad.frame_samples)
        drop = keep - self._audio_start
        if drop > 0:
            self._audio = self._audio[drop:]
            self._audio_start = keep

    # -- transcription ----------------------------------------------------------------------

    def _transcribe(self, job: _Job) -> str | None:
        if job.cancelled:
            return None
        self._running = job
        try:
            self.transcriber.reset()  # clears a cancellation meant for an earlier utterance
            if job.cancelled:
                return None
            text = []
            for seg in self.transcriber.transcribe(job.samples):
                if job.cancelled:
                    return None
                text.append(seg.text)
            return "".join(text).strip()
        except Exception:
            if job.cancelled:
                return None
            raise
        finally:
            self._running = None

    def cancel(self) -> bool:
        """Cancel the transcription running now (wait-free, from any thread); False if none runs."""
        job = self._running
        if job is None:
            return False
        job.cancelled = True
        self.transcriber.cancel()
        return True

    def _label(self, start: float, end: float) -> str | None:
        best, best_overlap = None, 0.0
        for t in self._turns:
            overlap = min(end, t.end) - max(start, t.start)
            if overlap > best_overlap:
                best, best_overlap = t.label, overlap
        return best

    def _collect(self, wait: bool) -> list[PipelineEvent]:
        out: list[PipelineEvent] = []
        while self._jobs:
            job = self._jobs[0]
            if not job.future.done():
                if not wait:
                    break
                concurrent.futures.wait([job.future])
            text = None if job.future.cancelled() else job.future.result()  # a transcriber's error is raised here
            if job.cancelled or text is None:
                out.append(TranscriptCancelled(job.start, job.end))
                self._jobs.popleft()
                continue
            speaker = None
            if self.diarizer is not None:
                if not self._diarized_all and self.diarizer.covered < job.end:
                    break  # the diarizer has not heard the whole utterance yet
                speaker = self._label(job.start, job.end)
            out.append(Transcript(job.start, job.end, text, speaker))
            self._jobs.popleft()
        return out

    def close(self) -> None:
        """Stop the worker thread (after the transcription it runs)."""
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
