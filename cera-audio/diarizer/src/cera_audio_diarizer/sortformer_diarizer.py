"""`SortformerDiarizer`: speaker turns from NVIDIA's Streaming Sortformer.

PCM goes through the model's front end and `SortformerStream` (speaker cache, FIFO and
chunks, as NeMo streams); each output frame (80 ms for the released model) gives one
probability per speaker slot. A slot is active in a frame where its probability exceeds
``threshold`` (0.5 by default); each run of active frames is a `SpeakerTurn`, final once a
frame where the slot is silent has been seen (or at `flush`), and handed out once no turn
still open began before its end (so ``covered`` passes every turn handed out). Turns of different speakers
may overlap (Sortformer detects overlapped speech). The model orders its slots by arrival
already; labels follow the order in which slots first become active, so they are in order
of arrival in any case. With ``max_speakers`` below the model's ``n_speakers`` slots, a
slot that becomes active after ``max_speakers`` others gets no label: its frames are left
out (the default is all slots). No smoothing or minimum durations are applied.
"""

from __future__ import annotations

import numpy as np

from cera.audio import Diarizer, SpeakerTurn, as_pcm
from cera.errors import AudioError, InvalidOptions

from .sortformer import SortformerModel, SortformerStream

DEFAULT_ACTIVITY_THRESHOLD = 0.5


class SortformerDiarizer(Diarizer):
    def __init__(self, model: SortformerModel, threshold: float = DEFAULT_ACTIVITY_THRESHOLD,
                 max_speakers: int | None = None, streaming: dict | None = None):  # fmt: skip
        n = model.config.n_speakers
        if not 0.0 < float(threshold) < 1.0:
            raise AudioError(f"threshold must be in (0, 1) (a speaker-activity probability), got {threshold}")
        max_speakers = n if max_speakers is None else int(max_speakers)
        if not 1 <= max_speakers <= n:
            raise AudioError(f"max_speakers must be in [1, {n}] (the model's speaker slots), got {max_speakers}")
        self.model = model
        self.sample_rate = model.sample_rate
        self.sample_rates = (model.sample_rate,)
        self.threshold = float(threshold)
        self.max_speakers = max_speakers
        self._stream = SortformerStream(model, **(streaming or {}))
        self.reset()

    @classmethod
    def from_gguf(cls, gguf, sample_rate: int | None = None, device: str = "auto", threads: int | None = None,
                  **options) -> SortformerDiarizer:  # fmt: skip
        known = {"threshold", "max_speakers", "streaming"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InvalidOptions(f"unknown diarizer option(s) {unknown}; known: {', '.join(sorted(known))}")
        model = SortformerModel(gguf.path, device=device, threads=threads)
        if sample_rate not in (None, model.sample_rate):
            model.close()
            raise InvalidOptions(f"the Sortformer runs at {model.sample_rate} Hz, not {sample_rate}; resample the audio")
        try:
            return cls(model, **options)
        except BaseException:
            model.close()
            raise

    def reset(self) -> None:
        self._mel = self.model.mel_stream()
        self._stream.reset()
        self._seen = 0
        self._frame = 0  # output frames decided so far
        self._open: dict[int, int] = {}  # slot -> first frame of its open run
        self._labels: dict[int, int] = {}  # slot -> speaker index (order of arrival)
        self._pending: list[SpeakerTurn] = []  # closed, waiting for `covered` to pass their end
        self._flushed = False

    @property
    def covered(self) -> float:
        if self._flushed:
            return self._seen / self.sample_rate
        upto = min([self._frame, *self._open.values()])
        return upto * self.model.frame_seconds

    def push(self, pcm) -> list[SpeakerTurn]:
        if self._flushed:
            raise AudioError("this diarizer was flushed; call reset() to start a new stream")
        x = as_pcm(pcm, "pcm", offset=self._seen, sample_rate=self.sample_rate)
        self._seen += len(x)
        return self._turns(self._stream.push(self._mel.push(x)), final=False)

    def flush(self) -> list[SpeakerTurn]:
        if self._flushed:
            return []
        probs = np.concatenate([self._stream.push(self._mel.finish()), self._stream.finish()])
        turns = self._turns(probs, final=True)
        self._flushed = True
        return turns

    def _turns(self, probs: np.ndarray, final: bool) -> list[SpeakerTurn]:
        sec = self.model.frame_seconds
        end_s = self._seen / self.sample_rate
        out: list[SpeakerTurn] = []
        for row in probs:
            active = row > self.threshold
            for slot in range(len(row)):
                if active[slot] and slot not in self._open:
                    if slot not in self._labels and len(self._labels) < self.max_speakers:
                        self._labels[slot] = len(self._labels)
                    if slot in self._labels:
                        self._open[slot] = self._frame
                elif not active[slot] and slot in self._open:
                    start = self._open.pop(slot)
                    out.append(SpeakerTurn(start * sec, min(self._frame * sec, end_s), self._labels[slot]))
            self._frame += 1
        if final:
            for slot, start in sorted(self._open.items()):
                out.append(SpeakerTurn(start * sec, min(self._frame * sec, end_s), self._labels[slot]))
            self._open.clear()
        # a turn goes out once every turn that could end before it has (`covered` passed it)
        pending = sorted(self._pending + out, key=lambda t: (t.start, t.speaker))
        upto = end_s if final else self.covered
        self._pending = [t for t in pending if t.end > upto + 1e-9]
        return [t for t in pending if t.end <= upto + 1e-9]

    def close(self) -> None:
        self.model.close()
