"""Silero VAD in cera against onnxruntime on the same ONNX file: per-frame probabilities.

The peer runs silero_vad.onnx frame by frame the way silero-vad's wrapper does
(ort_peer.py); cera runs the GGUF converted from that file. Every signal is compared at
both sample rates, within 1e-4 absolute per frame. The spoken clips are also compared with
the probabilities silero-vad itself recorded (data/silero_clips.json), which needs no
onnxruntime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ort_peer import ort_probabilities

from cera_audio_io import read_audio, resample

DATA = Path(__file__).resolve().parent / "data"  # the folder tests/audio/conftest.py names too

TOLERANCE = 1e-4
RATES = (16000, 8000)


def _tones(sr: int, seconds: float = 3.0) -> np.ndarray:
    """Music-like: a melody of notes with harmonics and a decaying envelope, over a held chord."""
    t = np.arange(int(sr * seconds)) / sr
    chord = sum(0.08 * np.sin(2 * np.pi * f * t) for f in (130.8, 164.8, 196.0))
    notes = (261.6, 293.7, 329.6, 349.2, 392.0, 440.0, 493.9, 523.3)
    melody = np.zeros_like(t)
    note_len = int(0.25 * sr)
    for i in range(len(t) // note_len):
        f = notes[(i * 3) % len(notes)]
        seg = slice(i * note_len, (i + 1) * note_len)
        local = t[seg] - t[seg][0]
        env = np.exp(-6 * local)
        melody[seg] = env * sum(0.3 / k * np.sin(2 * np.pi * k * f * local) for k in (1, 2, 3))
    return (chord + melody).astype(np.float32)


def _speech(sr: int) -> np.ndarray:
    return read_audio(DATA / f"speech_{sr // 1000}k.flac", sr, resample_ok=False).samples


def _signal(kind: str, sr: int) -> np.ndarray:
    rng = np.random.default_rng(1234 + sr)
    if kind == "speech":
        return _speech(sr)
    if kind == "silence":
        return np.zeros(int(sr * 2.0) + 77, dtype=np.float32)
    if kind == "near-silence":
        return (1e-4 * rng.standard_normal(int(sr * 2.0))).astype(np.float32)
    if kind == "tones":
        return _tones(sr)
    if kind == "white-noise":
        return (0.3 * rng.standard_normal(int(sr * 3.0))).astype(np.float32)
    if kind == "loud-noise":
        return (2.0 * rng.standard_normal(int(sr * 1.0))).astype(np.float32)  # far beyond full scale
    if kind == "clipped-speech":
        return np.clip(8.0 * _speech(sr), -1.0, 1.0)
    if kind == "clipped-tone":
        t = np.arange(int(sr * 2.0)) / sr
        return np.clip(4.0 * np.sin(2 * np.pi * 220 * t), -1.0, 1.0).astype(np.float32)
    if kind == "speech-in-noise":
        x = _speech(sr)
        return (x + 0.05 * rng.standard_normal(len(x))).astype(np.float32)
    raise AssertionError(kind)


SIGNALS = [
    "speech",
    "silence",
    "near-silence",
    "tones",
    "white-noise",
    "loud-noise",
    "clipped-speech",
    "clipped-tone",
    "speech-in-noise",
]


@pytest.fixture(scope="module", params=RATES, ids=lambda r: f"{r // 1000}k")
def vad(request, silero_gguf):
    from cera_audio_vad.silero import SileroVad

    return SileroVad.open(silero_gguf, sample_rate=request.param)


@pytest.mark.parametrize("kind", SIGNALS)
def test_probabilities_match_onnxruntime(vad, ort_session, kind):
    x = _signal(kind, vad.sample_rate)
    ours = vad.probabilities(x)
    peer = ort_probabilities(ort_session, x, vad.sample_rate)
    assert ours.shape == peer.shape == (-(-len(x) // vad.frame_samples),)
    diff = float(np.max(np.abs(ours - peer)))
    assert diff <= TOLERANCE, f"{kind} at {vad.sample_rate} Hz: max |p - p_ort| = {diff:.2e}"


@pytest.mark.parametrize("kind", ["speech", "tones", "clipped-speech", "near-silence"])
def test_frame_by_frame_path_matches_onnxruntime(vad, ort_session, kind):
    """process_frame has its own code path (streaming one frame at a time): check it on its own."""
    x = _signal(kind, vad.sample_rate)
    f = vad.frame_samples
    x = x[: len(x) // f * f]
    vad.reset()
    ours = np.array([vad.process_frame(x[i : i + f]) for i in range(0, len(x), f)])
    peer = ort_probabilities(ort_session, x, vad.sample_rate)
    assert np.max(np.abs(ours - peer)) <= TOLERANCE


def test_probabilities_match_silero_vad_recorded(vad, clip_reference):
    """The spoken clip against what silero-vad's own wrapper produced (stored; no onnxruntime needed)."""
    entry = clip_reference["clips"][f"speech_{vad.sample_rate // 1000}k.flac"]
    x = _speech(vad.sample_rate)
    assert len(x) == entry["samples"]
    ours = vad.probabilities(x)
    ref = np.asarray(entry["probs"], dtype=np.float64)
    assert ours.shape == ref.shape
    assert np.max(np.abs(ours - ref)) <= TOLERANCE
    # The clip is mostly speech with real pauses: the test is not vacuous.
    assert (ref > 0.9).sum() > 0.4 * len(ref) and (ref < 0.1).sum() > 0.1 * len(ref)


