"""`cera listen --audio -`: raw PCM and WAV streams on standard input give the samples
soundfile reads from the same bytes; WAV streams of another format are refused by name."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from pipeline_cases import CLIP

from cera.errors import AudioError
from cera_audio_listen.stdin import stdin_blocks


class Trickle(io.RawIOBase):
    """A pipe that hands out at most ``n`` bytes a read, as a slow writer would."""

    def __init__(self, data: bytes, n: int = 7):
        self.data, self.n = data, n

    def readable(self):
        return True

    def read(self, size=-1):
        out, self.data = self.data[: min(size, self.n)], self.data[min(size, self.n) :]
        return out


def wav_bytes(x, sr=16000, subtype="PCM_16", channels=1):
    import soundfile

    b = io.BytesIO()
    soundfile.write(b, np.repeat(x[:, None], channels, 1) if channels > 1 else x, sr, format="WAV", subtype=subtype)
    return b.getvalue()


@pytest.fixture(scope="module")
def clip_int16():
    import soundfile

    return soundfile.read(str(CLIP), dtype="int16")[0]


@pytest.mark.parametrize("trickle", [False, True])
def test_raw_and_wav_streams_give_the_files_samples(clip_int16, trickle):
    import soundfile

    x = clip_int16[:40000]
    want = soundfile.read(io.BytesIO(wav_bytes(x)), dtype="float32")[0]
    for data in (x.astype("<i2").tobytes(), wav_bytes(x)):
        stream = Trickle(data) if trickle else io.BytesIO(data)
        got = np.concatenate(list(stdin_blocks(stream)))
        assert got.dtype == np.float32 and np.array_equal(got, want)


def test_a_pipe_wav_header_with_an_unknown_size_is_read_to_the_end(clip_int16):
    x = clip_int16[:1000]
    data = bytearray(wav_bytes(x))
    at = data.index(b"data") + 4
    data[at : at + 4] = (0xFFFFFFFF).to_bytes(4, "little")  # what sox and arecord write to a pipe
    data[4:8] = (0xFFFFFFFF).to_bytes(4, "little")
    got = np.concatenate(list(stdin_blocks(io.BytesIO(bytes(data)))))
    assert np.array_equal(got, x / np.float32(32768))


@pytest.mark.parametrize(("make", "match"), [
    (lambda x: wav_bytes(x, sr=44100), r"1 channel\(s\) at 44100 Hz"),
    (lambda x: wav_bytes(x, channels=2), r"2 channel\(s\) at 16000 Hz"),
    (lambda x: wav_bytes(x.astype(np.float32) / 32768, subtype="FLOAT"), "format tag 3, 32-bit"),
    (lambda x: wav_bytes(x)[:30], "ended inside its"),
    (lambda x: b"fLaC" + bytes(100), "holds a fLaC stream"),
])  # fmt: skip
def test_other_streams_are_refused_by_name(clip_int16, make, match):
    with pytest.raises(AudioError, match=match):
        list(stdin_blocks(io.BytesIO(make(clip_int16[:1000]))))


@pytest.mark.slow
def test_cli_wav_on_stdin_gives_the_files_events(clip_int16):
    from test_listen import cera

    want = [json.loads(x) for x in cera("listen", "--audio", CLIP, "--json", "-t", 2).stdout.decode().splitlines()]
    got = [json.loads(x) for x in cera("listen", "--audio", "-", "--json", "-t", 2,
                                       input=wav_bytes(clip_int16)).stdout.decode().splitlines()]  # fmt: skip
    key = lambda e: (e["event"], e.get("time", e.get("start")))  # noqa: E731
    assert sorted(got, key=key) == sorted(want, key=key)
    bad = cera("listen", "--audio", "-", input=wav_bytes(clip_int16[:16000], sr=44100), check=False)
    assert bad.returncode == 1 and "44100 Hz" in bad.stderr.decode() and "Traceback" not in bad.stderr.decode()
