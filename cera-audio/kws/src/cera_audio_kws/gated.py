"""`HotwordIterator`: a detector behind a Silero VAD gate and adaptive gain control.

**VAD gate.** Silero VAD (cera-audio-vad) reads the same audio in its 512-sample frames
(32 ms at 16 kHz). The network runs a step only while speech was heard within the last
``hold`` seconds — by default the network's receptive field (`HotwordDetector.
receptive_steps` steps, about 1.6 s for the PyPI models), so a wake word spoken just
before the speech ends is still fully seen. While the gate is closed the front end keeps
running (its noise estimate stays current) and the last receptive-field worth of network
inputs is kept; when speech starts, the network is rebuilt from them, so from then on its
probabilities are exactly those of an ungated run. The gate only stops detections in
stretches without speech, which are false accepts by definition. The VAD runs at 16 kHz;
audio at other rates is resampled for the detector and not gated.

**Gain control.** Soft speech is brought toward a reference peak level before the front
end: per VAD frame the gain is ``reference_peak / speech_peak``, where ``speech_peak`` is
the largest sample of recent speech frames (decaying by half every ``peak_decay_s``),
limited to ``max_gain`` (30x) and to what keeps the noise floor (the quietest RMS of the
recent frames without speech) below ``noise_ceiling``; it never goes below 1 (loud audio is left alone) and is 1 on
frames that are not speech, so silence and noise are never amplified. The gain moves
linearly across each frame, so it makes no clicks. A frame counts as speech for the gain
when its RMS is 4x the noise floor; the gain comes before the VAD, so that the VAD too
hears soft speech brought up (Silero VAD misses speech 50 dB down).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from cera.audio.pcm import as_pcm
from cera.errors import AudioError

from .detector import Detection, HotwordDetector


class GainControl:
    """Adaptive peak normalization of float PCM, frame by frame (see the module docstring)."""

    def __init__(self, frame: int = 512, sample_rate: int = 16000, reference_peak: float = 0.5, max_gain: float = 30.0,
                 noise_ceiling: float = 0.01, peak_decay_s: float = 2.0, noise_window_s: float = 3.0):
        if not (0 < reference_peak <= 1 and max_gain >= 1 and noise_ceiling > 0 and peak_decay_s > 0):
            raise AudioError("gain control: reference_peak in (0, 1], max_gain >= 1, noise_ceiling and peak_decay_s > 0")
        self.frame, self.sample_rate = frame, sample_rate
        self.reference_peak, self.max_gain, self.noise_ceiling = reference_peak, max_gain, noise_ceiling
        self._decay = 0.5 ** (frame / sample_rate / peak_decay_s)
        self._rms_history = np.full(max(1, int(noise_window_s * sample_rate / frame)), np.inf)
        self._ramp = np.arange(1, frame + 1, dtype=np.float32) / frame
        self.reset()

    def reset(self) -> None:
        self._peak = 0.0
        self._gain = 1.0
        self._rms_history[:] = np.inf
        self._n = 0

    @property
    def noise_floor(self) -> float:
        floor = float(self._rms_history.min())
        return floor if np.isfinite(floor) else 0.0

    @property
    def gain(self) -> float:
        return self._gain

    def apply(self, frame: np.ndarray, is_speech: bool | None) -> np.ndarray:
        """Scale one frame in place and return it; ``is_speech`` None: decide by energy."""
        rms = float(np.sqrt(np.mean(np.square(frame, dtype=np.float64))))
        floor = self.noise_floor
        if is_speech is None:
            is_speech = rms > 4 * max(floor, 1e-5)
        if not is_speech:  # the noise floor is measured where there is no speech
            self._rms_history[self._n % len(self._rms_history)] = rms
            self._n += 1
            floor = self.noise_floor
        peak = float(np.max(np.abs(frame))) if len(frame) else 0.0
        self._peak *= self._decay
        target = 1.0
        if is_speech:
            self._peak = max(self._peak, peak)
            if self._peak > 0:
                target = self.reference_peak / self._peak
                if floor > 0:
                    target = min(target, self.noise_ceiling / floor)
                target = min(max(target, 1.0), self.max_gain)
        g0, self._gain = self._gain, target
        if g0 == target == 1.0:
            return frame
        n = len(frame)
        frame *= g0 + (target - g0) * self._ramp[:n]
        return frame


class HotwordIterator:
    """Detections from a stream of PCM chunks, through the VAD gate and gain control.

    ``for d in HotwordIterator(detector, chunks): ...`` or, pushing: `push` each chunk.
    ``vad``: a `cera.audio.VoiceActivityDetector`, None for cera-audio-vad's default Silero
    model, or False for no gating.
    """

    def __init__(self, detector: HotwordDetector, chunks: Iterable | None = None, vad=None, agc: bool = True,
                 sample_rate: int | None = None, vad_threshold: float = 0.5, hold_s: float | None = None):
        self.detector = detector
        self.sample_rate = sample_rate or detector.sample_rate
        self._chunks = chunks
        self._resampler = None
        if self.sample_rate != detector.sample_rate:
            import soxr

            self._resampler = soxr.ResampleStream(self.sample_rate, detector.sample_rate, 1, dtype="float32")
            vad = False  # the VAD reads 16 kHz audio: other rates are not gated
        if vad is None:
            from cera.audio import load_vad
            from cera_audio_vad import default_model_path

            vad = load_vad(default_model_path(quiet=True), sample_rate=detector.sample_rate)
        self.vad = vad or None
        if self.vad is not None and self.vad.sample_rate != detector.sample_rate:
            raise AudioError(f"the VAD runs at {self.vad.sample_rate} Hz, the detector at {detector.sample_rate} Hz")
        self.vad_threshold = vad_threshold
        self.hold_s = detector.receptive_steps * detector.step_seconds if hold_s is None else hold_s
        frame = self.vad.frame_samples if self.vad is not None else 512
        self.frame = frame
        self.agc = GainControl(frame, detector.sample_rate) if agc else None
        self._buf = np.zeros(frame, dtype=np.float32)
        self._n = 0
        self._frames = 0
        self._last_speech = -np.inf
        if self.vad is not None:
            detector.set_gate(self._gate)
        else:
            detector.set_gate(None)
        self.reset()

    def reset(self) -> None:
        self.detector.reset()
        if self.vad is not None:
            self.vad.reset()
        if self.agc is not None:
            self.agc.reset()
        self._n = 0
        self._frames = 0
        self._last_speech = -np.inf

    def _gate(self, t: float) -> bool:
        return t - self._last_speech <= self.hold_s

    def push(self, pcm, trace: list | None = None) -> list[Detection]:
        """Detections completed by this chunk (float PCM at ``sample_rate``)."""
        x = as_pcm(pcm, "pcm", sample_rate=self.sample_rate)
        if self._resampler is not None:
            x = self._resampler.resample_chunk(x)
        if self.vad is None and self.agc is None:
            return self.detector.push(x, trace)
        found: list[Detection] = []
        pos = 0
        while pos < len(x):
            take = min(self.frame - self._n, len(x) - pos)
            self._buf[self._n : self._n + take] = x[pos : pos + take]
            self._n += take
            pos += take
            if self._n == self.frame:
                found += self._frame(self._buf, trace)
                self._n = 0
        return found

    def _frame(self, frame: np.ndarray, trace) -> list[Detection]:
        # Gain first (its speech test is energy against the noise floor), so that the VAD,
        # like the network, hears soft speech brought up.
        if self.agc is not None:
            frame = self.agc.apply(frame, None)
        if self.vad is not None:
            p = self.vad.process_frame(frame)
            self._frames += 1
            if p >= self.vad_threshold:
                self._last_speech = self._frames * self.frame / self.detector.sample_rate
        return self.detector.push(frame, trace)

    def flush(self, trace: list | None = None) -> list[Detection]:
        """Push the partial frame that waits (without VAD or gain: too short to judge)."""
        if self._resampler is not None:
            tail = self._resampler.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
            found = self.push_resampled(tail, trace)
        else:
            found = []
        if self._n:
            found += self.detector.push(self._buf[: self._n].copy(), trace)
            self._n = 0
        return found

    def push_resampled(self, x: np.ndarray, trace) -> list[Detection]:
        saved, self._resampler = self._resampler, None
        try:
            return self.push(x, trace)
        finally:
            self._resampler = saved

    def __iter__(self) -> Iterator[Detection]:
        if self._chunks is None:
            raise AudioError("HotwordIterator was made without chunks; call push() instead, or pass chunks")
        self.reset()
        for chunk in self._chunks:
            yield from self.push(chunk)
        yield from self.flush()
