"""Speech segments: cera.audio's rules against silero-vad's get_speech_timestamps.

The answers of silero-vad 6.2.3 are stored (data/make_reference.py): on 300 scripted
probability sequences that exercise every rule, and on the spoken clips for seven parameter
sets. Where silero-vad (and torch) are importable, more cases are checked live.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
from vad_cases import CLIP_PARAMS, cera_params, q_digest, random_cases, silero_segments

from cera.audio import SegmentParams, SpeechSegment, SpeechSegmenter, iter_speech_segments, speech_segments
from cera_audio_io import read_audio
from cera.errors import AudioError

DATA = Path(__file__).resolve().parent / "data"  # the folder tests/audio/conftest.py names too


def _frame(sr: int) -> int:
    return 512 if sr == 16000 else 256


def _as_pairs(segments):
    return [[s.start, s.end] for s in segments]


def test_scripted_cases_match_silero_vad(scripted_reference):
    stored = scripted_reference["cases"]
    cases = random_cases(scripted_reference["seed"], len(stored))
    assert len(stored) == 300
    for i, (case, ref) in enumerate(zip(cases, stored)):
        # The inputs are regenerated from the seed: check they are the ones silero-vad saw.
        assert q_digest(case["q"]) == ref["q_sha256"], f"case {i}: regenerated probabilities differ"
        assert (case["sample_rate"], case["length"], case["params"]) == (ref["sample_rate"], ref["length"], ref["params"])
        probs = [q / 10000 for q in case["q"]]
        got = speech_segments(
            probs,
            sample_rate=case["sample_rate"],
            frame_samples=_frame(case["sample_rate"]),
            params=cera_params(case["params"]),
            total_samples=case["length"],
        )
        assert _as_pairs(got) == ref["segments"], f"case {i}: params {case['params']}"


def test_scripted_cases_cover_the_rules(scripted_reference):
    """The stored cases are not trivial: many segments, splits at max speech, empty results."""
    stored = scripted_reference["cases"]
    n_segments = [len(c["segments"]) for c in stored]
    assert sum(n_segments) > 1000
    assert sum(1 for n in n_segments if n == 0) >= 10
    long_cut = sum(1 for c in stored if "max_speech_duration_s" in c["params"] and len(c["segments"]) > 3)
    assert long_cut >= 30
    # touching segments (a max-speech cut followed directly by more speech) occur
    touching = sum(
        1 for c in stored for a, b in zip(c["segments"], c["segments"][1:]) if a[1] == b[0]
    )
    assert touching >= 10


@pytest.mark.parametrize("name", ["speech_16k.flac", "speech_8k.flac"])
def test_clip_probabilities_give_silero_segments(clip_reference, name):
    """silero-vad's own probabilities of the spoken clips, through cera's rules, for every parameter set."""
    entry = clip_reference["clips"][name]
    sr = entry["sample_rate"]
    for run in entry["runs"]:
        got = speech_segments(
            entry["probs"],
            sample_rate=sr,
            frame_samples=_frame(sr),
            params=cera_params(run["params"]),
            total_samples=entry["samples"],
        )
        assert _as_pairs(got) == run["segments"], run["params"]


@pytest.mark.parametrize("name", ["speech_16k.flac", "speech_8k.flac"])
def test_clip_segments_end_to_end(silero_gguf, clip_reference, name):
    """cera's whole pipeline (file -> GGUF model -> segments) gives silero-vad's segments."""
    from cera.audio import load_vad

    entry = clip_reference["clips"][name]
    clip = read_audio(DATA / name, entry["sample_rate"], resample_ok=False)
    vad = load_vad(silero_gguf, sample_rate=entry["sample_rate"])
    assert len(entry["runs"]) == len(CLIP_PARAMS)
    for run in entry["runs"]:
        params = cera_params(run["params"])
        assert _as_pairs(vad.speech_segments(clip.samples, params)) == run["segments"], run["params"]
        chunks = np.array_split(clip.samples, 37)
        assert _as_pairs(vad.stream_segments(chunks, params)) == run["segments"], run["params"]


def test_streaming_hands_out_the_same_segments_early():
    """Pushing probabilities one at a time gives the offline list, most segments before the end."""
    early = total = 0
    for case in random_cases(11, 200):
        sr = case["sample_rate"]
        frame = _frame(sr)
        params = cera_params(case["params"])
        probs = [q / 10000 for q in case["q"]]
        offline = speech_segments(probs, sample_rate=sr, frame_samples=frame, params=params, total_samples=case["length"])
        seg = SpeechSegmenter(sample_rate=sr, frame_samples=frame, params=params)
        streamed = []
        for i, p in enumerate(probs):
            for s in seg.push(p):
                # causal: a segment handed out after frame i lies within the audio seen so far
                assert s.end <= frame * (i + 1)
                streamed.append(s)
        early += len(streamed)
        streamed += seg.finish(case["length"])
        total += len(streamed)
        assert streamed == offline
    assert total > 500 and early > 0.6 * total


def test_streaming_latency_by_hand():
    """A segment comes out at the frame that fixes its end: when the silence has lasted
    min_silence (100 ms = 1600 samples: 4 frames of 512 after the speech) and two pads fit."""
    seg = SpeechSegmenter(sample_rate=16000, frame_samples=512)
    probs = [0.9] * 20 + [0.0] * 100
    out = {i: seg.push(p) for i, p in enumerate(probs)}
    # speech ends at frame 20 (sample 10240); frame 24 is the first with 24*512 - 10240 >= 1600
    assert {i: v for i, v in out.items() if v} == {24: [SpeechSegment(0, 10240 + 480, 16000)]}
    assert seg.finish() == []
    # with a pad of 200 ms (3200 samples) the end (10240 + 3200) is fixed only once
    # 2 pads of audio (6400 samples) have passed: frames up to 10240 + 6400 = 16640 -> frame 32
    seg = SpeechSegmenter(sample_rate=16000, frame_samples=512, params=SegmentParams(speech_pad_ms=200))
    out = {i: seg.push(p) for i, p in enumerate(probs)}
    assert {i: v for i, v in out.items() if v} == {32: [SpeechSegment(0, 10240 + 3200, 16000)]}


def test_live_against_silero_vad():
    if importlib.util.find_spec("silero_vad") is None or importlib.util.find_spec("torch") is None:
        pytest.skip("silero-vad and torch are not installed here (see tests/audio/data/make_reference.py)")
    for case in random_cases(2024, 150):
        probs = [q / 10000 for q in case["q"]]
        sr = case["sample_rate"]
        want = silero_segments(probs, sr, case["length"], case["params"])
        got = speech_segments(
            probs, sample_rate=sr, frame_samples=_frame(sr), params=cera_params(case["params"]), total_samples=case["length"]
        )
        assert _as_pairs(got) == want, case["params"]


# -- rules on hand-made inputs (values derived by hand from the rules in the module doc) ----


def _segs(probs, **params):
    return _as_pairs(speech_segments(probs, sample_rate=16000, frame_samples=512, params=SegmentParams(**params)))


def test_hand_derived_segment():
    # frames 2..11 speech (10 frames = 5120 samples > 250 ms = 4000), then 4 frames of silence.
    probs = [0.0, 0.0] + [0.9] * 10 + [0.0] * 4
    # raw segment [1024, 6144): silence starts at frame 12; 100 ms = 1600 samples waits 4 frames
    # (12*512=6144 is temp_end; 15*512 - 6144 = 1536 < 1600, so the audio ends first and the
    # segment runs to the end: 16*512 = 8192) -> padded by 480 on the left, clamped at 8192.
    assert _segs(probs) == [[1024 - 480, 8192]]
    probs = [0.0, 0.0] + [0.9] * 10 + [0.0] * 8
    # now frame 16: 16*512 - 6144 = 2048 >= 1600 -> end 6144, padded to 6624
    assert _segs(probs) == [[544, 6624]]


def test_short_speech_dropped_and_close_segments_share_the_gap():
    probs = [0.9] * 5 + [0.0] * 10  # 2560 samples of speech: not > 4000
    assert _segs(probs) == []
    assert _segs(probs, min_speech_duration_ms=100) == [[0, 2560 + 480]]
    # two segments 1024 samples apart, pad 30 ms = 480: 1024 >= 960 -> each padded by 480
    probs = [0.9] * 10 + [0.0] * 4 + [0.9] * 10 + [0.0] * 10
    # first: temp_end 5120, cut at frame 14? no: silence lasts 2048 >= 1600 only at frame 14, but
    # speech returns at frame 14 -> one long segment, so raise min_silence below 2048 - 512
    assert _segs(probs, min_silence_duration_ms=90) == [[0, 5120 + 480], [7168 - 480, 12288 + 480]]
    # pad 50 ms = 800: 2048 < 1600 -> the gap is split in half (1024 each way)
    assert _segs(probs, min_silence_duration_ms=90, speech_pad_ms=100) == [[0, 6144], [6144, 12288 + 1600]]


def test_threshold_hysteresis():
    # 0.4 is below threshold 0.5 but above neg_threshold 0.35: it neither starts nor ends speech
    probs = [0.4] * 5 + [0.9] * 10 + [0.4] * 20 + [0.1] * 10
    assert _segs(probs, speech_pad_ms=0) == [[5 * 512, 35 * 512]]
    assert _segs(probs, speech_pad_ms=0, neg_threshold=0.45) == [[5 * 512, 15 * 512]]


def test_empty_and_all_speech():
    assert _segs([]) == []
    assert _segs([0.99] * 100) == [[0, 100 * 512]]
    got = speech_segments([0.99] * 100, sample_rate=16000, frame_samples=512, total_samples=99 * 512 + 3)
    assert _as_pairs(got) == [[0, 99 * 512 + 3]]


def test_segment_times():
    s = SpeechSegment(8000, 24000, 16000)
    assert (s.start_seconds, s.end_seconds, s.duration_seconds) == (0.5, 1.5, 1.0)
    assert s.to_json() == {"start": 0.5, "end": 1.5, "start_sample": 8000, "end_sample": 24000}


@pytest.mark.parametrize(
    "bad",
    [
        {"threshold": 1.5},
        {"threshold": -0.1},
        {"neg_threshold": 2},
        {"min_speech_duration_ms": -1},
        {"min_silence_duration_ms": math.nan},
        {"speech_pad_ms": -30},
        {"max_speech_duration_s": 0},
        {"threshold": "high"},
    ],
)
def test_bad_parameters_are_named(bad):
    name = next(iter(bad))
    with pytest.raises(AudioError, match=name):
        SegmentParams(**bad)


def test_bad_probabilities_and_lengths():
    seg = SpeechSegmenter(sample_rate=16000, frame_samples=512)
    with pytest.raises(AudioError, match="frame 0"):
        seg.push(float("nan"))
    with pytest.raises(AudioError, match="not between 0 and 1"):
        seg.push(1.5)
    seg = SpeechSegmenter(sample_rate=16000, frame_samples=512)
    seg.push_many([0.9] * 3)
    with pytest.raises(AudioError, match="does not fit 3 frames"):
        seg.finish(10_000)
    with pytest.raises(AudioError, match="sample_rate"):
        SpeechSegmenter(sample_rate=0, frame_samples=512)
    with pytest.raises(AudioError, match="frame_samples"):
        list(iter_speech_segments([0.5], sample_rate=16000, frame_samples=0))
