"""Make the clip the pipeline tests listen to: commands after a wake word, between speech
that must not be transcribed, by two espeak-ng voices.

Each piece is synthesized alone, trimmed at -50 dBFS and placed with silence between
pieces; ``wake_commands.json`` records every piece's text, voice, role (``before``,
``wake``, ``command``, ``after``) and exact start and end. 16 kHz mono FLAC. Run from
anywhere (needs espeak-ng and soundfile):

    python tests/audio_pipeline/data/make_clips.py
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

HERE = Path(__file__).resolve().parent
RATE = 16000
VOICES = {"A": ("en-us", 50), "B": ("en+f3", 70)}  # espeak-ng voice, pitch
# (speaker, role, text, silence after it in seconds)
SCRIPT = [
    ("A", "before", "The meeting moved to Thursday afternoon.", 1.2),
    ("A", "wake", "okay nabu", 0.5),
    ("A", "command", "Turn on the kitchen lights.", 1.5),
    ("A", "after", "And the dog needs a walk after lunch.", 1.2),
    ("B", "wake", "okay nabu", 0.5),
    ("B", "command", "What time is it in London?", 1.0),
]


def synthesize(text: str, voice: str, pitch: int, speed: int = 160) -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "out.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-p", str(pitch), "-s", str(speed), "-w", str(wav), text], check=True)
        x, sr = sf.read(str(wav), dtype="float32")
    if sr != RATE:
        import soxr

        x = soxr.resample(x, sr, RATE).astype(np.float32)
    return x


def trim(x: np.ndarray, floor_dbfs: float = -50.0) -> np.ndarray:
    loud = np.nonzero(np.abs(x) > 10 ** (floor_dbfs / 20))[0]
    return x[loud[0] : loud[-1] + 1] if len(loud) else x


def main() -> None:
    pieces, doc, at = [np.zeros(int(0.5 * RATE), np.float32)], [], int(0.5 * RATE)
    for speaker, role, text, gap in SCRIPT:
        voice, pitch = VOICES[speaker]
        speech = trim(synthesize(text, voice, pitch))
        speech *= 0.5 / max(1e-6, float(np.abs(speech).max()))
        doc.append({"speaker": speaker, "role": role, "text": text, "voice": voice,
                    "start": round(at / RATE, 4), "end": round((at + len(speech)) / RATE, 4)})  # fmt: skip
        pieces += [speech, np.zeros(int(round(gap * RATE)), np.float32)]
        at += len(speech) + int(round(gap * RATE))
    audio = np.concatenate(pieces)
    audio += np.random.default_rng(0).normal(0, 10 ** (-60 / 20), len(audio)).astype(np.float32)
    sf.write(str(HERE / "wake_commands.flac"), audio, RATE, subtype="PCM_16")
    (HERE / "wake_commands.json").write_text(json.dumps({"sample_rate": RATE, "pieces": doc}, indent=1) + "\n")
    print(HERE / "wake_commands.flac", f"{len(audio) / RATE:.2f} s")


if __name__ == "__main__":
    main()
