"""Where the diarizer tests' stored data lies, and its conversations."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
CONVERSATIONS = ("two_voices", "three_voices", "two_voices_long_turns")
