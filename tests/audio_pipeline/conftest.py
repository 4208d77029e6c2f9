"""Fixtures of the pipeline tests on real components: the synthesized wake-word clip
(data/make_clips.py) with its known pieces, and pipelines built as ``cera listen`` builds
them (microWakeWord okay-nabu, Silero VAD, Whisper tiny.en, the GE2E diarizer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"
CLIP = DATA / "wake_commands.flac"


@pytest.fixture(scope="session")
def clip():
    """(16 kHz PCM, the pieces: speaker, role, text, start, end)."""
    from cera_audio_io import read_audio

    return read_audio(CLIP, 16000).samples, json.loads((DATA / "wake_commands.json").read_text())["pieces"]


def listen(pipeline, samples, chunk=4000):
    events = []
    for at in range(0, len(samples), chunk):
        events += pipeline.push(samples[at : at + chunk])
    return events + pipeline.flush()
