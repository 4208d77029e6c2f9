"""Audio files with generated headers: WAV files whose sample rate, channel count, sample
width, format tag and chunk sizes say anything, cut anywhere, with their bytes flipped.
`cera_audio_io.open_audio` and `read_audio` (at 16 kHz, as Whisper and Silero read them) end in
samples or an `AudioError`, in time and memory bounded by the file's real size: what comes
out is never more than a 16 kHz recording of what the file holds could be."""

from __future__ import annotations

import struct
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hostile import INTERESTING_INTS, long, quick
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("soundfile")
pytest.importorskip("soxr")

from cera_audio_io import read_audio  # noqa: E402
from cera_audio_io.files import MIN_SAMPLE_RATE  # noqa: E402
from cera.errors import AudioError  # noqa: E402

u32 = st.sampled_from([v for v in INTERESTING_INTS if 0 <= v < 2**32] + [8000, 16000, 44100, 48000, 96000]) | st.integers(0, 2**32 - 1)
u16 = st.sampled_from([0, 1, 2, 3, 8, 16, 24, 32, 64, 255, 1024, 65535]) | st.integers(0, 2**16 - 1)

headers = st.fixed_dictionaries({
    "format": st.sampled_from([1, 3, 6, 7, 0xFFFE, 0, 2, 17, 85]),
    "channels": u16, "rate": u32, "byte_rate": st.none() | u32, "align": st.none() | u16, "bits": u16,
    "data_size": st.none() | u32, "riff_size": st.none() | u32,
    "n_bytes": st.sampled_from([0, 1, 2, 3, 100, 3200, 32000]),
    "cut": st.none() | st.integers(0, 40_000),
    "flips": st.lists(st.tuples(st.integers(0, 40_000), st.integers(1, 255)), max_size=3),
})  # fmt: skip


def wav(h: dict) -> bytes:
    ch, bits = h["channels"], h["bits"]
    align = h["align"] if h["align"] is not None else (ch * bits // 8) & 0xFFFF
    byte_rate = h["byte_rate"] if h["byte_rate"] is not None else (h["rate"] * align) & 0xFFFFFFFF
    body = np.random.default_rng(h["n_bytes"]).integers(0, 256, h["n_bytes"], dtype=np.uint8).tobytes()
    data_size = h["data_size"] if h["data_size"] is not None else len(body)
    fmt = struct.pack("<HHIIHH", h["format"], ch, h["rate"], byte_rate, align, bits)
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", data_size) + body
    riff = h["riff_size"] if h["riff_size"] is not None else 4 + len(chunks)
    out = bytearray(b"RIFF" + struct.pack("<I", riff) + b"WAVE" + chunks)
    for at, x in h["flips"]:
        if out:
            out[at % len(out)] ^= x
    if h["cut"] is not None:
        del out[h["cut"] % (len(out) + 1) :]
    return bytes(out)


def check(h: dict) -> None:
    with tempfile.TemporaryDirectory(prefix="cera-fuzz-audio-") as d:
        path = Path(d) / "case.wav"
        data = wav(h)
        path.write_bytes(data)
        t0 = time.monotonic()
        try:
            clip = read_audio(path, 16000)
        except AudioError:
            return
        # what comes out is bounded by the file's bytes: at least one byte per sample per
        # channel, at the lowest accepted rate, resampled to 16 kHz
        most = len(data) * 16000 / MIN_SAMPLE_RATE + 16000
        assert len(clip.samples) <= most, (len(clip.samples), len(data))
        assert clip.samples.dtype == np.float32 and np.isfinite(clip.samples).all()
        assert time.monotonic() - t0 < 10


@quick(examples=60)
@given(h=headers)
def test_generated_audio_headers(h):
    check(h)


@pytest.mark.slow
@long(examples=5000)
@given(h=headers)
def test_generated_audio_headers_long(h):
    check(h)
