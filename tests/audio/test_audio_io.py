"""Audio file input: decoding, downmixing, resampling, and a clear error for each bad file."""

from __future__ import annotations

import numpy as np
import pytest

from cera.audio import as_pcm, downmix
from cera_audio_io import read_audio
from cera.errors import AudioError

sf = pytest.importorskip("soundfile", reason="soundfile is not installed (pip install cera-audio-io)")


def _write(path, data, rate, subtype=None):
    sf.write(str(path), data, rate, subtype=subtype)
    return path


def test_int16_wav_is_scaled_to_float(tmp_path):
    pcm = np.array([0, 16384, -32768, 32767, -1, 1], dtype=np.int16)
    path = _write(tmp_path / "a.wav", pcm, 16000)
    clip = read_audio(path, 16000)
    assert clip.samples.dtype == np.float32
    np.testing.assert_array_equal(clip.samples, pcm.astype(np.float32) / 32768)
    assert (clip.sample_rate, clip.source_rate, clip.source_channels, clip.resampled) == (16000, 16000, 1, False)


def test_stereo_is_averaged(tmp_path):
    rng = np.random.default_rng(0)
    stereo = rng.uniform(-0.5, 0.5, size=(1000, 2)).astype(np.float32)
    path = _write(tmp_path / "s.wav", stereo, 16000, subtype="FLOAT")
    clip = read_audio(path, 16000)
    np.testing.assert_allclose(clip.samples, (stereo[:, 0].astype(np.float64) + stereo[:, 1]) / 2, atol=1e-7)
    assert clip.source_channels == 2
    # a signal in one channel only comes out at half amplitude (no pan law)
    one_sided = np.stack([stereo[:, 0], np.zeros(1000, np.float32)], axis=1)
    np.testing.assert_allclose(downmix(one_sided), stereo[:, 0] / 2, atol=1e-7)


def test_resampling_keeps_a_tone(tmp_path):
    """44.1 kHz stereo 440 Hz sine -> 16 kHz mono: still a 440 Hz sine of the same amplitude."""
    t = np.arange(44100 * 2) / 44100
    tone = 0.5 * np.sin(2 * np.pi * 440 * t)
    path = _write(tmp_path / "t.flac", np.stack([tone, tone], axis=1), 44100, subtype="PCM_24")
    clip = read_audio(path, [16000, 8000])
    assert (clip.sample_rate, clip.source_rate, clip.resampled) == (16000, 44100, True)
    assert abs(len(clip.samples) - 32000) <= 1
    t16 = np.arange(len(clip.samples)) / 16000
    want = 0.5 * np.sin(2 * np.pi * 440 * t16)
    middle = slice(1000, -1000)  # away from the filter's edge effects
    assert np.max(np.abs(clip.samples[middle] - want[middle])) < 2e-3


def test_an_accepted_rate_is_kept(tmp_path):
    path = _write(tmp_path / "e.wav", np.zeros(800, np.int16), 8000)
    clip = read_audio(path, [16000, 8000])
    assert clip.sample_rate == 8000 and not clip.resampled
    assert read_audio(path).sample_rate == 8000  # None: the file's own rate


def test_missing_file(tmp_path):
    with pytest.raises(AudioError, match="no such file"):
        read_audio(tmp_path / "nope.wav", 16000)


def test_directory(tmp_path):
    with pytest.raises(AudioError, match="is a directory"):
        read_audio(tmp_path, 16000)


def test_not_audio(tmp_path):
    path = tmp_path / "notes.wav"
    path.write_text("this is text, not a RIFF file\n" * 20)
    with pytest.raises(AudioError, match=r"notes\.wav: not an audio file that libsndfile can read"):
        read_audio(path, 16000)


def test_truncated_wav_header(tmp_path):
    path = _write(tmp_path / "t.wav", np.zeros(1000, np.int16), 16000)
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(AudioError, match="not an audio file"):
        read_audio(path, 16000)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.wav"
    path.write_bytes(b"")
    with pytest.raises(AudioError, match=r"empty\.wav: is empty \(0 bytes\)"):
        read_audio(path, 16000)


def test_wav_with_no_samples(tmp_path):
    path = _write(tmp_path / "zero.wav", np.zeros(0, np.int16), 16000)
    with pytest.raises(AudioError, match="holds no samples"):
        read_audio(path, 16000)


def test_one_sample(tmp_path):
    path = _write(tmp_path / "one.wav", np.array([100], np.int16), 16000)
    with pytest.raises(AudioError, match="single sample"):
        read_audio(path, 16000)


@pytest.mark.parametrize("bad,word", [(np.nan, "NaN"), (np.inf, "infinite"), (-np.inf, "infinite")])
def test_non_finite_samples(tmp_path, bad, word):
    data = np.zeros((2000, 2), np.float32)
    data[1234, 1] = bad
    path = _write(tmp_path / "f.wav", data, 16000, subtype="FLOAT")
    with pytest.raises(AudioError, match=rf"sample 1234 \(0\.077 s\) of channel 1 is {word}"):
        read_audio(path, 16000)


def test_resampling_forbidden(tmp_path):
    path = _write(tmp_path / "cd.wav", np.zeros(4410, np.int16), 44100)
    with pytest.raises(AudioError, match=r"44100 Hz, but one of 16000, 8000 Hz is needed and resampling is turned off"):
        read_audio(path, [16000, 8000], resample_ok=False)
    # allowed when the rate already fits
    path8 = _write(tmp_path / "ok.wav", np.zeros(800, np.int16), 8000)
    assert read_audio(path8, [16000, 8000], resample_ok=False).sample_rate == 8000


def test_as_pcm_checks_arrays():
    assert as_pcm([0.0, 0.5]).dtype == np.float32
    assert as_pcm(np.zeros((1, 5))).shape == (5,)
    with pytest.raises(AudioError, match="int16 samples"):
        as_pcm(np.zeros(4, np.int16))
    with pytest.raises(AudioError, match=r"shape \(10, 2\)"):
        as_pcm(np.zeros((10, 2), np.float32))
    with pytest.raises(AudioError, match=r"sample 1003 \(0\.063 s\) is NaN"):
        as_pcm(np.array([0.0, np.nan]), offset=1002, sample_rate=16000)
    with pytest.raises(AudioError, match="float PCM"):
        as_pcm(np.array(["a", "b"]))
