"""The AudioPipeline on real components (microWakeWord okay-nabu, Silero VAD, Whisper
tiny.en, the GE2E diarizer) and ``cera listen``, on a clip whose pieces are known
(data/make_clips.py): speech before the wake word and after the command is not
transcribed; each command is, whole, labelled by its speaker with --diarize."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from pipeline_cases import CLIP, listen

from cera.audio import Hotword, SpeechStart, Transcript


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]", " ", text.lower()).split()


@pytest.fixture(scope="module")
def awake_events(clip):
    from cera_audio_listen import build_pipeline

    p = build_pipeline(wake="okay-nabu", diarize=True, wait=True, threads=2)
    try:
        return listen(p, clip[0])
    finally:
        p.close()


def test_the_wake_word_is_heard_after_it_is_spoken(awake_events, clip):
    wakes = [p for p in clip[1] if p["role"] == "wake"]
    hot = [e for e in awake_events if isinstance(e, Hotword)]
    assert [h.wake_word for h in hot] == ["Okay Nabu"] * len(wakes)
    for h, w in zip(hot, wakes, strict=True):
        assert w["end"] - 0.2 <= h.time <= w["end"] + 0.6, (h, w)


def test_exactly_the_commands_are_transcribed_whole(awake_events, clip):
    commands = [p for p in clip[1] if p["role"] == "command"]
    texts = [e for e in awake_events if isinstance(e, Transcript)]
    assert [words(t.text) for t in texts] == [words(c["text"]) for c in commands]
    for t, c in zip(texts, commands, strict=True):
        # the utterance holds the whole command: its onset is not clipped (pre-roll), its end not cut
        assert t.start <= c["start"] and t.end >= c["end"], (t, c)
    others = [p for p in clip[1] if p["role"] in ("before", "after")]
    for t in texts:
        assert all(t.end <= o["start"] or t.start >= o["end"] for o in others)


def test_commands_are_labelled_by_speaker(awake_events):
    texts = [e for e in awake_events if isinstance(e, Transcript)]
    assert all(t.speaker is not None for t in texts)
    # speakers numbered in order of arrival: the first voice (who also spoke before the wake
    # word) is SPEAKER_00, the second SPEAKER_01, though its wake word and command are short
    # (1.05 and 1.56 s)
    assert [t.speaker for t in texts] == ["SPEAKER_00", "SPEAKER_01"]


def test_without_a_wake_word_every_utterance_is_transcribed(clip):
    from cera_audio_listen import build_pipeline

    p = build_pipeline(wait=True, threads=2)
    try:
        events = listen(p, clip[0], chunk=16000)
    finally:
        p.close()
    heard = " ".join(" ".join(words(e.text)) for e in events if isinstance(e, Transcript))
    for piece in clip[1]:
        if piece["role"] in ("before", "command", "after"):
            assert " ".join(words(piece["text"])) in heard, (piece["text"], heard)
    assert not any(isinstance(e, Hotword) for e in events)
    assert len([e for e in events if isinstance(e, SpeechStart)]) >= 4


def cera(*args, input=None, check=True):
    env = dict(os.environ)
    env.pop("CERA_PLUGINS", None)
    proc = subprocess.run([sys.executable, "-m", "cera_cli.main", *map(str, args)], capture_output=True, input=input,
                          env=env)  # fmt: skip
    if check and proc.returncode != 0:
        raise AssertionError(f"cera {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr.decode()}")
    return proc


@pytest.mark.slow
def test_cli_file_and_stdin_give_the_api_events(awake_events, clip):
    want = [e.to_json() for e in awake_events]
    got = [json.loads(x) for x in cera("listen", "--audio", CLIP, "--wake", "okay-nabu", "--diarize", "--json",
                                       "-t", 2).stdout.decode().splitlines()]  # fmt: skip
    assert got == want
    import soundfile

    pcm = soundfile.read(str(CLIP), dtype="int16")[0].astype("<i2").tobytes()  # the file's own samples
    live = [json.loads(x) for x in cera("listen", "--audio", "-", "--wake", "okay-nabu", "--json", "-t", 2,
                                        input=pcm).stdout.decode().splitlines()]  # fmt: skip
    strip = [{k: v for k, v in e.items() if k != "speaker"} for e in want]
    key = lambda e: (e["event"], e.get("time", e.get("start")))  # noqa: E731
    assert sorted(live, key=key) == sorted(strip, key=key)


def test_cli_text_output_and_errors(tmp_path):
    out = cera("listen", "--audio", CLIP, "--wake", "okay-nabu", "-t", 2)
    lines = out.stdout.decode().splitlines()
    assert [line.split("\t")[1] for line in lines if "\thotword\t" in line] == ["hotword", "hotword"]
    assert sum(1 for line in lines if "\thotword\t" not in line) == 2
    bad = cera("listen", "--audio", tmp_path / "absent.wav", check=False)
    assert bad.returncode == 1 and "absent.wav: no such file" in bad.stderr.decode()
    bad = cera("listen", "--audio", CLIP, "--wake", "no-such-word", check=False)
    assert bad.returncode == 1 and "no-such-word" in bad.stderr.decode() and "Traceback" not in bad.stderr.decode()
    bad = cera("listen", "--audio", CLIP, "--max-utterance-ms", "10", check=False)
    assert bad.returncode == 2 and "--max-utterance-ms" in bad.stderr.decode()
