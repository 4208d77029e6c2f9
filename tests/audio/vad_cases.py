"""Cases for comparing speech segmentation with the silero-vad package (standard library only).

Used by data/make_reference.py (which runs silero-vad in its own venv and stores the
answers) and by the tests (which replay the stored answers, and ask silero-vad live when it
is importable). Probabilities are multiples of 1/10000 so that both sides see the same
doubles; sequences are runs of speech-like, silence-like and in-between values, so that
thresholds, silences of every length and over-long speech all occur.
"""

from __future__ import annotations

import hashlib
import math
import random

# Parameter sets for the spoken clips (keys as in silero-vad's get_speech_timestamps).
CLIP_PARAMS = [
    {},
    {"threshold": 0.3, "min_silence_duration_ms": 300, "speech_pad_ms": 100},
    {"threshold": 0.7, "neg_threshold": 0.6, "min_speech_duration_ms": 500, "speech_pad_ms": 0},
    {"max_speech_duration_s": 1.5, "min_silence_duration_ms": 50},
    {"max_speech_duration_s": 1.0, "use_max_poss_sil_at_max_speech": False, "min_silence_duration_ms": 400},
    {"max_speech_duration_s": 2.0, "min_silence_at_max_speech": 200, "speech_pad_ms": 60},
    {"min_speech_duration_ms": 0, "min_silence_duration_ms": 0, "speech_pad_ms": 250},
]


def random_case(rng: random.Random) -> dict:
    """One case: sample rate, per-frame probabilities (as ints /10000), audio length, parameters."""
    sample_rate = rng.choice([16000, 8000])
    frame = 512 if sample_rate == 16000 else 256
    n = rng.randint(0, 400)
    q = []
    while len(q) < n:
        kind = rng.random()
        run = rng.choice([1, 1, 2, 3, 5, 8, 13, 30, 60])
        if kind < 0.4:
            lo, hi = 5000, 10000  # speech-like
        elif kind < 0.8:
            lo, hi = 0, 3500  # silence-like
        else:
            lo, hi = 3000, 6000  # around the thresholds
        q.extend(rng.randint(lo, hi) for _ in range(run))
    q = q[:n]
    length = 0 if n == 0 else (n - 1) * frame + rng.randint(1, frame)
    params: dict = {}
    if rng.random() < 0.5:
        params["threshold"] = rng.choice([0.3, 0.45, 0.5, 0.6, 0.8])
    if rng.random() < 0.3:
        params["neg_threshold"] = rng.choice([0.05, 0.2, 0.35, 0.5])
    if rng.random() < 0.5:
        params["min_speech_duration_ms"] = rng.choice([0, 50, 100, 250, 600])
    if rng.random() < 0.5:
        params["min_silence_duration_ms"] = rng.choice([0, 30, 64, 100, 300, 700])
    if rng.random() < 0.5:
        params["speech_pad_ms"] = rng.choice([0, 10, 30, 48, 100, 400])
    if rng.random() < 0.5:
        params["max_speech_duration_s"] = rng.choice([0.5, 1, 1.7, 3])
    if rng.random() < 0.3:
        params["min_silence_at_max_speech"] = rng.choice([0, 50, 98, 300])
    if rng.random() < 0.3:
        params["use_max_poss_sil_at_max_speech"] = False
    return {"sample_rate": sample_rate, "q": q, "length": length, "params": params}


def q_digest(q: list[int]) -> str:
    """A short fingerprint of a probability sequence, to check that regenerating it gave the same."""
    return hashlib.sha256(",".join(map(str, q)).encode()).hexdigest()[:16]


def random_cases(seed: int, count: int) -> list[dict]:
    rng = random.Random(seed)
    return [random_case(rng) for _ in range(count)]


def cera_params(params: dict):
    """The same parameters as cera.audio.SegmentParams."""
    from cera.audio import SegmentParams

    return SegmentParams(
        threshold=params.get("threshold", 0.5),
        neg_threshold=params.get("neg_threshold"),
        min_speech_duration_ms=params.get("min_speech_duration_ms", 250),
        min_silence_duration_ms=params.get("min_silence_duration_ms", 100),
        speech_pad_ms=params.get("speech_pad_ms", 30),
        max_speech_duration_s=params.get("max_speech_duration_s", math.inf),
        min_silence_at_max_speech_ms=params.get("min_silence_at_max_speech", 98),
        use_max_possible_silence_at_max_speech=params.get("use_max_poss_sil_at_max_speech", True),
    )


def silero_segments(probs, sample_rate: int, length: int, params: dict) -> list[list[int]]:
    """silero-vad's own get_speech_timestamps on a scripted model that returns ``probs``."""
    import torch
    from silero_vad import get_speech_timestamps

    class Scripted:
        def __init__(self):
            self.i = 0

        def reset_states(self):
            self.i = 0

        def __call__(self, chunk, sr):
            p = probs[self.i]
            self.i += 1
            return torch.tensor([[p]], dtype=torch.float64)

    audio = torch.zeros(length)
    out = get_speech_timestamps(audio, Scripted(), sampling_rate=sample_rate, **params)
    return [[int(s["start"]), int(s["end"])] for s in out]
