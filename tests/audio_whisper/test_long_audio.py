"""Long recordings in `cera transcribe`: streamed in two passes in memory that does not grow
with their length, giving the features (and so the tokens) of reading them whole; silence
transcribed as nothing (the speech gate, as faster-whisper's ``vad_filter``); a header
claiming 1 Hz refused at once (it grew past 14 GB)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time

import numpy as np
import pytest
from whisper_helpers import DATA, clip

soundfile = pytest.importorskip("soundfile")

from cera_audio_whisper import mel  # noqa: E402
from cera_audio_whisper.features import StreamedFeatures  # noqa: E402
from cera_audio_whisper.recording import open_recording  # noqa: E402


def cera(*args, timeout=900):
    env = {k: v for k, v in os.environ.items() if k != "CERA_PLUGINS"}
    # the peak is VmHWM, this process image's own: ru_maxrss keeps, across exec, the peak of the
    # pytest worker that forked it (gigabytes once it has held models)
    code = ("import re, runpy, sys; sys.argv = ['cera'] + sys.argv[1:]\n"
            "try:\n    runpy.run_module('cera_cli.main', run_name='__main__')\n"
            "finally:\n    hwm = re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1)\n"
            "    sys.stderr.write(f'\\nPEAK_RSS_KB {hwm}\\n')")  # fmt: skip
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=timeout)  # fmt: skip


def peak_mb(proc) -> float:
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("PEAK_RSS_KB")][-1]
    return int(line.split()[1]) / 1024


def blocks_of(x: np.ndarray, n: int = 21_333):
    return lambda: (x[i : i + n] for i in range(0, len(x), n))


@pytest.mark.parametrize("seconds", [61.37, 95.0])
def test_streamed_features_equal_the_whole_recording(seconds):
    rng = np.random.default_rng(1)
    n = int(seconds * mel.SAMPLE_RATE)
    t = np.arange(n) / mel.SAMPLE_RATE
    x = (0.3 * np.sin(2 * np.pi * 440 * t) * (t % 7 < 3) + 0.01 * rng.standard_normal(n)).astype(np.float32)
    filters = mel.mel_filterbank(80)
    whole = mel.log_mel(x, filters)
    streamed = StreamedFeatures(blocks_of(x), filters)
    assert streamed.n_frames == whole.shape[-1] and streamed.n_samples == n
    for start, length in [(0, 3000), (2900, 3000), (3000, 3000), (4711, 1234), (whole.shape[-1] - 2000, 3000)]:
        want = mel.window(whole, start, length)
        assert np.array_equal(streamed.window(start, length), want), (start, length)


def test_a_long_recording_gives_the_tokens_of_reading_it_whole(tmp_path, tiny_q8):
    """Speech, 25 s of silence, speech (two windows): streamed (a low threshold) and whole,
    the same segments."""
    from cera_audio_whisper.transcribe import TranscribeOptions, Transcription

    fox, numbers = clip("fox"), clip("numbers")
    x = np.concatenate([fox, np.zeros(25 * 16000, np.float32), numbers])
    path = tmp_path / "long.flac"
    soundfile.write(str(path), x, 16000, subtype="PCM_16")
    whole = open_recording(path, tiny_q8.mel_filters, gate=False)
    streamed = open_recording(path, tiny_q8.mel_filters, gate=False, stream_min=16000)
    assert isinstance(streamed.features, StreamedFeatures) and whole.samples is not None
    opts = TranscribeOptions(language="en", beam_size=1)
    a = [(s.start, s.end, s.tokens) for s in Transcription(tiny_q8, whole.features, opts)]
    b = [(s.start, s.end, s.tokens) for s in Transcription(tiny_q8, streamed.features, opts)]
    assert a == b and len(a) >= 2


def test_the_gate_skips_windows_without_speech_and_keeps_the_rest(tmp_path, tiny_q8):
    from cera_audio_whisper.transcribe import TranscribeOptions, Transcription

    x = np.concatenate([np.zeros(65 * 16000, np.float32), clip("fox")])
    path = tmp_path / "late.flac"
    soundfile.write(str(path), x, 16000, subtype="PCM_16")
    rec = open_recording(path, tiny_q8.mel_filters, gate=True)
    assert rec.gate(0, 60 * 16000) is False and rec.gate(64 * 16000, len(x))
    opts = TranscribeOptions(language="en", beam_size=1)
    gated = list(Transcription(tiny_q8, rec.features, opts, speech=rec.gate))
    assert gated and all(s.start >= 60 for s in gated) and "fox" in " ".join(s.text for s in gated).lower()


def _silence(path, seconds: int):
    with soundfile.SoundFile(str(path), "w", 16000, 1, subtype="PCM_16", format="FLAC") as f:
        block = np.zeros(16000 * 60, np.int16)
        for _ in range(seconds // 60):
            f.write(block)


def test_streamed_silence_is_transcribed_as_nothing(tmp_path, tiny_q8):
    """Silence streamed (a low threshold) through the speech gate: no window is decoded."""
    from cera_audio_whisper.transcribe import TranscribeOptions, Transcription

    path = tmp_path / "silence.flac"
    _silence(path, 120)
    rec = open_recording(path, tiny_q8.mel_filters, gate=True, stream_min=16000)
    assert isinstance(rec.features, StreamedFeatures) and rec.gate.spans == []
    t = Transcription(tiny_q8, rec.features, TranscribeOptions(language="en", beam_size=1), speech=rec.gate)
    assert list(t) == []


@pytest.mark.slow
def test_silence_is_transcribed_as_nothing_in_bounded_memory(tmp_path):
    """12 minutes of silence (past the streaming threshold) through the command: no segments."""
    path = tmp_path / "silence.flac"
    _silence(path, 12 * 60)
    proc = cera("transcribe", "--audio", path, "--json", "--beam", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["segments"] == [] and doc["duration"] == pytest.approx(720, abs=0.01)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_an_hour_of_silence_in_bounded_memory(tmp_path):
    """It cost 3.3 GB and gave "You" every 30 s."""
    path = tmp_path / "hour.flac"
    _silence(path, 3600)
    proc = cera("transcribe", "--audio", path, "--json", "--beam", "1", timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["segments"] == []
    assert peak_mb(proc) < 900, peak_mb(proc)


@pytest.mark.slow
def test_silence_that_faster_whisper_hears_as_you_is_nothing(reference):
    """faster-whisper's base model, beam 5, on the 4 s silence clip: " You" (its reference);
    with the speech gate, `cera transcribe` gives nothing; without it, what faster-whisper gives."""
    fw = reference["models"]["faster-whisper-base"]["beam5"]["silence"]["segments"]
    assert [s["text"] for s in fw] == [" You"]
    gated = json.loads(cera("transcribe", "--audio", DATA / "silence.flac", "-m", "base", "--type", "f32", "--json").stdout)
    assert gated["segments"] == []
    ungated = json.loads(cera("transcribe", "--audio", DATA / "silence.flac", "-m", "base", "--type", "f32", "--json",
                              "--no-vad-gate").stdout)  # fmt: skip
    assert [s["text"] for s in ungated["segments"]] == [" You"]


def test_transcribe_refuses_a_1_hz_header_at_once(tmp_path):
    path = tmp_path / "one-hz.wav"
    soundfile.write(str(path), np.zeros(16000, np.int16), 16000, subtype="PCM_16")
    data = bytearray(path.read_bytes())
    struct.pack_into("<II", data, 24, 1, 2)
    path.write_bytes(bytes(data))
    t0 = time.monotonic()
    proc = cera("transcribe", "--audio", path, timeout=120)
    assert proc.returncode != 0 and "sample rate of 1 Hz" in proc.stderr and "Traceback" not in proc.stderr
    assert time.monotonic() - t0 < 60 and peak_mb(proc) < 1500
