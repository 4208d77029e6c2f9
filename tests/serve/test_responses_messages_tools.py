"""Tool calls through the Responses and Messages APIs with the official clients, on
Qwen2.5-Coder-0.5B (Hermes format): the call chat completions makes comes back as a
``function_call`` item / ``tool_use`` block with the same name and arguments (valid under
the schema), streamed and not, with the API's finish ("tool_use")."""

from __future__ import annotations

import json

import jsonschema
import pytest

openai = pytest.importorskip("openai", reason="the openai package is not installed (pip install openai)")
anthropic = pytest.importorskip("anthropic", reason="the anthropic package is not installed (pip install anthropic)")
pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e ./cera-serve)")

from test_openai_client import ServerThread  # noqa: E402 - the serve tests share their server harness

import cera  # noqa: E402

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
ASK = "What's the weather in Paris?"
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def server(qwen05_path):
    loaded = cera.load(str(qwen05_path), device="cpu", threads=2, quiet=True)
    with ServerThread(loaded, parallel=2, n_ctx=2048) as s:
        yield s
    loaded.close()


@pytest.fixture(scope="module")
def want(server):
    """The call chat completions makes."""
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                             "parameters": SCHEMA}}  # fmt: skip
    r = server.client().chat.completions.create(model="x", messages=[{"role": "user", "content": ASK}], tools=[tool],
                                                temperature=0, max_tokens=60)  # fmt: skip
    (call,) = r.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    return json.loads(call.function.arguments)


def test_responses_function_call(server, want):
    tool = {"type": "function", "name": "get_weather", "description": "Get the current weather in a city",
            "parameters": SCHEMA}  # fmt: skip
    client = server.client()
    r = client.responses.create(model="x", input=ASK, tools=[tool], temperature=0, max_output_tokens=60)
    (item,) = [o for o in r.output if o.type == "function_call"]
    assert item.name == "get_weather" and item.call_id and json.loads(item.arguments) == want
    jsonschema.validate(json.loads(item.arguments), SCHEMA)
    events = list(client.responses.create(model="x", input=ASK, tools=[tool], temperature=0, max_output_tokens=60,
                                          stream=True))  # fmt: skip
    done = [e.item for e in events if e.type == "response.output_item.done" and e.item.type == "function_call"]
    assert len(done) == 1 and json.loads(done[0].arguments) == want and done[0].name == "get_weather"
    args = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert json.loads(args[0].arguments) == want
    assert not [e for e in events if e.type == "response.output_text.delta"]  # no markup as text


def test_messages_tool_use(server, want):
    tool = {"name": "get_weather", "description": "Get the current weather in a city", "input_schema": SCHEMA}
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{server.port}", api_key="none", max_retries=0, timeout=120)
    m = client.messages.create(model="x", max_tokens=60, tools=[tool], extra_body=GREEDY,
                               messages=[{"role": "user", "content": ASK}])  # fmt: skip
    assert m.stop_reason == "tool_use"
    (use,) = [b for b in m.content if b.type == "tool_use"]
    assert use.name == "get_weather" and use.id and use.input == want
    with client.messages.stream(model="x", max_tokens=60, tools=[tool], extra_body=GREEDY,
                                messages=[{"role": "user", "content": ASK}]) as stream:  # fmt: skip
        final = stream.get_final_message()
    (use,) = [b for b in final.content if b.type == "tool_use"]
    assert final.stop_reason == "tool_use" and use.name == "get_weather" and use.input == want
    # a named tool
    m = client.messages.create(model="x", max_tokens=60, tools=[tool], tool_choice={"type": "tool", "name": "get_weather"},
                               extra_body=GREEDY, messages=[{"role": "user", "content": ASK}])  # fmt: skip
    (use,) = [b for b in m.content if b.type == "tool_use"]
    jsonschema.validate(use.input, SCHEMA)


def _chat_answer(server, call_id: str, args: dict) -> str:
    """Chat completions' reply once the call's result is in the conversation."""
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                             "parameters": SCHEMA}}  # fmt: skip
    call = {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(args)}}
    messages = [{"role": "user", "content": ASK}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": call_id, "content": "sunny, 21 C"}]  # fmt: skip
    r = server.client().chat.completions.create(model="x", messages=messages, tools=[tool], tool_choice="none",
                                                temperature=0, max_tokens=30)  # fmt: skip
    return r.choices[0].message.content


def test_responses_tool_loop_streamed(server, want):
    """The call made, its output sent back as items, the answer (no more calls:
    tool_choice none) streamed through the SDK's accumulating helper: the text chat
    completions gives for that conversation."""
    tool = {"type": "function", "name": "get_weather", "description": "Get the current weather in a city",
            "parameters": SCHEMA}  # fmt: skip
    client = server.client()
    with client.responses.stream(model="x", input=ASK, tools=[tool], temperature=0, max_output_tokens=60) as stream:
        first = stream.get_final_response()
    (call,) = [o for o in first.output if o.type == "function_call"]
    assert json.loads(call.arguments) == want
    items = [{"role": "user", "content": ASK},
             {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
             {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}]  # fmt: skip
    with client.responses.stream(model="x", input=items, tools=[tool], tool_choice="none", temperature=0,
                                 max_output_tokens=30) as stream:  # fmt: skip
        events = list(stream)
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    last = events[-1]  # response.completed, or response.incomplete where the 30 tokens ran out
    assert last.type in ("response.completed", "response.incomplete")
    answer = _chat_answer(server, call.call_id, json.loads(call.arguments))
    assert "".join(deltas) == last.response.output_text == answer and answer


def test_messages_tool_loop_streamed(server, want):
    tool = {"name": "get_weather", "description": "Get the current weather in a city", "input_schema": SCHEMA}
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{server.port}", api_key="none", max_retries=0, timeout=120)
    with client.messages.stream(model="x", max_tokens=60, tools=[tool], extra_body=GREEDY,
                                messages=[{"role": "user", "content": ASK}]) as stream:  # fmt: skip
        first = stream.get_final_message()
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert use.input == want
    conversation = [{"role": "user", "content": ASK}, {"role": "assistant", "content": first.content},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                  "content": "sunny, 21 C"}]}]  # fmt: skip
    with client.messages.stream(model="x", max_tokens=30, tools=[tool], tool_choice={"type": "none"},
                                extra_body=GREEDY, messages=conversation) as stream:  # fmt: skip
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    answer = _chat_answer(server, use.id, use.input)
    assert text == answer and final.content[0].text == answer and final.stop_reason in ("end_turn", "max_tokens")
