"""`cera serve -md DRAFT`: speculative decoding in the server (cera_serve.speculation). Greedy
text equals plain decoding's (the same server with ``speculative.n_max`` 0, and a session of
the model alone), alone and with requests running together; drafts are reported in the
response's ``timings`` and in /metrics; what a draft cannot serve decodes plainly, or is
refused when the request asks for drafting."""

from __future__ import annotations

import json
import threading
import types
import urllib.error
import urllib.request

import pytest

pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e ./cera-serve)")
pytest.importorskip("openai", reason="the openai package is not installed (pip install openai)")

from test_openai_client import ServerThread  # noqa: E402 - the serve tests share their server harness

from cera.errors import InvalidOptions  # noqa: E402
from cera.generation.options import GenerateOptions  # noqa: E402

PROMPT = "Write a Python function that returns the n-th Fibonacci number:\n"


@pytest.fixture(scope="module")
def draft_path(smollm2_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "integration"))
    from draft_files import truncated_smollm2

    return truncated_smollm2(smollm2_path, 26)


@pytest.fixture(scope="module")
def server(loaded, draft_path):
    with ServerThread(loaded, parallel=2, n_ctx=256, model_draft=str(draft_path), draft_p_min=0.0) as s:
        yield s
    draft = loaded.draft
    loaded.set_draft(None)
    draft.close()


def _post(port: int, path: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _plain_text(loaded, prompt: str, n: int) -> str:
    s = loaded.new_session(n_ctx=256)
    s.append_tokens(loaded.tokenize(prompt))
    return s.generate(max_tokens=n, temperature=0, draft_max=0).text


def test_greedy_text_is_plain_decodings_and_drafts_are_reported(server, loaded):
    assert loaded.draft is not None  # attached by the server from model_draft
    body = {"prompt": PROMPT, "max_tokens": 40, "temperature": 0}
    status, spec = _post(server.port, "/v1/completions", body)
    assert status == 200, spec
    status, plain = _post(server.port, "/v1/completions", {**body, "speculative.n_max": 0})
    assert status == 200, plain
    assert spec["choices"][0]["text"] == plain["choices"][0]["text"] == _plain_text(loaded, PROMPT, 40)
    timings = spec["timings"]
    assert 0 < timings["draft_n_accepted"] <= timings["draft_n"]
    assert "timings" not in plain


def test_requests_running_together_get_their_own_text(server, loaded):
    prompts = [PROMPT, "The history of the printing press begins", "Three facts about owls:"]
    expected = [_plain_text(loaded, p, 24) for p in prompts]
    got: list = [None] * len(prompts)

    def run(i):
        got[i] = _post(server.port, "/v1/completions", {"prompt": prompts[i], "max_tokens": 24, "temperature": 0})

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [g[0] for g in got] == [200] * len(prompts)
    assert [g[1]["choices"][0]["text"] for g in got] == expected


def test_streaming_chat_equals_the_whole_answer_and_reports_drafts(server):
    client = server.client()
    msgs = [{"role": "user", "content": "Name three colours."}]
    full = client.chat.completions.create(model="x", messages=msgs, max_tokens=24, temperature=0)
    parts, timings = [], None
    for chunk in client.chat.completions.create(model="x", messages=msgs, max_tokens=24, temperature=0, stream=True,
                                                stream_options={"include_usage": True}):  # fmt: skip
        if chunk.usage:
            timings = (chunk.model_extra or {}).get("timings")
        for ch in chunk.choices:
            if ch.delta.content:
                parts.append(ch.delta.content)
    assert "".join(parts) == full.choices[0].message.content and parts
    assert timings is not None and timings["draft_n"] >= timings["draft_n_accepted"] >= 0 and timings["draft_n"] > 0


def test_what_a_draft_cannot_serve_decodes_plainly_or_is_refused(server, loaded):
    body = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "logprobs": 2}
    status, r = _post(server.port, "/v1/completions", body)
    assert status == 200 and "timings" not in r and len(r["choices"][0]["logprobs"]["tokens"]) == 8
    assert r["choices"][0]["text"] == _plain_text(loaded, PROMPT, 8)
    status, r = _post(server.port, "/v1/completions", {**body, "speculative.n_max": 4})
    assert status == 400 and "log-probabilities" in r["error"]["message"]
    for bad in (-1, 1.5, "4", 1000):
        status, r = _post(server.port, "/v1/completions", {"prompt": "Hi", "max_tokens": 2, "speculative.n_max": bad})
        assert status == 400 and "speculative.n_max" in r["error"]["message"], (bad, r)
    status, r = _post(server.port, "/v1/completions", {"prompt": "Hi", "max_tokens": 2, "speculative.n_max": 2,
                                                       "speculative.n_min": 3})  # fmt: skip
    assert status == 400 and "speculative.n_min" in r["error"]["message"]


def test_metrics_count_the_drafts(server):
    status, _ = _post(server.port, "/v1/completions", {"prompt": PROMPT, "max_tokens": 16, "temperature": 0})
    assert status == 200
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics") as r:
        lines = dict(line.split(" ", 1) for line in r.read().decode().splitlines() if not line.startswith("#"))
    drafted, accepted = float(lines["cera_draft_tokens_total"]), float(lines["cera_draft_tokens_accepted_total"])
    assert drafted > 0 and 0 < accepted <= drafted


def test_a_server_without_a_draft_refuses_a_request_for_drafting():
    from cera_serve.app import ServerConfig
    from cera_serve.speculation import speculation_options

    options, config = GenerateOptions(), ServerConfig()
    without = types.SimpleNamespace(draft=None)
    assert speculation_options(options, {"speculative.n_max": 0}, config, without) is options
    with pytest.raises(InvalidOptions, match="no draft model"):
        speculation_options(options, {"speculative.n_max": 4}, config, without)
    with_draft = types.SimpleNamespace(draft=object())
    got = speculation_options(options, {"speculative.n_max": 5, "speculative.p_min": 0.5}, config, with_draft)
    assert (got.draft_max, got.draft_min, got.draft_p_min) == (5, 0, 0.5)
