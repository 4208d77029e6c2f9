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
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "audio"))
import espeak_speech  # noqa: E402
from espeak_speech import trim  # noqa: E402

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
    return espeak_speech.synthesize(text, voice, pitch, speed, RATE)


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
