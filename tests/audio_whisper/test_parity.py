"""cera's Whisper against faster-whisper on the same weights (float32 compute on both sides).

The reference (data/reference.json) is faster-whisper 1.2.1's output on the committed
espeak-ng clips, made by data/make_reference.py; where faster-whisper is installed a slow
test also runs it live. Greedy decoding must give the same tokens, segment times and
scores; beam search (whose candidate handling differs in detail between CTranslate2 and
Whisper's reference decoder, which cera follows) must come within a stated edit distance.
"""

from __future__ import annotations

import importlib.util

import pytest
from cera_audio_whisper.transcribe import TranscribeOptions, Transcription
from whisper_helpers import clip, edit_distance, words

FAST_CLIPS = ["fox", "numbers", "silence"]
SLOW_CLIPS = ["question", "slow", "long"]


def transcribe(model, name, **options):
    return list(Transcription(model, clip(name), TranscribeOptions(language="en", **options)))


def check_same(segs, ref_segs):
    assert [list(s.tokens) for s in segs] == [r["tokens"] for r in ref_segs]
    for s, r in zip(segs, ref_segs, strict=True):
        assert s.text == r["text"]
        assert s.start == pytest.approx(r["start"], abs=1e-9) and s.end == pytest.approx(r["end"], abs=1e-9)
        # float32 on both sides, summed in other orders: scores agree to a few 1e-4
        assert s.avg_logprob == pytest.approx(r["avg_logprob"], abs=2e-3)
        assert s.no_speech_prob == pytest.approx(r["no_speech_prob"], abs=2e-3)
        assert s.temperature == r["temperature"]


@pytest.mark.parametrize("name", FAST_CLIPS)
def test_greedy_tokens_equal_faster_whisper_tiny(tiny_f32, reference, name):
    ref = reference["models"]["faster-whisper-tiny.en"]["greedy"][name]["segments"]
    check_same(transcribe(tiny_f32, name, beam_size=1), ref)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW_CLIPS)
def test_greedy_tokens_equal_faster_whisper_tiny_slow(tiny_f32, reference, name):
    ref = reference["models"]["faster-whisper-tiny.en"]["greedy"][name]["segments"]
    check_same(transcribe(tiny_f32, name, beam_size=1), ref)


def test_long_clip_has_two_windows(reference):
    # the 41 s clip needs a second window, which starts at a timestamp of the first
    ref = reference["models"]["faster-whisper-tiny.en"]["greedy"]["long"]["segments"]
    assert clip("long").shape[0] > 30 * 16000 and len({s["avg_logprob"] for s in ref}) == 2


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fox", "numbers", "question", "slow", "long", "silence"])
def test_greedy_tokens_equal_faster_whisper_base(base_f32, reference, name):
    ref = reference["models"]["faster-whisper-base"]["greedy"][name]["segments"]
    check_same(transcribe(base_f32, name, beam_size=1), ref)


# Beam search: at most this many word edits per reference word over a clip's transcript.
BEAM_WER = 0.15


@pytest.mark.parametrize("name", ["fox", "numbers"])
def test_beam5_close_to_faster_whisper_tiny(tiny_f32, reference, name):
    ref = reference["models"]["faster-whisper-tiny.en"]["beam5"][name]["segments"]
    got = words("".join(s.text for s in transcribe(tiny_f32, name, beam_size=5)))
    want = words("".join(r["text"] for r in ref))
    assert edit_distance(got, want) <= BEAM_WER * len(want), (got, want)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["question", "slow", "long", "silence"])
def test_beam5_close_to_faster_whisper_slow(tiny_f32, base_f32, reference, name):
    for model, key in ((tiny_f32, "faster-whisper-tiny.en"), (base_f32, "faster-whisper-base")):
        ref = reference["models"][key]["beam5"][name]["segments"]
        got = words("".join(s.text for s in transcribe(model, name, beam_size=5)))
        want = words("".join(r["text"] for r in ref))
        assert edit_distance(got, want) <= max(1, BEAM_WER * len(want)), (key, got, want)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["german", "french", "spanish", "fox"])
