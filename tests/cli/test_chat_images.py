"""`cera chat --mmproj M --image I` and `/image FILE` on the tiny random-weight LFM2-VL
(tests/models/reference/tiny/vl): the replies are the greedy tokens libmtmd gives the same
chat prompt (tests/models/reference/data/vl, made by make_vl_reference.py), and what
`cera run --image` and a ChatSession with image parts give."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_chat_cli import chat

import cera

VL = Path(__file__).parents[1] / "models" / "reference"
MODEL = VL / "tiny" / "vl" / "tiny-lfm2-vl.gguf"
MMPROJ = VL / "tiny" / "vl" / "tiny-lfm2-vl-mmproj.gguf"
DATA = VL / "data" / "vl"
RECORD = json.loads((DATA / "tiny-lfm2-vl.json").read_text())
IMAGE = DATA / RECORD["images"]["gradient"]["file"]
OTHER = DATA / RECORD["images"]["noise"]["file"]
N = str(RECORD["n_generate"])
QUESTION = "What is in it?"
SAMPLING = ("--device", "cpu", "--temp", "0", "-n", N)


@pytest.fixture(scope="module")
def vl():
    with cera.load(str(MODEL), device="cpu", threads=2, quiet=True, mmproj=MMPROJ) as loaded:
        yield loaded


def _parts(image, text=QUESTION):
    return [{"type": "image", "image": str(image)}, {"type": "text", "text": text}]


def _replies(stdout: str) -> list[str]:
    return [line for line in stdout.split("\n") if line]


def test_chat_session_image_parts_equal_run_and_libmtmd(vl):
    """ChatSession with image parts: libmtmd's greedy tokens on the same chat prompt, and
    the text `cera run --image` writes."""
    want = RECORD["images"]["gradient"]["chat"]["greedy"]
    summary = vl.chat().send({"role": "user", "content": _parts(IMAGE)}, max_tokens=int(N), temperature=0.0)
    assert list(summary.tokens) == want
    env = {k: v for k, v in os.environ.items() if k != "CERA_PLUGINS"}
    r = subprocess.run(
        [sys.executable, "-m", "cera_cli.main", "run", "-m", str(MODEL), "--mmproj", str(MMPROJ), "--image", str(IMAGE),
         "--chat", "--no-timings", "-q", *SAMPLING, QUESTION],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip("\n") == summary.text


def test_chat_image_on_the_first_turn_and_by_command(vl):
    """--image goes with the first message; /image FILE with the next one; a bad /image is
    refused with a note and the chat goes on."""
    first = vl.chat()
    a = first.send({"role": "user", "content": _parts(IMAGE)}, max_tokens=int(N), temperature=0.0).text
    b = first.send({"role": "user", "content": _parts(OTHER)}, max_tokens=int(N), temperature=0.0).text
    plain = first.send("And now?", max_tokens=int(N), temperature=0.0).text
    assert a != b  # the replies depend on the image, so the equalities below can fail
    missing = Path(IMAGE).with_name("missing.png")
    script = f"{QUESTION}\n/image {missing}\n/image {OTHER}\n{QUESTION}\nAnd now?\n"
    r = chat(MODEL, "--mmproj", MMPROJ, "--image", IMAGE, *SAMPLING, stdin=script)
    assert r.returncode == 0, r.stderr
    assert _replies(r.stdout) == _replies("\n".join([a, b, plain]))
    assert f"cannot read image {missing}" in r.stderr
    assert f"{OTHER} goes with the next message (1 image)" in r.stderr
    assert r.stderr.count("generated at") == 3


def test_chat_image_command_without_a_projector_says_so(tmp_path):
    lone = tmp_path / "tiny-lfm2-vl.gguf"
    lone.write_bytes(MODEL.read_bytes())
    r = chat(lone, *SAMPLING, stdin=f"/image {IMAGE}\n/help\n")
    assert r.returncode == 0, r.stderr
    assert "loaded without a multimodal projector: start cera chat with --mmproj FILE" in r.stderr
    assert "/image FILE" in r.stderr  # /help lists it
