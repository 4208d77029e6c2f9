"""Audio in bounded blocks (`cera vad` on an hour of 48 kHz stereo once peaked at
3.8 GB). A file is read, checked, downmixed and resampled a block at a time, and `cera vad`
detects speech block by block: its memory does not grow with the recording's length. The
blocks give exactly the samples of reading the file whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

soundfile = pytest.importorskip("soundfile", reason="soundfile is not installed (pip install cera-audio-io)")
soxr = pytest.importorskip("soxr", reason="soxr is not installed (pip install cera-audio-io)")

from cera.audio import downmix
from cera_audio_io import open_audio, read_audio  # noqa: E402
from cera.errors import AudioError  # noqa: E402


def write_noise(path, seconds: float, rate: int = 48000, channels: int = 2, seed: int = 0):
    rng = np.random.default_rng(seed)
    data = (rng.standard_normal((int(seconds * rate), channels)) * 0.05).astype(np.float32)
    soundfile.write(str(path), data, rate, subtype="PCM_16")
    return path


def test_blocks_give_the_samples_of_the_whole_file(tmp_path):
    path = write_noise(tmp_path / "a.wav", 7.3)
    data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    want = soxr.resample(downmix(data), rate, 16000, quality="HQ").astype(np.float32)
    got = read_audio(path, 16000).samples
    assert np.array_equal(got, want)
    with open_audio(path, 16000) as stream:
        blocks = list(stream)
        assert stream.info.source_channels == 2 and stream.info.source_rate == 48000
    assert len(blocks) > 1 and np.array_equal(np.concatenate(blocks), want)


def test_a_non_finite_sample_is_named_in_a_later_block(tmp_path):
    rate = 16000
    data = np.zeros((200_000, 1), np.float32)
    data[150_001, 0] = np.nan
    path = tmp_path / "nan.wav"
    soundfile.write(str(path), data, rate, subtype="FLOAT")
    with pytest.raises(AudioError, match=r"sample 150001 \(9\.375 s\) of channel 0 is NaN"):
        read_audio(path)


def test_a_fifo_is_not_read(tmp_path):
    fifo = tmp_path / "audio.wav"
    os.mkfifo(fifo)
    with pytest.raises(AudioError, match="not a regular file"):
        read_audio(fifo)


# VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child would report the
# peak of the test process that started it.
PEAK = textwrap.dedent(
    """
    import sys
    from cera_cli.main import main
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
    hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print("PEAK_KB", hwm.split()[1], file=sys.stderr)
    """
)


def vad_peak_mb(silero_gguf, audio) -> tuple[float, dict]:
    env = {k: v for k, v in os.environ.items() if k != "CERA_PLUGINS"}
    proc = subprocess.run(
        [sys.executable, "-c", PEAK, "vad", "--model", str(silero_gguf), "--audio", str(audio), "--json"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    kb = int(proc.stderr.split("PEAK_KB")[-1].split()[0])
    return kb / 1024, json.loads(proc.stdout)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="measures peak memory through /proc (Linux)")
def test_cera_vad_memory_does_not_grow_with_the_recording(silero_gguf, tmp_path):
    short = write_noise(tmp_path / "short.wav", 20)
    long = write_noise(tmp_path / "long.wav", 240, seed=1)
    short_mb, short_doc = vad_peak_mb(silero_gguf, short)
    long_mb, long_doc = vad_peak_mb(silero_gguf, long)
    assert long_doc["duration"] == pytest.approx(240, abs=0.01) and long_doc["source_channels"] == 2
    # Read whole, the 240 s file alone is 88 MB as float32 stereo, and the old path held
    # several copies; in blocks, only the per-frame probabilities grow (a few hundred kB).
    assert long_mb - short_mb < 20, f"peak {short_mb:.0f} MiB for 20 s, {long_mb:.0f} MiB for 240 s"
