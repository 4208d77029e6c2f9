"""Detections: each model's wake word in espeak-ng speech where pymicro-wakeword detects
it, none where it does not; the sliding window, threshold and refractory rules; streaming
in chunks of any size; VAD gating and gain control."""

from __future__ import annotations

import numpy as np
import pytest
from kws_cases import MODELS, read_clip

from cera.errors import AudioError
from cera_audio_kws.detector import HotwordDetector
from cera_audio_kws.gated import GainControl, HotwordIterator

LABELS = {"okay_nabu": "Okay Nabu", "hey_jarvis": "Hey Jarvis", "hey_mycroft": "Hey Mycroft", "alexa": "Alexa"}


@pytest.fixture(scope="module")
def detectors(model_gguf):
    return {m: HotwordDetector.open(model_gguf[m]) for m in MODELS}


@pytest.mark.parametrize("model", MODELS)
def test_detects_where_pymicro_wakeword_does(model, detectors, reference):
    doc, _ = reference
    det = detectors[model]
    for clip, entry in doc["clips"].items():
        found = det.detect(read_clip(clip))
        want = entry["models"][model]["detected"]
        assert bool(found) == want, f"{model} on {clip}: cera {found}, pymicro-wakeword {want}"
        if found:
            assert len(found) == 1 and found[0].wake_word == LABELS[model]
            assert found[0].probability > det.threshold
            # stored pymicro-wakeword maximum sliding mean: the detection's mean is at most that
            assert found[0].probability <= entry["models"][model]["max_mean"] + 1e-6


def test_every_wake_word_is_detected_somewhere(reference):
    doc, _ = reference
    for model in MODELS:
        assert any(e["models"][model]["detected"] for e in doc["clips"].values()), model
        assert not any(e["models"][model]["detected"] for n, e in doc["clips"].items() if n.startswith("negative"))


def test_sliding_mean_matches_stored_network_outputs(detectors, reference):
    """The detector's trace: per-step probabilities = the stored reference outputs / 256,
    sliding means of the last 5, detection when the mean first exceeds the threshold."""
    doc, arrays = reference
    det = detectors["okay_nabu"]
    clip = "okay_nabu_en-us_160"
    trace = []
    det.reset()
    found = det.push(read_clip(clip), trace)
    want = arrays[f"{clip}/okay_nabu"].astype(np.float64) / 256
    np.testing.assert_array_equal([s.probability for s in trace], want)
    means = np.convolve(want, np.ones(5) / 5, mode="valid")
    first = int(np.argmax(means > det.threshold)) + 4
    assert found[0].time == pytest.approx(trace[first].time)
    assert found[0].probability == pytest.approx(means[first - 4])
    assert trace[first].time == pytest.approx(((3 * first + 2) * 160 + 480) / 16000)


@pytest.mark.parametrize("chunk", [1, 160, 333, 4096])
def test_chunk_size_does_not_matter(chunk, detectors):
    det = detectors["alexa"]
    pcm = read_clip("alexa_en-gb-x-rp_160")
    det.reset()
    found = [d for i in range(0, len(pcm), chunk) for d in det.push(pcm[i : i + chunk])]
    assert found == det.detect(pcm)


def test_float_and_int16_input_agree(detectors):
    det = detectors["hey_mycroft"]
    pcm = read_clip("hey_mycroft_en_160")
    assert det.detect(pcm.astype(np.float32) / 32768) == det.detect(pcm)


def test_threshold_and_refractory(model_gguf):
    pcm = read_clip("okay_nabu_en-us_160")
    twice = np.concatenate([pcm, pcm])
    det = HotwordDetector.open(model_gguf["okay_nabu"])
    assert len(det.detect(twice)) == 2
    strict = HotwordDetector.open(model_gguf["okay_nabu"], threshold=0.999)
    assert strict.detect(twice) == []
    long_refractory = HotwordDetector.open(model_gguf["okay_nabu"], refractory_s=100)
    assert len(long_refractory.detect(twice)) == 1
    with pytest.raises(AudioError, match="threshold"):
        HotwordDetector.open(model_gguf["okay_nabu"], threshold=1.5)


def test_bad_pcm_is_refused(detectors):
    det = detectors["okay_nabu"]
    with pytest.raises(AudioError, match="NaN"):
        det.push(np.array([0.0, np.nan], np.float32))
    with pytest.raises(AudioError, match="int32"):
        det.push(np.zeros(10, np.int32))


# -- VAD gate -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vad(silero_gguf):
    from cera.audio import load_vad

    return load_vad(silero_gguf)


