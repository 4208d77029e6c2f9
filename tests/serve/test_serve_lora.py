"""`cera serve --lora`: adapters loaded once and chosen per request (by ``model`` or by
llama.cpp's ``lora`` field), listed in /v1/models and /lora-adapters; concurrent requests
with different adapters (or none) decode together and each gets the tokens the Python API
gives that request alone; bad choices are 400s that say what is loaded."""

from __future__ import annotations

import json
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e ./cera-serve)")

from test_openai_client import ServerThread  # noqa: E402 - the serve tests share their server harness

import cera  # noqa: E402

TESTS = Path(__file__).parents[1]
sys.path.insert(0, str(TESTS / "adapters"))
sys.path.insert(0, str(TESTS / "models"))
from lora_files import random_pairs, write_gguf_adapter  # noqa: E402
from tiny_llama import write_llama  # noqa: E402

from cera_serve.adapters import AdapterSpec, parse_spec  # noqa: E402

PROMPT = [0, 3, 5, 7, 2, 9, 11, 4]
N = 8


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve-lora")
    base = write_llama(d / "base.gguf")
    return {
        "base": base,
        "a1": write_gguf_adapter(d / "a1.gguf", "llama", random_pairs(base, rank=4, seed=1, std=0.3), 8.0),
        "a2": write_gguf_adapter(d / "a2.gguf", "llama", random_pairs(base, rank=2, seed=2, std=0.3, embedding=True), 0.0),
    }


@pytest.fixture(scope="module")
def tiny(files):
    with cera.load(files["base"], device="cpu", quiet=True) as m:
        yield m


@pytest.fixture(scope="module")
def server(tiny, files):
    specs = (AdapterSpec("one", str(files["a1"]), 0.7), parse_spec(f"two={files['a2']}"))
    with ServerThread(tiny, parallel=4, n_ctx=64, loras=specs) as s:
        yield s


def _request(port: int, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _alone(tiny, adapters) -> str:
    s = tiny.new_session(n_ctx=64, adapters=adapters)
    s.append_tokens(PROMPT)
    return tiny.detokenize(s.generate(max_tokens=N, temperature=0.0, ignore_eos=True).tokens)


def test_adapters_are_listed(server):
    status, models = _request(server.port, "/v1/models")
    assert status == 200
    ids = [m["id"] for m in models["data"]]
    assert ids[1:] == ["one", "two"]
    assert all(m["parent"] == ids[0] for m in models["data"][1:])
    status, listing = _request(server.port, "/lora-adapters")
    assert [(a["id"], a["name"], a["scale"]) for a in listing] == [(0, "one", 0.7), (1, "two", 1.0)]


def test_requests_with_different_adapters_decode_together(server, tiny):
    a1, a2 = tiny.adapters["one"], tiny.adapters["two"]
    asks = [
        ({"model": "one"}, [(a1, 0.7)]),
        ({}, []),
        ({"lora": [{"id": 1, "scale": 0.5}]}, [(a2, 0.5)]),
        ({"model": "one", "lora": [{"name": "one", "scale": 1.5}, {"id": 1}]}, [(a1, 1.5), (a2, 1.0)]),
        ({"model": "two", "lora": []}, []),
    ]
    want = [_alone(tiny, adapters) for _, adapters in asks]
    assert len(set(want)) >= 3  # the adapters change the text
    got = [None] * len(asks)

    def ask(i):
        body = {"prompt": PROMPT, "max_tokens": N, "temperature": 0, "ignore_eos": True, **asks[i][0]}
        got[i] = _request(server.port, "/v1/completions", body)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(asks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (status, body), text, (fields, _) in zip(got, want, asks, strict=True):
        assert status == 200, body
        assert body["choices"][0]["text"] == text, fields
    assert got[0][1]["model"] == "one"  # the answer names the adapter it came from


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"lora": [{"id": 5}]}, "not a loaded adapter; loaded: one \\(id 0\\), two \\(id 1\\)"),
        ({"lora": [{"name": "three"}]}, "'three' is not a loaded adapter"),
        ({"lora": [{"id": 0, "scale": "big"}]}, "scale must be a finite number"),
        ({"lora": [{"id": 0}, {"name": "one"}]}, "given twice"),
        ({"lora": {"id": 0}}, "must be a list"),
    ],
)
def test_bad_adapter_choices_are_refused(server, fields, match):
    import re

    status, body = _request(server.port, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, **fields})
    assert status == 400
    assert re.search(match, body["error"]["message"]), body
    assert body["error"]["param"] == "lora"


def test_command_line_spellings(tmp_path):
    f = tmp_path / "style.gguf"
    f.write_bytes(b"")
    assert parse_spec(str(f)) == AdapterSpec("style", str(f), 1.0)
    assert parse_spec(f"{f}:0.25") == AdapterSpec("style", str(f), 0.25)
    assert parse_spec(f"fancy={f}:2") == AdapterSpec("fancy", str(f), 2.0)
    assert parse_spec(f"fancy={f}", 0.5) == AdapterSpec("fancy", str(f), 0.5)
    from click.testing import CliRunner

    from cera_serve.command import serve_cmd

    r = CliRunner().invoke(serve_cmd, ["--help"])
    assert "--lora [NAME=]FILE[:SCALE]" in r.output and "--lora-scaled" in r.output


def test_a_bad_adapter_fails_the_load_and_says_why(files, tiny, tmp_path):
    bad = write_gguf_adapter(tmp_path / "other.gguf", "qwen2", random_pairs(files["base"], rank=2, seed=3), 4.0)
    from cera_serve.app import Server, ServerConfig

    server = Server(ServerConfig(loaded=tiny, loras=(AdapterSpec("other", str(bad)),)))
    server.models.default.load()
    assert server.status == "failed"
    assert "architecture 'qwen2'" in server.error
