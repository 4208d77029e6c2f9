"""The pipeline tests' stored clip (data/make_clips.py) and `listen`, which streams audio through a pipeline."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
CLIP = DATA / "wake_commands.flac"


def listen(pipeline, samples, chunk=4000):
    events = []
    for at in range(0, len(samples), chunk):
        events += pipeline.push(samples[at : at + chunk])
    return events + pipeline.flush()
