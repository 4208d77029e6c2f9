"""What the keyword-spotting tests share: the stored clips and the model names."""

from __future__ import annotations

from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"
MODELS = ("okay_nabu", "hey_jarvis", "hey_mycroft", "alexa")


def read_clip(name: str) -> np.ndarray:
    import soundfile as sf

    x, sr = sf.read(DATA / f"{name}.flac", dtype="int16")
    assert sr == 16000
    return x
