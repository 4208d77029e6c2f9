"""`HotwordDetector`: a microWakeWord model from GGUF, streaming PCM in, detections out.

Per 10 ms of audio the micro front end gives 40 features; every ``step_frames`` (3)
feature frames the network takes one step and gives a probability; the detector averages
the last ``sliding_window_size`` (5) probabilities and reports a detection when that mean
exceeds the threshold — pymicro-wakeword's and ESPHome's rule (strictly greater; no
decision before the window has filled). After a detection the window is emptied, so the
next one needs ``sliding_window_size`` fresh steps, and none is reported for
``refractory_s`` seconds (default 1 s, about a wake word's length: one utterance is one
detection).

The front end takes 16-bit PCM; float input (-1..1) is rounded to it (``x * 32768``,
saturated), which returns exactly the samples of a 16-bit file read as float.
"""

from __future__ import annotations

import json

import attrs
import numpy as np

from cera.audio.kws import Detection, KeywordSpotter
from cera.audio.pcm import as_pcm
from cera.errors import AudioError, ModelConfigError
from cera.formats.gguf import GGUFFile
from cera.blocks.hparams import HParams

from .frontend import FrontendConfig, MicroFrontend
from .graph import graph_from_json
from .network import StreamingNetwork

ARCHITECTURE = "microwakeword"
KEY_PREFIX = "kws"


@attrs.frozen
class Step:
    """One network step: its end time, the network's probability and the sliding mean
    (None until the window has filled)."""

    time: float
    probability: float
    average: float | None

    def to_json(self) -> dict:
        return {"time": round(self.time, 3), "probability": round(self.probability, 6)}


@attrs.frozen
class ModelInfo:
    wake_words: tuple[str, ...]
    sample_rate: int
    threshold: float
    sliding_window_size: int
    step_frames: int
    version: int
    languages: tuple[str, ...]
    frontend: FrontendConfig


def _read_model(gguf: GGUFFile) -> tuple[ModelInfo, StreamingNetwork]:
    where = str(gguf.path)
    if gguf.architecture != ARCHITECTURE:
        raise AudioError(f"{where}: architecture {gguf.architecture!r} is not {ARCHITECTURE!r}")
    hp = HParams(gguf, "microWakeWord")
    hp.arch = KEY_PREFIX  # settings live under kws.*, whatever the network architecture
    words = hp.req("wake_words", kind=object)
    if not isinstance(words, list) or not words or not all(isinstance(w, str) and w for w in words):
        raise ModelConfigError(f"{where}: kws.wake_words should be a list of non-empty strings, got {words!r}")
    languages = hp.opt("trained_languages", [], kind=object)
    info = ModelInfo(
        wake_words=tuple(words),
        sample_rate=hp.req("sample_rate", int),
        threshold=hp.req("threshold", float),
        sliding_window_size=hp.req("sliding_window_size", int),
        step_frames=hp.req("step_frames", int),
        version=hp.opt("model_version", 0, int),
        languages=tuple(str(x) for x in languages) if isinstance(languages, list) else (),
        frontend=FrontendConfig.from_hparams(hp),
    )
    for key in list(gguf.metadata):
        if key.startswith("kws.micro."):
            hp.ignore(key[len("kws.") :])  # ESPHome's deployment settings (arena size, version)
    try:
        doc = json.loads(hp.req("graph", str))
    except ValueError as e:
        raise ModelConfigError(f"{where}: kws.graph is not JSON ({e})") from None
    hp.check_all_understood()
    if info.sample_rate != info.frontend.sample_rate or not 0 < info.threshold < 1 or info.sliding_window_size < 1:
        raise ModelConfigError(f"{where}: inconsistent detector settings {info}")
    constants, initials = {}, []
    try:
        for i in doc.get("constants", []):
            constants[int(i)] = np.array(gguf.tensor_data(f"net.{i}"))
        for k in range(len(doc.get("variables", []))):
            initials.append(np.array(gguf.tensor_data(f"state.{k}")))
    except KeyError as e:
        raise ModelConfigError(f"{where}: tensor {e} of the network is missing") from None
    tensors = doc.get("tensors", [])
    for i, arr in list(constants.items()):
        if 0 <= i < len(tensors):
            constants[i] = arr.reshape(tuple(tensors[i]["shape"]))
    for k, arr in enumerate(initials):
        initials[k] = arr.reshape(tuple(doc["variables"][k]["shape"]))
    graph = graph_from_json(doc, constants, initials, where)
    net = StreamingNetwork(graph, where)
    if net.stride != info.step_frames or net.features != info.frontend.channels:
        raise ModelConfigError(
            f"{where}: the network takes ({net.stride}, {net.features}) features per step, the settings say "
            f"({info.step_frames}, {info.frontend.channels})"
        )
    return info, net


