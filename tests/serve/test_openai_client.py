"""`cera serve` through the official `openai` client: routes, streaming, logprobs, errors,
auth, back-pressure, cancellation, and 32 concurrent streams that each get the tokens they
get alone. Greedy outputs are checked against llama.cpp's stored references."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from llama_arithmetic import skip_unless_llama_cpp_arithmetic

openai = pytest.importorskip("openai", reason="the openai package is not installed (pip install openai)")
uvicorn = pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e ./cera-serve)")


REF = Path(__file__).parents[1] / "models" / "reference" / "data" / "smollm2-135m-instruct-q4_1.json"


class ServerThread:
    def __init__(self, loaded, **config):
        from cera_serve.app import ServerConfig, create_app

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        config.setdefault("aliases", ("x",))
        self.app = create_app(ServerConfig(loaded=loaded, **config))
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if json.loads(r.read())["status"] == "ready":
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the server did not become ready")

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def client(self, key="none"):
        return openai.OpenAI(base_url=self.url, api_key=key, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def server(loaded):
    with ServerThread(loaded, parallel=4, n_ctx=512) as s:
        yield s


@pytest.fixture(scope="module")
def reference():
    return {c["id"]: c for c in json.loads(REF.read_text())["cases"]}


def test_models_and_health(server):
    client = server.client()
    ids = [m.id for m in client.models.list()]
    assert len(ids) == 1
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health") as r:
        assert json.loads(r.read()) == {"status": "ready"}


def test_greedy_completion_equals_llama_cpps_tokens(server, loaded, reference):
    case = reference["code_py_sort"]
    n = case["first_step_margin_below_0_5"]  # llama.cpp is confident this far
    r = server.client().completions.create(model="x", prompt=case["prompt_tokens"], max_tokens=n, temperature=0)
    assert r.choices[0].text == loaded.detokenize(case["generated_tokens"][:n])
    assert r.usage.prompt_tokens == len(case["prompt_tokens"]) and r.usage.completion_tokens == n
    assert r.choices[0].finish_reason == "length"


def test_chat_streaming_matches_non_streaming_and_reports_usage(server):
    client = server.client()
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three colours."}]
    full = client.chat.completions.create(model="x", messages=msgs, max_tokens=24, temperature=0)
    parts, reasons, usage = [], [], None
    for chunk in client.chat.completions.create(model="x", messages=msgs, max_tokens=24, temperature=0, stream=True,
                                                stream_options={"include_usage": True}):  # fmt: skip
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            if ch.delta.content:
                parts.append(ch.delta.content)
            if ch.finish_reason:
                reasons.append(ch.finish_reason)
    assert "".join(parts) == full.choices[0].message.content and parts
    assert reasons == [full.choices[0].finish_reason]
    assert usage.completion_tokens == full.usage.completion_tokens and usage.prompt_tokens == full.usage.prompt_tokens


def test_logprobs_rank_tokens_as_llama_cpp_does(server, loaded, reference):
    skip_unless_llama_cpp_arithmetic(loaded, "the log-probability differences (2e-3 of llama.cpp's)")
    case = reference["en_story"]
    r = server.client().completions.create(
        model="x", prompt=case["prompt_tokens"], max_tokens=1, temperature=0, logprobs=5
    )
    top = r.choices[0].logprobs.top_logprobs[0]
    step = case["steps"][0]["top10"]
    assert r.choices[0].logprobs.token_logprobs[0] == max(top.values()) <= 0.0
    # the most likely tokens in llama.cpp's order, as far as its logits are clearly apart
    want = []
    for (t, v), (_, v_next) in zip(step, step[1:], strict=False):
        want.append(loaded.detokenize([t]))
        if v - v_next < 0.01 or len(want) == 5:
            break
    assert list(top)[: len(want)] == want and len(top) == 5
    # log-probabilities: differences equal llama.cpp's logit differences (softmax shift)
    lp = list(top.values())
    assert abs((lp[0] - lp[1]) - (step[0][1] - step[1][1])) < 2e-3


def test_stop_seed_and_n(server):
    client = server.client()
    r = client.completions.create(
        model="x", prompt="One, two, three, four,", max_tokens=20, temperature=0, stop=[" six"]
    )
    assert " six" not in r.choices[0].text and r.choices[0].finish_reason == "stop"
    a = client.completions.create(model="x", prompt="Once", max_tokens=12, temperature=1.0, seed=7, n=2)
    b = client.completions.create(model="x", prompt="Once", max_tokens=12, temperature=1.0, seed=7, n=2)
    assert [c.text for c in a.choices] == [c.text for c in b.choices]


@pytest.mark.parametrize(
    "kwargs, status, text",
    [
        ({"temperature": 5}, 400, "temperature"),
        ({"max_tokens": 100000}, 400, "context holds 512"),
        ({"stop": 3}, 400, "stop"),
        ({"response_format": {"type": "xml"}}, 400, "response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, 400, "json_schema.schema"),
        ({"tools": [{"type": "function", "function": {"name": "9x"}}]}, 400, "name '9x'"),
        ({"tool_choice": "required"}, 400, "tool_choice needs tools"),
        (
            {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "g"},
            400,
            "'g', which is not one of the tools",
        ),
    ],
)
def test_errors_are_openai_shaped(server, kwargs, status, text):
    with pytest.raises(openai.APIStatusError) as info:
        server.client().chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], **kwargs)
    assert info.value.status_code == status and text in str(info.value)


def test_bad_json_unknown_routes_and_tokenize(server):
    def post(path, body: bytes):
        req = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(req) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    status, body = post("/v1/chat/completions", b"{not json")
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    status, body = post("/v1/nowhere", b"{}")
    assert status == 404 and "no such route" in body["error"]["message"]
    status, body = post("/tokenize", json.dumps({"content": "Hello world"}).encode())
    assert status == 200 and body["tokens"] == server.app.state.server.loaded.tokenize("Hello world")
    status, body = post("/detokenize", json.dumps({"tokens": body["tokens"]}).encode())
    assert body["content"].strip() == "Hello world"


def test_the_api_key_guards_every_route_but_health(loaded):
    with ServerThread(loaded, parallel=1, n_ctx=128, api_key="s3cret") as s:
        with pytest.raises(openai.AuthenticationError):
            s.client("wrong").models.list()
        assert s.client("s3cret").models.list().data
        with urllib.request.urlopen(f"http://127.0.0.1:{s.port}/health") as r:
            assert r.status == 200


def test_beyond_the_queue_a_request_gets_429_with_retry_after(loaded):
    with ServerThread(loaded, parallel=1, n_ctx=512, max_queue=0) as s:
        client = s.client()
        stream = client.completions.create(model="x", prompt="Tell a long story:", max_tokens=400, temperature=0.8,
                                           stream=True)  # fmt: skip
        next(iter(stream))  # the only slot is taken
        with pytest.raises(openai.RateLimitError) as info:
            client.completions.create(model="x", prompt="hi", max_tokens=2)
        assert info.value.response.headers.get("retry-after") == "1"
        stream.close()


def test_a_client_that_disconnects_cancels_its_sequence(loaded):
    with ServerThread(loaded, parallel=1, n_ctx=1024) as s:
        client = s.client()
        stream = client.completions.create(model="x", prompt="Count to a thousand:", max_tokens=900, temperature=0,
                                           stream=True, extra_body={"ignore_eos": True})  # fmt: skip
        it = iter(stream)
        for _ in range(3):
            next(it)
        stream.close()
        server = s.app.state.server
        deadline = time.time() + 20
        while time.time() < deadline and server.metrics.running:
            time.sleep(0.05)
        assert server.metrics.running == 0
        assert server.metrics.completion_tokens < 300  # it did not decode all 900
        # the slot is free again
        assert client.completions.create(model="x", prompt="hi", max_tokens=2, temperature=0).choices


def test_32_concurrent_streams_each_get_the_tokens_they_get_alone(server):
    client = server.client()
    prompts = [f"Write one sentence about the number {i}." for i in range(32)]
    alone = [
        client.completions.create(model="x", prompt=p, max_tokens=12, temperature=0).choices[0].text for p in prompts
    ]
    got: list = [None] * 32

    def work(i):
        parts = []
        for chunk in server.client().completions.create(model="x", prompt=prompts[i], max_tokens=12, temperature=0,
                                                        stream=True):  # fmt: skip
            parts += [c.text for c in chunk.choices if c.text]
        got[i] = "".join(parts)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(32)]
    start = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert got == alone
    assert time.time() - start < 600


def test_embeddings(server, loaded):
    r = server.client().embeddings.create(model="x", input=["a cat sat", "a cat sat", "quantum field theory"])
    vecs = [d.embedding for d in r.data]
    import numpy as np

    a, b, c = (np.array(v) for v in vecs)
    want = loaded.embed(["a cat sat"])[0]
    assert np.allclose(a, want, atol=1e-5) and np.allclose(a, b)
    assert abs(np.linalg.norm(a) - 1) < 1e-4 and float(a @ c) < float(a @ b)