def test_language_detection_base(base_f32, reference, name):
    from cera_audio_whisper import mel
    from cera_audio_whisper.transcribe import detect_language

    ref = reference["models"]["faster-whisper-base"]["language"][name]
    state = base_f32.new_state(1)
    lang, prob, probs = detect_language(base_f32, state, mel.log_mel(clip(name), base_f32.mel_filters))
    assert lang == ref["language"]
    assert [p[0] for p in probs[:2]] == [p[0] for p in ref["top5"][:2]]


def test_q8_0_transcript_close_to_float(tiny_q8, reference):
    # 8-bit weights and activations change the logits a little: the words stay (WER <= 15%)
    ref = reference["models"]["faster-whisper-tiny.en"]["greedy"]["numbers"]["segments"]
    got = words("".join(s.text for s in transcribe(tiny_q8, "numbers", beam_size=1)))
    want = words("".join(r["text"] for r in ref))
    assert edit_distance(got, want) <= 0.15 * len(want), (got, want)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("faster_whisper") is None, reason="faster-whisper is not installed (pip install faster-whisper)")
def test_greedy_equal_live_faster_whisper(tiny_f32):
    from faster_whisper import WhisperModel

    from cera.sources import bundles

    fw = WhisperModel(str(bundles.fetch("faster-whisper-tiny.en", quiet=True)), device="cpu", compute_type="float32", cpu_threads=2)
    for name in ("question", "slow"):
        theirs, _ = fw.transcribe(clip(name), beam_size=1, language="en")
        assert [s.tokens for s in transcribe(tiny_f32, name, beam_size=1)] == [tuple(s.tokens) for s in theirs]


def test_initial_prompt_tokens_equal_faster_whisper(tiny_f32, reference):
    ref = reference["models"]["faster-whisper-tiny.en"]["initial_prompt"]["segments"]
    segs = transcribe(tiny_f32, "fox", beam_size=1, initial_prompt="The quick brown fox jumps over the lazy dog.")
    check_same(segs, ref)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["german", "spanish"])
def test_detected_language_and_translation_equal_faster_whisper_base(base_f32, reference, name):
    entry = reference["models"]["faster-whisper-base"]
    tr = Transcription(base_f32, clip(name), TranscribeOptions(language=None, beam_size=1))
    assert tr.language == entry["auto"][name]["language"]
    check_same(list(tr), entry["auto"][name]["segments"])
    tr = Transcription(base_f32, clip(name), TranscribeOptions(language=None, beam_size=1, task="translate"))
    check_same(list(tr), entry["translate"][name]["segments"])


def test_temperature_fallback_and_sampling(tiny_q8, reference):
    x = clip("fox")
    want = words("".join(r["text"] for r in reference["models"]["faster-whisper-tiny.en"]["greedy"]["fox"]["segments"]))
    # a log-probability threshold no decode can meet: every temperature is tried, the best
    # decode (by average log-probability) is kept and reported with the last temperature
    opts = TranscribeOptions(language="en", beam_size=1, best_of=2, temperatures=(0.0, 0.5, 1.0), log_prob_threshold=0.0,
                             no_speech_threshold=None, seed=1)  # fmt: skip
    segs = list(Transcription(tiny_q8, x, opts))
    assert segs and all(s.temperature == 1.0 for s in segs)
    # sampled at a low temperature, the words stay close to the greedy ones
    segs = list(Transcription(tiny_q8, x, TranscribeOptions(language="en", beam_size=1, temperatures=(0.2,), seed=3)))
    assert all(s.temperature == 0.2 for s in segs)
    assert edit_distance(words("".join(s.text for s in segs)), want) <= 0.4 * len(want)
