"""OpenAI's Responses API and Anthropic's Messages API through their official clients
(`openai`, `anthropic`) on SmolLM2: the text equals what chat completions (checked against
llama.cpp elsewhere) gives for the same conversation, streamed and not; token limits, stop
sequences, unknown models, keys and tool results in the conversation come back in each
API's own shape."""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai", reason="the openai package is not installed (pip install openai)")
anthropic = pytest.importorskip("anthropic", reason="the anthropic package is not installed (pip install anthropic)")
pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e ./cera-serve)")

from test_openai_client import ServerThread  # noqa: E402 - the serve tests share their server harness

SYSTEM = "You are a helpful assistant. Answer briefly."
ASK = "What is the capital of France?"
GREEDY = {"temperature": 0}  # the anthropic client has no sampling arguments of its own now


@pytest.fixture(scope="module")
def server(loaded):
    with ServerThread(loaded, parallel=2, n_ctx=512) as s:
        yield s


def chat(server, messages, n, **kw) -> tuple[str, str]:
    r = server.client().chat.completions.create(model="x", messages=messages, max_tokens=n, temperature=0, **kw)
    return r.choices[0].message.content, r.choices[0].finish_reason


def claude(server, key="none"):
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{server.port}", api_key=key, max_retries=0, timeout=120)


# -- Responses ------------------------------------------------------------------------------------


def test_responses_text_equals_chat_completions(server):
    want, reason = chat(server, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ASK}], 12)
    r = server.client().responses.create(model="x", instructions=SYSTEM, input=ASK, max_output_tokens=12,
                                         temperature=0)  # fmt: skip
    assert r.output_text == want and r.model == "x" and r.object == "response"
    assert r.status == ("incomplete" if reason == "length" else "completed")
    if reason == "length":
        assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 12 if reason == "length" else r.usage.output_tokens <= 12
    assert r.usage.input_tokens > 5


def test_responses_stream_events_add_up(server):
    want, _ = chat(server, [{"role": "user", "content": ASK}], 10)
    client = server.client()
    events = list(client.responses.create(model="x", input=ASK, max_output_tokens=10, temperature=0, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == want
    assert events[-1].response.output_text == want
    # the SDK's accumulating helper understands the same events
    with client.responses.stream(model="x", input=ASK, max_output_tokens=10, temperature=0) as stream:
        seen = list(stream)
    assert "".join(e.delta for e in seen if e.type == "response.output_text.delta") == want
    assert seen[-1].type == kinds[-1] and seen[-1].response.output_text == want
    if seen[-1].type == "response.completed":
        assert stream.get_final_response().output_text == want


def test_responses_items_carry_function_calls_and_outputs(server):
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]  # fmt: skip
    want, _ = chat(server, messages, 10)
    items = [{"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
             {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
             {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"}]  # fmt: skip
    r = server.client().responses.create(model="x", input=items, max_output_tokens=10, temperature=0)
    assert r.output_text == want


def test_responses_refusals(server):
    client = server.client()
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model="gpt-4o", input="hi")
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        client.responses.create(model="x", input="hi", previous_response_id="resp_123")
    with pytest.raises(openai.BadRequestError, match="only function tools"):
        client.responses.create(model="x", input="hi", tools=[{"type": "web_search"}])


# -- Messages -------------------------------------------------------------------------------------


def test_messages_text_equals_chat_completions(server):
    want, reason = chat(server, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ASK}], 12)
    m = claude(server).messages.create(model="x", system=SYSTEM, max_tokens=12, extra_body=GREEDY,
                                       messages=[{"role": "user", "content": ASK}])  # fmt: skip
    assert m.type == "message" and m.role == "assistant" and m.model == "x"
    assert [b.type for b in m.content] == ["text"] and m.content[0].text == want
    assert m.stop_reason == ("max_tokens" if reason == "length" else "end_turn") and m.stop_sequence is None
    assert m.usage.output_tokens <= 12 and m.usage.input_tokens > 5


def test_messages_stream(server):
    want, _ = chat(server, [{"role": "user", "content": ASK}], 10)
    with claude(server).messages.stream(model="x", max_tokens=10, extra_body=GREEDY,
                                        messages=[{"role": "user", "content": ASK}]) as stream:  # fmt: skip
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == want and final.content[0].text == want and final.usage.output_tokens > 0


def test_messages_stop_sequence_is_named(server):
    full, _ = chat(server, [{"role": "user", "content": ASK}], 16)
    words = full.split()
    assert len(words) >= 3, full
    stop = " " + words[2]
    m = claude(server).messages.create(model="x", max_tokens=16, extra_body=GREEDY, stop_sequences=[stop, "zzzz"],
                                       messages=[{"role": "user", "content": ASK}])  # fmt: skip
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert m.content[0].text == full[: full.index(stop)]


def test_messages_tool_results_in_the_conversation(server):
    call = {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    want, _ = chat(server, [{"role": "user", "content": "Weather in Paris?"},
                            {"role": "assistant", "content": None, "tool_calls": [call]},
                            {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"}], 10)  # fmt: skip
    m = claude(server).messages.create(model="x", max_tokens=10, extra_body=GREEDY, messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                            "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]},
    ])  # fmt: skip
    assert m.content[0].text == want


def test_messages_errors_take_anthropics_shape(server):
    client = claude(server)
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.create(model="claude-3-5-sonnet", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model="x", max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}])  # fmt: skip
    assert "not supported" in e.value.body["error"]["message"]


def test_messages_accept_x_api_key(loaded):
    with ServerThread(loaded, parallel=1, n_ctx=256, api_key="sekret") as s:
        m = claude(s, key="sekret").messages.create(model="x", max_tokens=2, messages=[{"role": "user", "content": "hi"}])
        assert m.usage.output_tokens >= 1
        with pytest.raises(anthropic.AuthenticationError):
            claude(s, key="wrong").messages.create(model="x", max_tokens=2, messages=[{"role": "user", "content": "hi"}])
