"""`cera serve` against malformed requests: every one is a 400 in OpenAI's error shape that
names the field, never a 500 (deeply nested bodies and schemas, ``stream_options`` that is
not an object, a text part whose text is not a string, ...)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e ./cera-serve)")

from cera_serve.app import MAX_DEPTH  # noqa: E402
from test_openai_client import ServerThread  # noqa: E402 - the serve tests share their server harness


@pytest.fixture(scope="module")
def server(loaded):
    with ServerThread(loaded, parallel=2, n_ctx=256) as s:
        yield s


def post(port: int, path: str, body) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method="POST",
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read() or b"{}") if "json" in r.headers.get("Content-Type", "") else {}
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def nested(depth: int, leaf=1):
    v = leaf
    for _ in range(depth):
        v = [v]
    return v


def nested_schema(depth: int) -> dict:
    s = {"type": "string"}
    for _ in range(depth):
        s = {"type": "object", "properties": {"a": s}, "required": ["a"]}
    return s


CHAT = {"model": "x", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}

# (route, body, the words the error names) - each of these answered 500 before
CLIENT_ERRORS = {
    "a body nested 100,000 deep": ("/v1/chat/completions", b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested"),
    "a body nested past the limit": ("/v1/chat/completions", {**CHAT, "x": nested(MAX_DEPTH + 5)}, "nested"),
    "a schema nested past the limit": ("/v1/chat/completions", {**CHAT, "response_format": {
        "type": "json_schema", "json_schema": {"name": "s", "schema": nested_schema(MAX_DEPTH)}}}, "nested"),
    "a schema nested 3,000 deep in raw JSON": ("/v1/chat/completions", json.dumps({**CHAT, "response_format": {
        "type": "json_schema", "json_schema": {"name": "s", "schema": {"PLACE": 1}}}}).encode().replace(
        b'{"PLACE": 1}', b'{"items":' * 3000 + b"{}" + b"}" * 3000), "nested"),
    "stream_options a string": ("/v1/chat/completions", {**CHAT, "stream": True, "stream_options": "yes"}, "stream_options"),
    "stream_options a list": ("/v1/completions", {"prompt": "Hi", "max_tokens": 2, "stream": True, "stream_options": [1]},
                              "stream_options"),
    "include_usage not a boolean": ("/v1/chat/completions", {**CHAT, "stream": True, "stream_options": {"include_usage": "x"}},
                                    "stream_options"),
    "a text part whose text is a number": ("/v1/chat/completions", {**CHAT, "messages": [
        {"role": "user", "content": [{"type": "text", "text": 5}]}]}, "text"),
    "a text part whose text is an object": ("/v1/chat/completions", {**CHAT, "messages": [
        {"role": "user", "content": [{"type": "text", "text": {"a": 1}}]}]}, "text"),
    "tools nested past the limit": ("/v1/chat/completions", {**CHAT, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": nested_schema(MAX_DEPTH)}}]}, "nested"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CLIENT_ERRORS))
def test_a_malformed_request_is_a_400_naming_the_field(server, case):
    route, body, named = CLIENT_ERRORS[case]
    status, answer = post(server.port, route, body)
    assert status == 400, (status, answer)
    err = answer["error"]
    assert err["type"] == "invalid_request_error" and named in err["message"] + str(err.get("param")), err


def test_a_body_at_the_limit_is_served(server):
    """Nesting of real requests (tools with nested objects) stays well within the limit."""
    schema = nested_schema(4)
    status, answer = post(server.port, "/v1/chat/completions", {**CHAT, "response_format": {
        "type": "json_schema", "json_schema": {"name": "s", "schema": schema}}, "max_tokens": 32})  # fmt: skip
    assert status == 200, answer


def test_the_server_still_answers_after_the_bad_requests(server):
    status, answer = post(server.port, "/v1/chat/completions", CHAT)
    assert status == 200 and answer["choices"][0]["message"]["role"] == "assistant"
