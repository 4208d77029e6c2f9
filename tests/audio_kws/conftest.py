"""Fixtures for the keyword-spotting tests: the four microWakeWord models (bundles from the
pymicro-wakeword package, converted to GGUF by cera_audio_kws.convert), the stored clips
and the peers' stored outputs on them (data/make_reference.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from kws_cases import DATA, MODELS


@pytest.fixture(scope="session")
def model_files():
    """model stem -> (.tflite path, .json path) from the verified bundles."""
    from cera.sources import bundles

    out = {}
    for stem in MODELS:
        folder = bundles.fetch("microwakeword-" + stem.replace("_", "-"), quiet=True)
        out[stem] = (folder / f"{stem}.tflite", folder / f"{stem}.json")
    return out


@pytest.fixture(scope="session")
def model_gguf(model_files, tmp_path_factory):
    """model stem -> GGUF converted from its .tflite and .json."""
    from cera_audio_kws.convert import convert

    folder = tmp_path_factory.mktemp("kws")
    return {stem: convert(t, folder / f"{stem}.gguf", j) for stem, (t, j) in model_files.items()}


@pytest.fixture(scope="session")
def reference():
    """(clips' metadata and pymicro-wakeword's detections, stored arrays)."""
    doc = json.loads((DATA / "reference.json").read_text())
    with np.load(DATA / "reference.npz") as z:
        arrays = {k: z[k] for k in z.files}
    return doc, arrays



@pytest.fixture(scope="session")
def silero_gguf(silero_onnx_path, tmp_path_factory):
    """Silero VAD (the gate), converted by cera_audio_vad.convert."""
    from cera_audio_vad.convert import convert

    return convert(silero_onnx_path, tmp_path_factory.mktemp("vad") / "silero-vad.gguf")
