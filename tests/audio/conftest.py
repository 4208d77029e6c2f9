"""Fixtures for the audio tests: the Silero VAD GGUF (converted from the real ONNX file),
the onnxruntime peer on the same ONNX file, and the stored reference data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def silero_gguf(silero_onnx_path, tmp_path_factory):
    """silero_vad.onnx of silero-vad 6.2.3, converted to GGUF by cera_audio_vad.convert."""
    from cera_audio_vad.convert import convert

    return convert(silero_onnx_path, tmp_path_factory.mktemp("vad") / "silero-vad.gguf")


@pytest.fixture(scope="session")
def ort_session(silero_onnx_path):
    """onnxruntime on the same ONNX file, one thread: the peer for per-frame probabilities."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install onnxruntime)")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(silero_onnx_path), sess_options=opts, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="session")
def clip_reference():
    """silero-vad's probabilities and segments on the spoken clips (data/make_reference.py)."""
    return json.loads((DATA / "silero_clips.json").read_text())


@pytest.fixture(scope="session")
def scripted_reference():
    """silero-vad's segments on scripted probabilities (data/make_reference.py)."""
    return json.loads((DATA / "silero_segments.json").read_text())
