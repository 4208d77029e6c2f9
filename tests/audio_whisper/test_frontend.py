"""The log-mel front end against faster-whisper's numpy one (stored: data/mel_fox.npy; live
where faster-whisper is installed) and against Whisper's definition."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from cera_audio_whisper import mel
from whisper_helpers import DATA, clip

# Same window, FFT and filterbank: the features agree to float32 rounding (measured: 0).
TOLERANCE = 1e-5


def test_log_mel_matches_stored_faster_whisper_features():
    want = np.load(DATA / "mel_fox.npy")
    got = mel.log_mel(clip("fox"), mel.mel_filterbank(80))
    assert got.shape == want.shape == (80, len(clip("fox")) // 160 + 1)
    assert np.abs(got - want).max() <= TOLERANCE


@pytest.mark.skipif(importlib.util.find_spec("faster_whisper") is None, reason="faster-whisper is not installed")
@pytest.mark.parametrize("n_mels", [80, 128])
def test_log_mel_matches_live_faster_whisper(n_mels):
    from faster_whisper.feature_extractor import FeatureExtractor

    rng = np.random.default_rng(0)
    audio = (rng.standard_normal(16000 * 3) * 0.1).astype(np.float32)
    fe = FeatureExtractor(feature_size=n_mels)
    assert np.abs(mel.mel_filterbank(n_mels) - fe.mel_filters).max() <= 1e-7
    assert np.abs(mel.log_mel(audio, mel.mel_filterbank(n_mels)) - fe(audio)).max() <= TOLERANCE


def test_filterbank_is_slaney_triangles():
    fb = mel.mel_filterbank(80)
    assert fb.shape == (80, 201) and (fb >= 0).all()
    # each triangle has unit area in Hz (Slaney normalisation): sampled at 40 Hz bins the
    # areas come out within 10% of 1
    areas = fb.sum(axis=1) * (16000 / 400)
    assert np.allclose(areas, 1.0, atol=0.1)
    # 1 kHz is where the scale turns logarithmic: 15 mels
    assert mel.hz_to_mel(1000.0) == pytest.approx(15.0)
    assert mel.hz_to_mel(8000.0) == pytest.approx(45.245640471924965)


def test_hann_window_is_periodic():
    w = mel.hann(400)
    assert w[0] == 0 and w[200] == pytest.approx(1.0) and w[100] == pytest.approx(w[300])
    assert np.allclose(w, np.hanning(401)[:-1], atol=1e-7)


def test_clamp_and_window_padding():
    silence = np.zeros(16000, np.float32)
    f = mel.log_mel(silence, mel.mel_filterbank(80))
    assert np.allclose(f, (-10 + 4) / 4)  # log10 clamped at 1e-10
    loud = clip("fox")
    f = mel.log_mel(loud, mel.mel_filterbank(80))
    assert f.max() - f.min() <= 2.0 + 1e-6  # nothing below the maximum minus 8 (scaled by 1/4)
    w = mel.window(f, 100, 300)
    assert w.shape == (3000, 80) and np.array_equal(w[:300], f[:, 100:400].T) and not w[300:].any()
