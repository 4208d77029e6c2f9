"""`cera transcribe` and `cera convert whisper`, run as the installed command line runs them,
and the `cera.audio.Transcriber` interface."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from whisper_helpers import DATA, clip, edit_distance, words

from cera.errors import AudioError


def cera(*args, check=True):
    env = dict(os.environ)
    env.pop("CERA_PLUGINS", None)
    proc = subprocess.run([sys.executable, "-m", "cera_cli.main", *map(str, args)], capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"cera {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def test_transcribe_default_model_prints_the_transcript(reference):
    # no -m: tiny.en from PyPI, converted to Q8_0 once and cached
    out = cera("transcribe", "--audio", DATA / "fox.flac", "--beam", "1", "--timestamps").stdout
    want = words("".join(s["text"] for s in reference["models"]["faster-whisper-tiny.en"]["greedy"]["fox"]["segments"]))
    lines = out.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("[00:00.000 -> 00:03.000]")
    assert edit_distance(words(" ".join(line.split("] ", 1)[1] for line in lines)), want) <= 2


def test_transcribe_prints_plain_text_by_default(reference):
    """What a pipe wants: the words alone, no stamps (``--timestamps`` adds them)."""
    out = cera("transcribe", "--audio", DATA / "fox.flac", "--beam", "1").stdout
    want = words("".join(s["text"] for s in reference["models"]["faster-whisper-tiny.en"]["greedy"]["fox"]["segments"]))
    assert "[" not in out and "->" not in out, out
    assert edit_distance(words(out), want) <= 2


def test_transcribe_json(reference):
    doc = json.loads(cera("transcribe", "--audio", DATA / "numbers.flac", "--json", "--beam", "1").stdout)
    assert doc["language"] == "en" and doc["duration"] == pytest.approx(8.4165, abs=1e-3)
    seg = doc["segments"][0]
    assert seg["start"] == 0.0 and seg["end"] == 8.0 and "oranges" in seg["text"] and seg["tokens"][0] == 50363


def test_resampled_stereo_file(tmp_path, reference):
    import soundfile as sf
    import soxr

    # 44.1 kHz stereo of the same speech: downmixed, resampled with soxr, same words
    x = soxr.resample(clip("numbers"), 16000, 44100)
    sf.write(tmp_path / "stereo.wav", np.stack([x, x], axis=1), 44100)
    out = cera("transcribe", "--audio", tmp_path / "stereo.wav", "--beam", "1", "--no-timestamps").stdout
    want = words(reference["models"]["faster-whisper-tiny.en"]["greedy"]["numbers"]["segments"][0]["text"])
    assert edit_distance(words(out), want) <= 2, out


def test_bad_input_is_a_clear_error(tmp_path):
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    proc = cera("transcribe", "--audio", empty, check=False)
    assert proc.returncode != 0 and "empty" in proc.stderr and "Traceback" not in proc.stderr
    text = tmp_path / "notes.wav"
    text.write_text("this is not audio\n" * 20)
    proc = cera("transcribe", "--audio", text, check=False)
    assert proc.returncode != 0 and "not an audio file" in proc.stderr and "Traceback" not in proc.stderr
    proc = cera("transcribe", "--audio", DATA / "fox.flac", "--language", "de", check=False)
    assert proc.returncode != 0 and "English-only" in proc.stderr
    proc = cera("transcribe", "--audio", DATA / "fox.flac", "-m", tmp_path / "missing.gguf", check=False)
    assert proc.returncode != 0 and "no such file" in proc.stderr
    proc = cera("convert", "whisper", tmp_path, tmp_path / "o.gguf", check=False)
    assert proc.returncode != 0 and "no model.bin" in proc.stderr and "Traceback" not in proc.stderr


def test_transcriber_interface_streams_and_cancels(tiny_q8, reference):
    from cera_audio_whisper.transcribe import TranscriptionCancelled
    from cera_audio_whisper.transcriber import WhisperTranscriber

    from cera.audio import Transcriber

    tr = WhisperTranscriber(tiny_q8)
    assert isinstance(tr, Transcriber) and tr.sample_rate == 16000
    whole = list(tr.transcribe(clip("numbers"), beam_size=1))
    # pushed in chunks of 0.7 s, flushed: the same words (one window: nothing final before)
    x = clip("numbers")
    got = []
    for i in range(0, len(x), 11200):
        got += tr.push(x[i : i + 11200], beam_size=1)
    assert got == []
    got += tr.flush(beam_size=1)
    assert [s.text for s in got] == [s.text for s in whole]
    tr.reset()
    it = tr.segments(x, beam_size=1)
    tr.cancel()  # from another thread, say: honoured before the next window
    with pytest.raises(TranscriptionCancelled):
        list(it)
    with pytest.raises(AudioError, match="int16"):
        list(tr.transcribe(np.zeros(16000, np.int16)))


def test_vad_chunks_keep_the_recording_times(tmp_path, reference):
    import soundfile as sf

    # 3 s of silence, the fox clip, 4 s of silence, the numbers clip
    fox, numbers = clip("fox"), clip("numbers")
    gap1, gap2 = np.zeros(3 * 16000, np.float32), np.zeros(4 * 16000, np.float32)
    sf.write(tmp_path / "gaps.wav", np.concatenate([gap1, fox, gap2, numbers]), 16000)
    doc = json.loads(cera("transcribe", "--audio", tmp_path / "gaps.wav", "--vad", "--json", "--beam", "1").stdout)
    segs = doc["segments"]
    numbers_at = (len(gap1) + len(fox) + len(gap2)) / 16000
    assert 2.4 <= segs[0]["start"] <= 3.6  # the speech starts after the first silence (0.4 s padding)
    later = [s for s in segs if "oranges" in s["text"]]
    assert later and later[0]["end"] > numbers_at  # the numbers clip is placed after both silences
    want = words(" ".join(r["text"] for c in ("fox", "numbers")
                          for r in reference["models"]["faster-whisper-tiny.en"]["greedy"][c]["segments"]))  # fmt: skip
    assert edit_distance(words(" ".join(s["text"] for s in segs)), want) <= 0.2 * len(want)
