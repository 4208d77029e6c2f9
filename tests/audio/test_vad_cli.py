"""`cera vad` and `cera vad-convert`, run as the installed command line runs them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).resolve().parent / "data"  # the folder tests/audio/conftest.py names too


def cera(*args, env=None, check=True):
    run_env = dict(os.environ)
    run_env.pop("CERA_PLUGINS", None)
    run_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "cera_cli.main", *map(str, args)], capture_output=True, text=True, env=run_env
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"cera {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def _silero_seconds(clip_reference, name, run=0):
    entry = clip_reference["clips"][name]
    sr = entry["sample_rate"]
    return [(a / sr, b / sr) for a, b in entry["runs"][run]["segments"]]


def test_text_output_is_silero_segments(silero_gguf, clip_reference):
    out = cera("vad", "--model", silero_gguf, "--audio", DATA / "speech_16k.flac").stdout
    lines = [tuple(map(float, line.split("\t"))) for line in out.strip().splitlines()]
    want = _silero_seconds(clip_reference, "speech_16k.flac")
    assert len(lines) == len(want) == 4
    np.testing.assert_allclose(lines, want, atol=0.0005 + 1e-9)  # printed with 3 decimals


def test_json_output_with_parameters(silero_gguf, clip_reference):
    entry = clip_reference["clips"]["speech_8k.flac"]
    run = entry["runs"][1]
    assert run["params"] == {"threshold": 0.3, "min_silence_duration_ms": 300, "speech_pad_ms": 100}
    proc = cera(
        "vad", "--model", silero_gguf, "--audio", DATA / "speech_8k.flac", "--json",
        "--threshold", "0.3", "--min-silence-ms", "300", "--speech-pad-ms", "100",
    )
    doc = json.loads(proc.stdout)
    assert doc["sample_rate"] == 8000 == doc["source_sample_rate"]  # auto: the file's own rate
    assert [[s["start_sample"], s["end_sample"]] for s in doc["segments"]] == run["segments"]
    assert doc["params"]["neg_threshold"] == pytest.approx(0.15)


def test_rate_choice_and_resampling(silero_gguf, clip_reference):
    doc = json.loads(cera("vad", "--model", silero_gguf, "--audio", DATA / "speech_8k.flac", "--json", "--rate", "16000").stdout)
    assert (doc["sample_rate"], doc["source_sample_rate"], doc["frame_samples"]) == (16000, 8000, 512)
    # The 16 kHz network on upsampled 8 kHz audio: not the same decisions as on the 16 kHz
    # recording, but the same speech, within a frame or so at the edges.
    got = [(s["start"], s["end"]) for s in doc["segments"]]
    want = _silero_seconds(clip_reference, "speech_16k.flac")
    assert abs(got[0][0] - want[0][0]) < 0.05 and abs(got[-1][1] - want[-1][1]) < 0.05
    covered = sum(max(0.0, min(b, d) - max(a, c)) for a, b in got for c, d in want)
    assert covered > 0.9 * sum(d - c for c, d in want)
    proc = cera("vad", "--model", silero_gguf, "--audio", DATA / "speech_8k.flac", "--rate", "16000", "--no-resample", check=False)
    assert proc.returncode == 1
    assert "8000 Hz, but 16000 Hz is needed and resampling is turned off" in proc.stderr


def test_frames_option(silero_gguf, clip_reference):
    doc = json.loads(cera("vad", "--model", silero_gguf, "--audio", DATA / "speech_16k.flac", "--json", "--frames").stdout)
    ref = clip_reference["clips"]["speech_16k.flac"]["probs"]
    assert len(doc["frames"]) == len(ref)
    assert np.max(np.abs(np.array(doc["frames"]) - ref)) < 1e-4


def test_bad_inputs_give_one_line_errors(silero_gguf, silero_onnx_path, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello\n" * 100)
    cases = [
        (["--model", silero_gguf, "--audio", text], "not an audio file that libsndfile can read"),
        (["--model", silero_gguf, "--audio", tmp_path / "none.wav"], "no such file"),
        (["--model", silero_onnx_path, "--audio", DATA / "speech_16k.flac"], "an ONNX file; cera runs Silero VAD from GGUF"),
        (["--model", DATA / "speech_16k.flac", "--audio", DATA / "speech_16k.flac"], "invalid GGUF file"),
        (["--model", silero_gguf, "--audio", DATA / "speech_16k.flac", "--threshold", "2"], "threshold must be a probability"),
    ]
    for args, message in cases:
        proc = cera("vad", *args, check=False)
        assert proc.returncode == 1, args
        assert message in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr


def test_default_model_on_a_fresh_cache(tmp_path, silero_onnx_path, clip_reference):
    """No --model: the default is converted on first use into the cache, then reused."""
    # A fresh cache that already holds the verified silero-vad package download (so the test
    # needs no network); the conversion itself happens here.
    bundle = tmp_path / "bundles" / "silero-vad"
    shutil.copytree(silero_onnx_path.parent, bundle, copy_function=shutil.copy2)
    env = {"CERA_CACHE_DIR": str(tmp_path)}
    first = cera("vad", "--audio", DATA / "speech_16k.flac", env=env)
    assert "converting silero-vad" in first.stderr
    assert (tmp_path / "converted" / "silero-vad-6.2.3.gguf").exists()
    second = cera("vad", "--audio", DATA / "speech_16k.flac", env=env)
    assert "converting" not in second.stderr
    assert first.stdout == second.stdout
    lines = [tuple(map(float, line.split("\t"))) for line in first.stdout.strip().splitlines()]
    np.testing.assert_allclose(lines, _silero_seconds(clip_reference, "speech_16k.flac"), atol=0.0005 + 1e-9)


def test_vad_convert_command(tmp_path, silero_onnx_path, silero_gguf):
    out = tmp_path / "mine.gguf"
    proc = cera("vad-convert", out, "--onnx", silero_onnx_path)
    assert proc.stdout.strip() == str(out)
    assert out.read_bytes() == silero_gguf.read_bytes()  # the conversion is deterministic


def test_help_lists_vad():
    out = cera("--help").stdout
    assert "vad " in out and "vad-convert" in out