class HotwordDetector(KeywordSpotter):
    """One microWakeWord model: `push` PCM chunks of any size, get `Detection`s."""

    def __init__(self, info: ModelInfo, net: StreamingNetwork, source: str = "", threshold: float | None = None,
                 refractory_s: float = 1.0):
        if threshold is not None and not 0.0 <= threshold < 1.0:
            raise AudioError(f"threshold {threshold}: a probability threshold must be in [0, 1)")
        if refractory_s < 0:
            raise AudioError(f"refractory_s {refractory_s}: must be >= 0")
        self.info = info
        self.network = net
        self.source = source
        self.wake_words = info.wake_words
        self.wake_word = info.wake_words[0]
        self.sample_rate = info.sample_rate
        self.sample_rates = (info.sample_rate,)
        self.threshold = info.threshold if threshold is None else float(threshold)
        self.window = info.sliding_window_size
        self.refractory_s = refractory_s
        self.frontend = MicroFrontend(info.frontend)
        fe = self.frontend
        self.step_seconds = info.step_frames * fe.step / self.sample_rate
        self._scale = info.frontend.output_scale
        self._pending = np.zeros((info.step_frames, info.frontend.channels), dtype=np.float64)
        self._q = np.zeros((info.step_frames, info.frontend.channels), dtype=np.int8)
        self._probs = np.zeros(self.window, dtype=np.float64)
        self._pcm = np.zeros(0, dtype=np.int16)
        # Gating (see `set_gate`): the last `receptive_steps` inputs, replayed into a fresh
        # network when the gate opens, so that its outputs from then on are those it would
        # have given had it run all along.
        self.receptive_steps = net.receptive_steps()
        self._history = np.zeros((self.receptive_steps, *self._q.shape), dtype=np.int8)
        self.gate = None
        self.reset()

    # -- construction -----------------------------------------------------------------

    @classmethod
    def from_gguf(cls, gguf: GGUFFile, sample_rate: int | None = None, **options) -> HotwordDetector:
        unknown = set(options) - {"threshold", "refractory_s"}
        if unknown:
            raise AudioError(f"HotwordDetector takes threshold and refractory_s; got {sorted(unknown)}")
        info, net = _read_model(gguf)
        if sample_rate is not None and sample_rate != info.sample_rate:
            raise AudioError(f"{gguf.path}: this model runs at {info.sample_rate} Hz, not {sample_rate} Hz; resample the audio")
        return cls(info, net, str(gguf.path), **options)

    @classmethod
    def open(cls, path, **options) -> HotwordDetector:
        with GGUFFile(path) as gguf:
            return cls.from_gguf(gguf, **options)

    # -- streaming --------------------------------------------------------------------

    def reset(self) -> None:
        self.frontend.reset()
        self.network.reset()
        self._n_pending = 0
        self._n_probs = 0
        self._steps_done = 0
        self._last_detection = -np.inf
        self._samples_seen = 0
        self._hist_n = 0
        self._gated = False
        self.steps_run = 0
        self.steps_skipped = 0

    def set_gate(self, gate) -> None:
        """``gate(step_end_time) -> bool``: whether the network runs for that step. Skipped
        steps give no probability and empty the sliding window; when the gate opens again,
        the network is rebuilt from the last `receptive_steps` inputs first."""
        self.gate = gate

    @property
    def time(self) -> float:
        """Seconds of audio pushed since the last reset."""
        return self._samples_seen / self.sample_rate

    def _as_int16(self, pcm) -> np.ndarray:
        if isinstance(pcm, np.ndarray) and pcm.dtype == np.int16:
            if pcm.ndim != 1:
                raise AudioError(f"expected mono PCM (one dimension), got shape {pcm.shape}")
            return pcm
        x = as_pcm(pcm, "pcm", offset=self._samples_seen, sample_rate=self.sample_rate)
        if len(self._pcm) < len(x):
            self._pcm = np.empty(len(x), dtype=np.int16)
        out = self._pcm[: len(x)]
        scaled = x * np.float32(32768.0)
        np.rint(scaled, out=scaled)
        np.clip(scaled, -32768, 32767, out=scaled)
        np.copyto(out, scaled, casting="unsafe")
        return out

    def push(self, pcm, trace: list | None = None) -> list[Detection]:
        """Detections completed by these samples; with ``trace``, each step's `Step` is appended to it."""
        samples = self._as_int16(pcm)
        self._samples_seen += len(samples)
        found: list[Detection] = []
        S = len(self._pending)
        for block in self.frontend.process(samples):
            i, n = 0, len(block)
            while i < n:
                take = min(S - self._n_pending, n - i)
                self._pending[self._n_pending : self._n_pending + take] = block[i : i + take]
                self._n_pending += take
                i += take
                if self._n_pending == S:
                    self._n_pending = 0
                    self._step(found, trace)
        return found

    def _step_time(self) -> float:
        fe = self.frontend
        last_frame = self._steps_done * len(self._pending) + len(self._pending) - 1
        return (last_frame * fe.step + fe.window) / self.sample_rate

    def _step(self, found: list, trace: list | None) -> None:
        t = self._step_time()
        net = self.network
        np.multiply(self._pending, self._scale, out=self._pending)
        net.quantize_features(self._pending, self._q)
        self._steps_done += 1
        if self.gate is not None:
            run = self.gate(t)
            if run and self._gated:
                net.reset()
                R = self.receptive_steps
                for k in range(max(0, self._hist_n - R), self._hist_n):
                    net.step_quantized(self._history[k % R])
                self._gated = False
            self._history[self._hist_n % self.receptive_steps] = self._q
            self._hist_n += 1
            if not run:
                self._gated = True
                self._n_probs = 0
                self.steps_skipped += 1
                return
        p = net.probability(net.step_quantized(self._q))
        self.steps_run += 1
        self._probs[self._n_probs % self.window] = p
        self._n_probs += 1
        avg = None
        if self._n_probs >= self.window:
            avg = float(sum(self._probs.tolist())) / self.window
        if trace is not None:
            trace.append(Step(t, p, avg))
        if avg is not None and avg > self.threshold and t - self._last_detection >= self.refractory_s:
            found.append(Detection(self.wake_word, t, avg))
            self._last_detection = t
            self._n_probs = 0

    def detect(self, pcm) -> list[Detection]:
        """Detections in a whole clip, from a fresh state."""
        self.reset()
        out = self.push(pcm)
        self.reset()
        return out


def load_hotword_detector(model, **options) -> HotwordDetector:
    """A detector from a GGUF path, a .tflite path (converted and cached) or a model name."""
    from .models import model_path

    return HotwordDetector.open(model_path(model), **options)


__all__ = ["Detection", "HotwordDetector", "Step", "load_hotword_detector"]