def _with_silence(pcm: np.ndarray, seconds: float) -> np.ndarray:
    gap = np.zeros(int(seconds * 16000), np.int16)
    return np.concatenate([gap, pcm, gap, pcm, gap]).astype(np.float32) / 32768


def test_gate_skips_silence_and_keeps_every_probability_it_computes(model_gguf, vad):
    pcm = _with_silence(read_clip("okay_nabu_en-us_160"), 4.0)
    plain = HotwordDetector.open(model_gguf["okay_nabu"])
    ungated = []
    want = plain.push(pcm, ungated)
    det = HotwordDetector.open(model_gguf["okay_nabu"])
    it = HotwordIterator(det, vad=vad, agc=False)
    gated = []
    got = it.push(pcm, gated) + it.flush(gated)
    assert got == want and len(got) == 2
    assert det.steps_skipped > 0.5 * len(ungated)  # most of the 12 s of silence
    by_time = {round(s.time, 4): s.probability for s in ungated}
    assert len(gated) == det.steps_run
    for s in gated:  # the replay makes every step that runs exact
        assert s.probability == by_time[round(s.time, 4)]


def test_gate_stays_closed_on_noise_without_speech(model_gguf, vad):
    rs = np.random.RandomState(0)
    noise = (rs.normal(0, 0.01, 5 * 16000)).astype(np.float32)
    det = HotwordDetector.open(model_gguf["hey_jarvis"])
    it = HotwordIterator(det, vad=vad, agc=False)
    assert it.push(noise) == []
    assert det.steps_run < 0.2 * (det.steps_run + det.steps_skipped)


def test_other_sample_rates_are_resampled_and_not_gated(model_gguf):
    import soxr

    pcm = read_clip("alexa_en-gb-x-rp_160").astype(np.float32) / 32768
    x48 = soxr.resample(pcm, 16000, 48000).astype(np.float32)
    det = HotwordDetector.open(model_gguf["alexa"])
    it = HotwordIterator(det, vad=None, agc=False, sample_rate=48000)
    assert it.vad is None
    found = it.push(x48) + it.flush()
    assert [d.wake_word for d in found] == ["Alexa"]


# -- gain control ---------------------------------------------------------------------


def test_gain_brings_soft_speech_up_and_leaves_silence_alone():
    agc = GainControl()
    rs = np.random.RandomState(1)
    floor = rs.normal(0, 1e-4, 512).astype(np.float32)
    out = agc.apply(floor.copy(), is_speech=False)
    np.testing.assert_array_equal(out, floor)  # not speech: gain 1
    speech = (0.02 * np.sin(np.arange(512) / 5)).astype(np.float32)
    for _ in range(5):
        out = agc.apply(speech.copy(), is_speech=True)
    assert agc.gain == pytest.approx(0.5 / 0.02, rel=1e-3)  # toward the 0.5 reference peak
    assert np.max(np.abs(out)) == pytest.approx(0.5, rel=1e-2)


def test_gain_is_capped_at_30x_and_by_the_noise_floor():
    agc = GainControl()
    tiny = (0.001 * np.sin(np.arange(512) / 5)).astype(np.float32)
    for _ in range(5):
        agc.apply(tiny.copy(), is_speech=True)
    assert agc.gain == pytest.approx(30.0)
    noisy = GainControl()
    hiss = np.full(512, 0.005, np.float32)  # a noise floor of RMS 0.005
    noisy.apply(hiss.copy(), is_speech=False)
    for _ in range(5):
        noisy.apply((0.02 * np.sin(np.arange(512) / 5)).astype(np.float32), is_speech=True)
    assert noisy.gain == pytest.approx(0.01 / 0.005, rel=1e-3)  # the floor stays under 0.01 RMS


def test_loud_speech_is_not_attenuated():
    agc = GainControl()
    loud = (0.9 * np.sin(np.arange(512) / 5)).astype(np.float32)
    out = agc.apply(loud.copy(), is_speech=True)
    np.testing.assert_array_equal(out, loud)


def test_gain_lets_soft_speech_be_detected(model_gguf, vad):
    # 58 dB down, over a faint noise floor: too soft for the front end alone
    rs = np.random.RandomState(0)
    soft = read_clip("okay_nabu_en-us_160").astype(np.float32) / 32768 / 800
    soft += rs.normal(0, 2e-5, len(soft)).astype(np.float32)
    plain = HotwordDetector.open(model_gguf["okay_nabu"])
    assert plain.detect(soft) == []
    det = HotwordDetector.open(model_gguf["okay_nabu"])
    it = HotwordIterator(det, vad=vad, agc=True)
    found = it.push(soft) + it.flush()
    assert [d.wake_word for d in found] == ["Okay Nabu"]
