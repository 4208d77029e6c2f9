"""Generated request bodies against `cera serve` (a tiny model on loopback): OpenAI's fields
with values of any JSON type, nesting, content parts, tools and schemas, and bytes that are
not JSON. Every answer is a 200 or a 4xx error in OpenAI's shape; never a 500, never a
stack trace; the server answers a good request afterwards."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from hostile import json_values, long, quick
from hypothesis import given
from hypothesis import strategies as st

uvicorn = pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e ./cera-serve)")

import cera  # noqa: E402

TINY = Path(__file__).resolve().parents[1] / "models" / "reference" / "tiny" / "tiny-mistral.gguf"
FIELDS = ["model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stream",
          "stream_options", "stop", "seed", "logprobs", "top_logprobs", "presence_penalty", "frequency_penalty",
          "response_format", "tools", "tool_choice", "constrain_tools", "ignore_eos", "user", "content", "tokens",
          "add_special", "input"]  # fmt: skip
ROUTES = ["/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize", "/v1/embeddings"]

part = st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", 1]), "text": json_values})
message = st.fixed_dictionaries({
    "role": st.sampled_from(["user", "system", "assistant", "tool", "x"]) | json_values,
    "content": st.text(max_size=30) | st.lists(part, max_size=3) | json_values,
}, optional={"tool_calls": json_values | st.lists(st.fixed_dictionaries({"function": json_values}), max_size=2),
             "name": json_values, "tool_call_id": json_values})  # fmt: skip
deep = st.integers(1, 200_000).map(lambda n: {"PLACE": n})
schema = st.recursive(st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "object", "array", "x"])}),
                      lambda inner: st.fixed_dictionaries({"type": st.just("object"), "properties": st.dictionaries(
                          st.text(max_size=4), inner, max_size=3)}) | st.fixed_dictionaries({"type": st.just("array"),
                          "items": inner}) | st.fixed_dictionaries({"anyOf": st.lists(inner, max_size=3)}) |
                      st.fixed_dictionaries({"$ref": st.sampled_from(["#", "#/properties/a", "#/$defs/x", "x"])}),
                      max_leaves=30)  # fmt: skip
values = {
    "messages": st.lists(message, min_size=0, max_size=3) | json_values,
    "stream_options": json_values | st.fixed_dictionaries({"include_usage": json_values}),
    "response_format": json_values | st.fixed_dictionaries({"type": st.just("json_schema"), "json_schema":
                       st.fixed_dictionaries({"name": st.just("s"), "schema": schema | json_values})}),
    "tools": json_values | st.lists(st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries(
        {"name": st.text(max_size=8) | json_values, "parameters": schema | json_values})}), max_size=2),
}  # fmt: skip
bodies = st.fixed_dictionaries({
    "route": st.sampled_from(ROUTES),
    "fields": st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6),
    "special": st.dictionaries(st.sampled_from(list(values)), st.nothing(), max_size=0) | st.fixed_dictionaries(
        {}, optional={k: v for k, v in values.items()}),
    "deep": st.none() | deep,
    "raw": st.none() | st.binary(max_size=40) | st.sampled_from([b"[" * 50_000, b'{"a":' * 50_000, b"\xff\xfe", b""]),
})  # fmt: skip


def encode(b: dict) -> bytes:
    if b["raw"] is not None:
        return b["raw"]
    body = {"model": "x", "max_tokens": 2, **b["fields"], **b["special"]}
    if isinstance(body.get("max_tokens"), int) and not isinstance(body["max_tokens"], bool):
        body["max_tokens"] = max(-5, min(body["max_tokens"], 4))  # generation length is not what is tested
    if b["deep"] is not None:
        body["x"] = b["deep"]
    raw = json.dumps(body).encode()
    if b["deep"] is not None:
        n = b["deep"]["PLACE"]
        raw = raw.replace(json.dumps(b["deep"]).encode(), b"[" * n + b"]" * n)
    return raw


class Server:
    def __init__(self, loaded):
        from cera_serve.app import ServerConfig, create_app

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        app = create_app(ServerConfig(loaded=loaded, aliases=("x",), parallel=2, n_ctx=256))
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="critical"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the server did not start")

    def post(self, route: str, data: bytes) -> tuple[int, bytes, str]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{route}", data=data, method="POST",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read(), r.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            return e.code, e.read(), e.headers.get("Content-Type", "")

    def close(self):
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def server():
    m = cera.load(str(TINY), device="cpu", threads=1, quiet=True)
    s = Server(m)
    yield s
    s.close()
    m.close()


def check(server: Server, b: dict) -> None:
    status, body, kind = server.post(b["route"], encode(b))
    assert status < 500, (status, body[:500])
    if status >= 400:
        err = json.loads(body)["error"]
        assert isinstance(err["message"], str) and err["type"] and "Traceback" not in err["message"], err


@quick(examples=60, deadline_ms=20000)
@given(b=bodies)
def test_generated_request_bodies(server, b):
    check(server, b)


@pytest.mark.slow
@long(examples=3000, deadline_ms=60000)
@given(b=bodies)
def test_generated_request_bodies_long(server, b):
    check(server, b)


def test_the_server_answers_after_the_generated_bodies(server):
    status, body, _ = server.post("/v1/completions", json.dumps({"prompt": "Hello", "max_tokens": 2}).encode())
    assert status == 200 and json.loads(body)["choices"]
