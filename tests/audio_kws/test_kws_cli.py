"""`cera kws` and `cera kws-convert`, run as the installed command line runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
from kws_cases import DATA, read_clip

from cera_audio_kws.detector import HotwordDetector


def cera(*args, input=None, check=True):
    env = dict(os.environ)
    env.pop("CERA_PLUGINS", None)
    proc = subprocess.run([sys.executable, "-m", "cera_cli.main", *map(str, args)], capture_output=True,
                          input=input, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"cera {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr.decode()}")
    return proc


def lines(proc) -> list[dict]:
    return [json.loads(line) for line in proc.stdout.decode().splitlines()]


def test_json_detections_match_the_api(model_gguf):
    clip = "hey_mycroft_en_160"
    want = HotwordDetector.open(model_gguf["hey_mycroft"]).detect(read_clip(clip))
    got = lines(cera("kws", "--audio", DATA / f"{clip}.flac", "--model", model_gguf["hey_mycroft"], "--json",
                     "--no-vad", "--no-agc"))
    assert got == [d.to_json() for d in want] and len(got) == 1
    assert set(got[0]) == {"wake_word", "time", "probability"} and got[0]["wake_word"] == "Hey Mycroft"


def test_trace_and_stdin(model_gguf):
    clip = "okay_nabu_en-us_160"
    pcm = read_clip(clip)
    model = model_gguf["okay_nabu"]
    from_file = lines(cera("kws", "--audio", DATA / f"{clip}.flac", "--model", model, "--trace", "--no-agc"))
    from_stdin = lines(cera("kws", "--audio", "-", "--model", model, "--trace", "--no-agc",
                            input=pcm.astype("<i2").tobytes()))
    assert from_file == from_stdin
    steps = [x for x in from_file if "wake_word" not in x]
    found = [x for x in from_file if "wake_word" in x]
    assert len(found) == 1 and found[0]["wake_word"] == "Okay Nabu"
    assert all(set(s) == {"time", "probability"} for s in steps)
    # the VAD gate skips the silent start: fewer steps than 30 ms steps in the clip
    n_steps = ((len(pcm) - 480) // 160 + 1) // 3  # 10 ms feature frames, 3 per step
    assert 0 < len(steps) <= n_steps
    ungated = lines(cera("kws", "--audio", DATA / f"{clip}.flac", "--model", model, "--trace", "--no-vad", "--no-agc"))
    assert len([x for x in ungated if "wake_word" not in x]) == n_steps


def test_text_output_and_negatives(model_gguf):
    out = cera("kws", "--audio", DATA / "negative_weather.flac", "--model", model_gguf["alexa"])
    assert out.stdout == b"" and b"no 'Alexa' detected" in out.stderr
    out = cera("kws", "--audio", DATA / "alexa_en-gb-x-rp_160.flac", "--model", model_gguf["alexa"])
    t, word, p = out.stdout.decode().strip().split("\t")
    assert word == "Alexa" and float(p) > 0.9 and 0.5 < float(t) < 2.0


def test_threshold_option(model_gguf):
    out = cera("kws", "--audio", DATA / "alexa_en-gb-x-rp_160.flac", "--model", model_gguf["alexa"], "--json",
               "--threshold", "0.9999")
    assert lines(out) == []


def test_convert_command(model_files, tmp_path):
    tfl, js = model_files["okay_nabu"]
    out = tmp_path / "m.gguf"
    proc = cera("kws-convert", tfl, "--json", js, "-o", out)
    assert proc.stdout.decode().strip() == str(out)
    det = HotwordDetector.open(out)
    assert det.wake_words == ("Okay Nabu",) and det.threshold == np.float32(0.85)


def test_bad_inputs_give_one_line_errors(tmp_path, model_gguf):
    proc = cera("kws", "--audio", tmp_path / "missing.wav", "--model", model_gguf["alexa"], check=False)
    assert proc.returncode != 0 and b"missing.wav" in proc.stderr and b"Traceback" not in proc.stderr
    proc = cera("kws", "--audio", DATA / "negative_weather.flac", "--model", "no-such-model", check=False)
    assert proc.returncode != 0 and b"okay-nabu" in proc.stderr and b"Traceback" not in proc.stderr
    proc = cera("kws", "--audio", "-", "--model", model_gguf["alexa"], input=b"\x00\x01\x02", check=False)
    assert proc.returncode != 0 and b"odd number of bytes" in proc.stderr
    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"not a model at all")
    proc = cera("kws-convert", junk, "--json", junk, "-o", tmp_path / "x.gguf", check=False)
    assert proc.returncode != 0 and b"Traceback" not in proc.stderr


def test_models_lists_the_bundles():
    doc = json.loads(cera("models", "--kind", "kws", "--json").stdout)
    names = sorted(e["name"] for e in doc)
    assert names == ["microwakeword-alexa", "microwakeword-hey-jarvis", "microwakeword-hey-mycroft",
                     "microwakeword-okay-nabu"]
