"""Tool calls and structured output through `cera serve` and the official `openai`
client, on Qwen2.5-Coder-0.5B (Hermes format): a call comes back as ``tool_calls`` whose
arguments validate against the schema, streamed as a tool-call delta (never as text),
``tool_choice`` is honoured, a tool result continues the conversation, and
``response_format`` gives JSON valid under its schema."""

from __future__ import annotations

import json

import jsonschema
import pytest

openai = pytest.importorskip("openai", reason="the openai package is not installed (pip install openai)")
pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e ./cera-serve)")

from test_openai_client import ServerThread  # noqa: E402 - the serve tests share their server harness

import cera  # noqa: E402

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time in a time zone",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
    },
}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]


@pytest.fixture(scope="module")
def server(qwen05_path):
    loaded = cera.load(str(qwen05_path), device="cpu", threads=2, quiet=True)
    with ServerThread(loaded, parallel=2, n_ctx=2048) as s:
        yield s
    loaded.close()


def test_a_call_comes_back_as_tool_calls(server):
    r = server.client().chat.completions.create(model="x", messages=ASK, tools=[WEATHER, TIME], temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, WEATHER["function"]["parameters"])
    assert args["city"] == "Paris"
    assert not choice.message.content


def test_streamed_calls_are_deltas_not_text(server):
    stream = server.client().chat.completions.create(
        model="x", messages=ASK, tools=[WEATHER], temperature=0, stream=True
    )
    text, calls, reasons = [], [], []
    for chunk in stream:
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        text.append(d.content or "")
        calls += d.tool_calls or []
        reasons.append(chunk.choices[0].finish_reason)
    assert "".join(text) == "" and reasons[-1] == "tool_calls"
    assert [c.function.name for c in calls] == ["get_weather"] and json.loads(calls[0].function.arguments)[
        "city"
    ] == "Paris"


def test_tool_choice_and_a_tool_result(server):
    client = server.client()
    r = client.chat.completions.create(
        model="x", messages=ASK, tools=[WEATHER, TIME], temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )  # fmt: skip
    (call,) = r.choices[0].message.tool_calls
    assert call.function.name == "get_time" and "zone" in json.loads(call.function.arguments)
    r = client.chat.completions.create(
        model="x", messages=ASK, tools=[WEATHER], tool_choice="none", temperature=0, max_tokens=40
    )
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason != "tool_calls"
    first = client.chat.completions.create(model="x", messages=ASK, tools=[WEATHER], temperature=0)
    call = first.choices[0].message.tool_calls[0]
    follow = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "18 degrees and cloudy"},
    ]
    r = client.chat.completions.create(model="x", messages=follow, tools=[WEATHER], temperature=0, max_tokens=40)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert r.usage.prompt_tokens > first.usage.prompt_tokens


def test_response_format_json_schema(server):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"],
    }
    r = server.client().chat.completions.create(
        model="x", temperature=0, max_tokens=80,
        messages=[{"role": "user", "content": "Name a European capital and its country, as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "capital", "schema": schema}},
    )  # fmt: skip
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    r = server.client().chat.completions.create(
        model="x", temperature=0, max_tokens=150,
        messages=[{"role": "user", "content": 'Give a JSON object with the keys "name" and "country" for Paris.'}],
        response_format={"type": "json_object"},
    )  # fmt: skip
    assert isinstance(json.loads(r.choices[0].message.content), dict)
