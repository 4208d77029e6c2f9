"""Fixtures of the diarizer tests: resemblyzer's GE2E encoder (the resemblyzer-ge2e bundle,
converted to GGUF once and cached), the synthesized conversations of data/ with their
RTTMs, and resemblyzer's stored outputs on them (data/make_reference.py)."""

from __future__ import annotations

import numpy as np
import pytest
from diar_cases import CONVERSATIONS, DATA


@pytest.fixture(scope="session")
def encoder_gguf():
    from cera_audio_diarizer.default import default_model_path

    return default_model_path(quiet=True)


@pytest.fixture(scope="session")
def encoder(encoder_gguf):
    from cera_audio_diarizer.encoder import SpeakerEncoder

    enc = SpeakerEncoder(encoder_gguf, threads=2)
    yield enc
    enc.close()


@pytest.fixture(scope="session")
def reference():
    with np.load(DATA / "reference.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="session")
def conversations():
    """name -> 16 kHz mono float32 PCM of the stored conversation."""
    from cera_audio_io import read_audio

    return {name: read_audio(DATA / f"{name}.flac", 16000).samples for name in CONVERSATIONS}
