"""Speech synthesized with espeak-ng for the audio test data scripts: one utterance as
float32 mono PCM at a given rate, and its trim to where it is audible."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf


def synthesize(text: str, voice: str, pitch: int, speed: int, rate: int = 16000) -> np.ndarray:
    """`text` spoken by espeak-ng's `voice` at `pitch` (0-99) and `speed` (words per minute)."""
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "out.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-p", str(pitch), "-s", str(speed), "-w", str(wav), text], check=True)
        x, sr = sf.read(str(wav), dtype="float32")
    if sr != rate:
        import soxr

        x = soxr.resample(x, sr, rate).astype(np.float32)
    return x


def trim(x: np.ndarray, floor_dbfs: float = -50.0) -> np.ndarray:
    """`x` without its leading and trailing samples below `floor_dbfs` (all of it if none is above)."""
    loud = np.nonzero(np.abs(x) > 10 ** (floor_dbfs / 20))[0]
    return x[loud[0] : loud[-1] + 1] if len(loud) else x
