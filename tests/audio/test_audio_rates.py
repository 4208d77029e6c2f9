"""Audio headers that claim absurd sample rates (1 Hz: a 32 KB file "lasting" 16,000 s,
which resampling to 16 kHz turned into gigabytes) or channel counts: a clear `AudioError`
naming the rate, from the reader and from `cera vad`, before any sample is resampled."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

soundfile = pytest.importorskip("soundfile", reason="soundfile is not installed (pip install 'cera-core[audio]')")

from cera_audio_io import open_audio, read_audio  # noqa: E402
from cera_audio_io.files import MAX_SAMPLE_RATE, MIN_SAMPLE_RATE  # noqa: E402
from cera.errors import AudioError  # noqa: E402


def wav_with_rate(path, rate: int, n: int = 16000, channels: int = 1):
    """A 16-bit PCM WAV whose header claims ``rate`` (written at 16 kHz, then patched)."""
    rng = np.random.default_rng(0)
    soundfile.write(str(path), (rng.standard_normal((n, channels)) * 0.1).astype(np.float32), 16000, subtype="PCM_16")
    data = bytearray(path.read_bytes())
    assert data[:4] == b"RIFF" and data[12:16] == b"fmt "
    struct.pack_into("<II", data, 24, rate, rate * 2 * channels)  # sample rate, byte rate
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("rate", [1, 7, MIN_SAMPLE_RATE - 1, MAX_SAMPLE_RATE + 1, 2**31 - 1])
def test_an_absurd_sample_rate_is_refused(tmp_path, rate):
    path = wav_with_rate(tmp_path / "a.wav", rate)
    t0 = time.monotonic()
    with pytest.raises(AudioError, match=rf"sample rate of {rate} Hz; cera reads recordings made at"):
        read_audio(path, 16000)
    with pytest.raises(AudioError, match=rf"{rate} Hz"):
        open_audio(path, 16000)
    assert time.monotonic() - t0 < 2


@pytest.mark.parametrize("rate", [MIN_SAMPLE_RATE, 8000, 44100, MAX_SAMPLE_RATE])
def test_rates_at_the_bounds_are_read(tmp_path, rate):
    path = wav_with_rate(tmp_path / "a.wav", rate, n=4000)
    clip = read_audio(path)
    assert clip.source_rate == rate and len(clip.samples) == 4000


def test_cera_vad_refuses_a_1_hz_header_at_once(tmp_path):
    """It ran 107 s at 2.6 GB."""
    path = wav_with_rate(tmp_path / "a.wav", 1)
    env = {k: v for k, v in os.environ.items() if k != "CERA_PLUGINS"}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cera_cli.main", "vad", "--audio", str(path)], capture_output=True,
                          text=True, env=env, timeout=120)  # fmt: skip
    assert proc.returncode != 0 and "sample rate of 1 Hz" in proc.stderr and "Traceback" not in proc.stderr
    assert time.monotonic() - t0 < 60
