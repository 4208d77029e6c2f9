"""Make the synthesized conversations the diarizer tests and benchmark use.

Each conversation is turns of 2 or 3 espeak-ng voices (different voice variants and
pitches) with pauses between them, written as 16 kHz mono FLAC beside an RTTM of the
exact turn boundaries (the first and last non-silent sample of each turn's synthesized
audio, found at -50 dBFS). Run from anywhere (needs espeak-ng and soundfile):

    python tests/audio_diarizer/data/make_conversations.py [OUTPUT_DIR] [--long]

``--long`` writes longer conversations for benchmarks/bench_diarize.py instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "audio"))
import espeak_speech  # noqa: E402
from espeak_speech import trim  # noqa: E402

RATE = 16000
VOICES = {
    "A": ("en-us+m3", 45),  # (espeak-ng voice+variant, pitch 0-99)
    "B": ("en+f3", 70),
    "C": ("en-gb-x-rp+m7", 25),
}
SENTENCES = [
    "Did you get the report I sent over this morning?",
    "Yes, I read it on the train. The numbers look better than last quarter.",
    "They do, but the shipping costs are still far too high.",
    "We could move the warehouse closer to the port next spring.",
    "That would take a year at least, and the budget is already set.",
    "Then let us talk to the carriers again before the end of the month.",
    "I can call them tomorrow after the team meeting.",
    "Good. Send me a short summary when you are done.",
    "Should we invite the finance people to that call as well?",
    "Only if they have time. Their week is full of audits.",
    "Fine, I will keep it small and write up the minutes myself.",
    "Thanks. And please remind me about the travel plans on Friday.",
]
# (name, speakers in turn order, seed)
SHORT = [
    ("two_voices", "ABABAB", 1),
    ("three_voices", "ABCACB", 2),
    ("two_voices_long_turns", "AABBA", 3),
]
LONG = [
    ("bench_two_voices", "ABABABABABAB", 11),
    ("bench_three_voices", "ABCBACABCACB", 12),
]


def synthesize(text: str, voice: str, pitch: int, speed: int = 165) -> np.ndarray:
    return espeak_speech.synthesize(text, voice, pitch, speed, RATE)


def make(name: str, order: str, seed: int, out: Path) -> None:
    rng = np.random.default_rng(seed)
    pieces, lines, at = [np.zeros(int(0.5 * RATE), np.float32)], [], 0.5
    for n, spk in enumerate(order):
        voice, pitch = VOICES[spk]
        text = SENTENCES[(seed * 5 + n) % len(SENTENCES)]
        speech = trim(synthesize(text, voice, pitch, speed=int(rng.integers(150, 180))))
        speech *= 10 ** (rng.uniform(-4, 0) / 20) * 0.5 / max(1e-6, float(np.abs(speech).max()))
        pieces.append(speech)
        lines.append(f"SPEAKER {name} 1 {at:.3f} {len(speech) / RATE:.3f} <NA> <NA> {spk} <NA> <NA>")
        at += len(speech) / RATE
        gap = float(rng.uniform(0.5, 0.9))
        pieces.append(np.zeros(int(round(gap * RATE)), np.float32))
        at = sum(len(p) for p in pieces) / RATE
    audio = np.concatenate(pieces)
    audio += rng.normal(0, 10 ** (-60 / 20), len(audio)).astype(np.float32)  # a faint noise floor
    sf.write(str(out / f"{name}.flac"), audio, RATE, subtype="PCM_16")
    (out / f"{name}.rttm").write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> None:
    long = "--long" in argv
    args = [a for a in argv if a != "--long"]
    out = Path(args[0]) if args else Path(__file__).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    for name, order, seed in LONG if long else SHORT:
        make(name, order, seed, out)
        print(out / f"{name}.flac")


if __name__ == "__main__":
    main(sys.argv[1:])
