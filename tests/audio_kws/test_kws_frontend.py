"""The micro front end against pymicro-features (TFLite Micro's C front end): the same
integers, frame for frame, stored and (where pymicro-features is installed) live."""

from __future__ import annotations

import numpy as np
import pytest
from kws_cases import read_clip

from cera_audio_kws.frontend import MicroFrontend


def cera_features(pcm: np.ndarray, chunk: int | None = None) -> np.ndarray:
    fe = MicroFrontend()
    chunk = chunk or len(pcm)
    blocks = [b.copy() for i in range(0, len(pcm), chunk) for b in fe.process(pcm[i : i + chunk])]
    return np.concatenate(blocks) if blocks else np.zeros((0, 40), np.uint16)


def test_stored_features_identical(reference):
    doc, arrays = reference
    for name in doc["clips"]:
        got = cera_features(read_clip(name))
        want = arrays[f"{name}/features"]
        assert got.shape == want.shape, name
        np.testing.assert_array_equal(got, want, err_msg=name)


@pytest.mark.parametrize("chunk", [1, 97, 160, 1000])
def test_any_chunk_size_gives_the_same_frames(chunk):
    pcm = read_clip("okay_nabu_en-us_160")[:8000]
    np.testing.assert_array_equal(cera_features(pcm, chunk), cera_features(pcm))


def _signals():
    rs = np.random.RandomState(7)
    speech = read_clip("negative_weather")
    yield "speech", speech
    yield "white noise", rs.normal(0, 3000, 16000).astype(np.int16)
    yield "full-scale noise", rs.randint(-32768, 32768, 8000).astype(np.int16)
    yield "loud clipped speech", np.clip(speech.astype(np.int32) * 12, -32768, 32767).astype(np.int16)
    yield "very soft speech", (speech // 200).astype(np.int16)
    yield "silence", np.zeros(4800, np.int16)
    t = np.arange(16000) / 16000
    yield "tones", (8000 * np.sin(2 * np.pi * 440 * t) + 3000 * np.sin(2 * np.pi * 3100 * t)).astype(np.int16)


@pytest.mark.parametrize("name,pcm", list(_signals()), ids=[n for n, _ in _signals()])
def test_live_against_pymicro_features(name, pcm):
    pmf = pytest.importorskip("pymicro_features", reason="pymicro-features is not installed")
    ref = pmf.MicroFrontend()
    want = []
    for i in range(0, len(pcm) - 159, 160):
        r = ref.process_samples(pcm[i : i + 160].tobytes())
        if r.features:
            want.append(r.features)
    want = np.round(np.array(want) / 0.0390625).astype(np.uint16)
    got = cera_features(pcm[: len(pcm) // 160 * 160])
    np.testing.assert_array_equal(got, want)


def test_reset_starts_over():
    pcm = read_clip("alexa_en-gb-x-rp_160")
    fe = MicroFrontend()
    first = np.concatenate([b.copy() for b in fe.process(pcm)])
    fe.reset()
    again = np.concatenate([b.copy() for b in fe.process(pcm)])
    np.testing.assert_array_equal(first, again)


def test_bad_input_is_refused():
    from cera.errors import AudioError

    with pytest.raises(AudioError, match="int16"):
        list(MicroFrontend().process(np.zeros(10, np.float32)))
