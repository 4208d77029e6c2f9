"""Fixtures of the pipeline tests on real components: the synthesized wake-word clip
(data/make_clips.py) with its known pieces, and pipelines built as ``cera listen`` builds
them (microWakeWord okay-nabu, Silero VAD, Whisper tiny.en, the GE2E diarizer)."""

from __future__ import annotations

import json
import pytest
from pipeline_cases import CLIP, DATA


@pytest.fixture(scope="session")
def clip():
    """(16 kHz PCM, the pieces: speaker, role, text, start, end)."""
    from cera_audio_io import read_audio

    return read_audio(CLIP, 16000).samples, json.loads((DATA / "wake_commands.json").read_text())["pieces"]