def test_recurrent_state_matters_and_reset_restores_it(vad, ort_session):
    """The same frame gives different probabilities after different histories; reset forgets them."""
    x = _signal("speech", vad.sample_rate)
    f = vad.frame_samples
    probe = x[60 * f : 61 * f]
    vad.reset()
    fresh = vad.process_frame(probe)
    vad.reset()
    vad.process(x[: 60 * f])
    after_history = vad.process_frame(probe)
    peer_after = ort_probabilities(ort_session, x[: 61 * f], vad.sample_rate)[-1]
    assert abs(after_history - peer_after) <= TOLERANCE
    assert abs(after_history - fresh) > 1e-3  # the history changed the answer
    vad.reset()
    assert vad.process_frame(probe) == pytest.approx(fresh, abs=1e-7)


def test_streaming_in_any_chunks_equals_whole_clip(vad):
    x = _signal("speech-in-noise", vad.sample_rate)
    whole = vad.probabilities(x)
    rng = np.random.default_rng(5)
    vad.reset()
    parts, i = [], 0
    while i < len(x):
        k = int(rng.choice([1, 7, vad.frame_samples - 1, vad.frame_samples, 3 * vad.frame_samples + 5, 2000]))
        parts.append(vad.process(x[i : i + k]))
        i += k
    parts.append(vad.flush())
    streamed = np.concatenate(parts)
    assert streamed.shape == whole.shape
    # Equal up to float32 rounding: BLAS sums in another order for other batch sizes.
    assert np.max(np.abs(streamed - whole)) <= 1e-5


def test_frame_by_frame_equals_batch(vad):
    x = _signal("tones", vad.sample_rate)[: 40 * vad.frame_samples]
    batch = vad.probabilities(x)
    vad.reset()
    single = np.array([vad.process_frame(x[i : i + vad.frame_samples]) for i in range(0, len(x), vad.frame_samples)])
    assert np.max(np.abs(single - batch)) <= 1e-5


def test_long_clip_crosses_block_boundaries(vad, ort_session):
    """More frames than one batched block (256): the state must carry across blocks."""
    x = np.concatenate([_signal("speech", vad.sample_rate)] * 2)
    assert len(x) // vad.frame_samples > 600
    assert np.max(np.abs(vad.probabilities(x) - ort_probabilities(ort_session, x, vad.sample_rate))) <= TOLERANCE


def test_resampled_44k_speech_is_still_speech(silero_gguf, ort_session):
    """Audio at another rate goes through soxr; the model sees the same thing onnxruntime is given."""
    from cera_audio_vad.silero import SileroVad

    x16 = _speech(16000)
    x44 = resample(x16, 16000, 44100)
    back = resample(x44, 44100, 16000)
    vad = SileroVad.open(silero_gguf)
    ours = vad.probabilities(back)
    assert np.max(np.abs(ours - ort_probabilities(ort_session, back, 16000))) <= TOLERANCE
    # and resampling twice barely changes the decisions on this clip
    orig = vad.probabilities(x16)
    assert np.mean((ours > 0.5) == (orig > 0.5)) > 0.97
