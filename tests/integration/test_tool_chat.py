"""The chat coordinator on real files: phases and their rules, delta-only turns (counted in
evaluated tokens and checked against a fresh render of the whole conversation), tool calls
from Qwen2.5-Coder (Hermes) that validate against their schemas, tool_choice, streaming
without markup, parse failures as data, and LFM2's pythonic format on the tiny LFM2 model
under a template written in LFM2's shape."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import jsonschema
import pytest
from llama_arithmetic import skip_unless_llama_cpp_arithmetic

import cera
from cera.chat.session import ChatSession, Phase, PhaseError, TurnEnd
from cera.text.chat_template import ChatTemplate
from cera.grammar import Constraint
from cera.generation.sink import FinishReason
from cera.tools import TextDelta, ToolCallEvent, ToolError

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a time zone",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
    },
}
TINY_LFM2 = Path(__file__).parents[1] / "models" / "reference" / "tiny" / "tiny-lfm2.gguf"


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    loaded = cera.load(smollm2_path, device="cpu", threads=2)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def qwen(qwen05_path):
    loaded = cera.load(qwen05_path, device="cpu", threads=2)
    yield loaded
    loaded.close()


def fresh_render_ids(chat: ChatSession) -> list[int]:
    """The whole conversation rendered by the template itself and tokenized."""
    tok = chat.tokenizer
    text = chat.template.render(chat.messages, add_generation_prompt=True)
    bos = tok.token_text(tok.bos_id) if tok.bos_id is not None else None
    if tok.add_bos and bos and text.startswith(bos):
        text = text[len(bos) :]
    return tok.encode(text, add_special=True, parse_special=True)


# -- phases ----------------------------------------------------------------------------------


def test_phase_rules(smollm2):
    chat = smollm2.chat(system="You are terse.", n_ctx=1024)
    assert chat.phase == Phase.IDLE
    with pytest.raises(PhaseError, match="ingest a message first"):
        chat.complete(temperature=0)
    chat.ingest("Name three colours.")
    assert chat.phase == Phase.PROMPT_READY
    r = chat.complete(temperature=0, max_tokens=0)  # writes nothing: the prompt waits for a retry
    assert r.usage.completion_tokens == 0 and chat.phase == Phase.PROMPT_READY
    r = chat.complete(temperature=0, max_tokens=3)
    assert r.finish_reason == FinishReason.LENGTH and chat.phase == Phase.INTERRUPTED
    cut = r.raw
    r2 = chat.complete(temperature=0, max_tokens=200)  # continues the same reply
    assert r2.finish_reason == FinishReason.STOP_TOKEN and chat.phase == Phase.TURN_COMPLETE
    assert r2.raw.startswith(cut) and chat.messages[-1] == {"role": "assistant", "content": r2.text}
    with pytest.raises(PhaseError, match="finished its turn"):
        chat.complete(temperature=0)
    with pytest.raises(PhaseError, match="none to answer"):
        chat.ingest_tool_response("call_x", "42")
    # one call straight through gives the reply the cut-and-continued one gave
    again = smollm2.chat(system="You are terse.", n_ctx=1024)
    again.ingest("Name three colours.")
    assert again.complete(temperature=0, max_tokens=200).raw == r2.raw


def test_stop_strings_and_cancel_interrupt_and_ingest_closes_the_cut_reply(smollm2):
    skip_unless_llama_cpp_arithmetic(smollm2, "the reply this test cuts")
    chat = smollm2.chat(n_ctx=1024)
    chat.ingest("Count from one to twenty in words, separated by commas.")
    r = chat.complete(temperature=0, stop=[" "])
    assert r.finish_reason == FinishReason.STOP_STRING and chat.phase == Phase.INTERRUPTED
    chat.ingest("Stop there.")
    assert chat.phase == Phase.PROMPT_READY
    assert [m["role"] for m in chat.messages] == ["user", "assistant", "user"]
    assert chat.messages[1]["content"] == r.text
    stream = chat.stream(temperature=0, max_tokens=50)
    first = next(stream)
    assert chat.phase == Phase.GENERATING
    with pytest.raises(PhaseError, match="being generated"):
        chat.ingest("hello?")
    chat.cancel()
    rest = list(stream)
    assert isinstance(first, TextDelta) and isinstance(rest[-1], TurnEnd)
    assert rest[-1].result.finish_reason == FinishReason.CANCELLED and chat.phase == Phase.INTERRUPTED


def test_a_stream_abandoned_midway_leaves_the_reply_interrupted(smollm2):
    chat = smollm2.chat(n_ctx=512)
    chat.ingest("Tell me about the sea.")
    stream = chat.stream(temperature=0, max_tokens=40)
    next(stream)
    next(stream)
    stream.close()
    assert chat.phase == Phase.INTERRUPTED
    r = chat.complete(temperature=0, max_tokens=5)
    assert r.finish_reason == FinishReason.LENGTH


def test_recovery_by_checkpoint_reset_and_history(smollm2, tmp_path):
    chat = smollm2.chat(n_ctx=1024)
    chat.ingest("Say one word.")
    cp = chat.checkpoint()
    first = chat.complete(temperature=0, max_tokens=30)
    chat.restore(cp)
    assert chat.phase == Phase.PROMPT_READY
    assert chat.complete(temperature=0, max_tokens=30).raw == first.raw
    chat.save(tmp_path / "chat.cera")
    chat.reset()
    assert chat.phase == Phase.IDLE and chat.messages == [] and chat.session.n_tokens == 0
    loaded = ChatSession.load(smollm2.new_session(n_ctx=1024), tmp_path / "chat.cera")
    assert loaded.phase == Phase.TURN_COMPLETE and loaded.messages[-1]["content"] == first.text
    loaded.replace_history([{"role": "user", "content": "Say another word."}])
    assert loaded.phase == Phase.PROMPT_READY
    r = loaded.complete(temperature=0, max_tokens=30)
    assert r.usage.evaluated_tokens < r.usage.prompt_tokens  # the shared template start was kept


# -- delta-only turns ---------------------------------------------------------------------------


def test_each_turn_evaluates_only_the_new_messages(smollm2):
    skip_unless_llama_cpp_arithmetic(smollm2, "the replies this test ends on their end-of-turn")
    chat = smollm2.chat(system="You are a helpful assistant.", n_ctx=2048)
    s = chat.session
    held_before = 0
    for turn, text in enumerate(["Hi! What is 2+2?", "And 3+3?", "Thanks. Name a fruit."]):
        chat.ingest(text)
        before = s.n_evaluated
        r = chat.complete(temperature=0, max_tokens=60)
        assert r.finish_reason == FinishReason.STOP_TOKEN, r
        # what the session evaluated for the prompt is exactly what the whole conversation
        # (rendered fresh by the template) adds to what it held
        full = fresh_render_ids(_without_last_reply(chat))
        assert r.usage.prompt_tokens == len(full)
        assert r.usage.evaluated_tokens == len(full) - held_before, f"turn {turn}"
        if turn:
            assert r.usage.evaluated_tokens < 40 < len(full)  # the earlier turns were not evaluated again
        # every reply token was evaluated (the end-of-turn token was chosen from the last one's logits)
        assert s.n_evaluated - before == r.usage.evaluated_tokens + r.usage.completion_tokens
        held_before = len(s.tokens) + len(s.pending)
    assert s.tokens + s.pending == fresh_render_ids(chat)[: len(s.tokens) + len(s.pending)]


def _without_last_reply(chat):
    """A view of the chat as it stood before its last reply (for rendering)."""

    class View:
        tokenizer, template = chat.tokenizer, chat.template
        messages = chat.messages[:-1]

    return View


def test_a_template_that_rewrites_earlier_turns_is_refused(smollm2):
    # a template that numbers the messages from the end: every new message changes the old ones
    src = "{% for m in messages %}<|im_start|>{{ m.role }} {{ messages|length - loop.index0 }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    with pytest.raises(cera.errors.TemplateError, match="allow_reevaluation=True"):
        ChatSession(smollm2.new_session(n_ctx=256), template=ChatTemplate(src))
    chat = ChatSession(smollm2.new_session(n_ctx=512), template=ChatTemplate(src), allow_reevaluation=True)
    chat.ingest("Hi")
    chat.complete(temperature=0, max_tokens=5)
    chat.ingest("Again")
    r = chat.complete(temperature=0, max_tokens=5)
    assert r.usage.evaluated_tokens > 5  # re-evaluated from the first difference, as asked


# -- tools on Qwen2.5-Coder -----------------------------------------------------------------------


def _schema(tool):
    return tool["function"]["parameters"]


def test_qwen_calls_a_tool_and_the_arguments_validate(qwen):
    chat = qwen.chat(tools=[WEATHER, TIME], n_ctx=2048)
    assert chat.tool_format.name == "hermes" and chat.profile.renders_tools and chat.profile.renders_tool_role
    chat.ingest("What's the weather in Paris?")
    events = list(chat.stream(temperature=0))
    result = events[-1].result
    assert [c.name for c in result.tool_calls] == ["get_weather"]
    call = result.tool_calls[0]
    jsonschema.validate(call.arguments, _schema(WEATHER))
    assert call.arguments["city"] == "Paris"
    assert result.openai_finish_reason == "tool_calls"
    streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert "get_weather" not in streamed and "<tool_call>" not in streamed  # the call is an event, not text
    assert [e.call for e in events if isinstance(e, ToolCallEvent)] == list(result.tool_calls)
    # the tool result: only it and the next generation prompt are evaluated
    chat.ingest_tool_response(call.id, {"temperature": 18, "sky": "cloudy"})
    assert chat.messages[-1] == {
        "role": "tool",
        "tool_call_id": call.id,
        "name": "get_weather",
        "content": '{"temperature": 18, "sky": "cloudy"}',
    }
    r2 = chat.complete(temperature=0, max_tokens=60)
    tail = chat.template.render(chat.messages[:-1], add_generation_prompt=True).rsplit("<|im_start|>user", 1)[1]
    expected = 2 + len(qwen.tokenizer.encode("<|im_start|>user" + tail, add_special=False, parse_special=True))
    assert r2.usage.evaluated_tokens == expected  # <|im_end|>\n, then the tool turn and the header


def test_tool_choice_required_named_and_none(qwen):
    chat = qwen.chat(tools=[WEATHER, TIME], n_ctx=2048)
    chat.ingest("Hello! How are you today?")
    r = chat.complete(temperature=0, tool_choice="required", max_tokens=80)
    assert r.tool_calls and not r.parse_failures
    for c in r.tool_calls:
        jsonschema.validate(c.arguments, _schema({"get_weather": WEATHER, "get_time": TIME}[c.name]))
    chat = qwen.chat(tools=[WEATHER, TIME], n_ctx=2048)
    chat.ingest("What's the weather in Paris?")
    r = chat.complete(temperature=0, tool_choice={"type": "function", "function": {"name": "get_time"}}, max_tokens=80)
    assert [c.name for c in r.tool_calls] == ["get_time"] and "zone" in r.tool_calls[0].arguments
    chat = qwen.chat(tools=[WEATHER], n_ctx=2048)
    chat.ingest("What's the weather in Paris?")
    r = chat.complete(temperature=0, tool_choice="none", max_tokens=60)
    assert r.tool_calls == () and "<tool_call>" not in r.raw
    chat = qwen.chat(tools=[WEATHER], n_ctx=2048)
    chat.ingest("hi")
    with pytest.raises(ToolError, match="not one of the tools"):
        chat.complete(tool_choice="get_time")
    with pytest.raises(ToolError, match="no other grammar"):
        chat.complete(tool_choice="required", json=True)


def test_constrained_calls_enforce_required_arguments(qwen):
    """A tool whose required argument the question does not suggest: unconstrained, the
    reply may leave it out; constrained, every call has it and validates."""
    tool = {
        "type": "function",
        "function": {
            "name": "book_table",
            "description": "Book a restaurant table",
            "parameters": {
                "type": "object",
                "properties": {
                    "restaurant": {"type": "string"},
                    "people": {"type": "integer", "minimum": 1},
                    "time": {"type": "string"},
                },
                "required": ["restaurant", "people", "time"],
            },
        },
    }
    chat = qwen.chat(tools=[tool], n_ctx=2048)
    chat.ingest("Book me a table at Chez Paul.")
    r = chat.complete(temperature=0, constrain_tools=True, max_tokens=120)
    assert r.tool_calls, r.raw
    for c in r.tool_calls:
        jsonschema.validate(c.arguments, _schema(tool))


def test_a_malformed_call_is_a_failure_in_the_result(qwen):
    chat = qwen.chat(tools=[WEATHER], n_ctx=2048)
    chat.ingest("What's the weather in Paris?")
    # hold the model to a call with arguments that are not JSON, through the real pipeline
    bad = Constraint.lark(
        'start: <[151657]> "\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": {city: Paris}}\\n" <[151658]>'
    )
    events = list(chat.stream(temperature=0, grammar=bad, max_tokens=40))
    result = events[-1].result
    assert result.tool_calls == () and len(result.parse_failures) == 1
    assert "not valid JSON" in result.parse_failures[0].reason
    assert result.finish_reason == FinishReason.GRAMMAR and chat.phase == Phase.TURN_COMPLETE
    assert not any(isinstance(e, TextDelta) and "tool_call" in e.text for e in events)


# -- LFM2's pythonic format -----------------------------------------------------------------------

# A template in LFM2's shape (written for this test): tools listed as JSON between
# <|tool_list_start|> and <|tool_list_end|> in the system turn, ChatML turns.
LFM2_STYLE = (
    "{{ bos_token }}{% set sys = [] %}{% if messages[0].role == 'system' %}{% set sys = [messages[0].content] %}{% set messages = messages[1:] %}{% endif %}"
    "{% if tools %}{% set sys = sys + ['List of tools: <|tool_list_start|>' + (tools | tojson) + '<|tool_list_end|>'] %}{% endif %}"
    "{% if sys %}<|im_start|>system\n{{ sys | join('\n') }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'tool' %}<|tool_response_start|>{{ m.content }}<|tool_response_end|>{% else %}{{ m.content }}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# Finite arguments, so that a random-weight model held by the grammar ends its call.
CITY_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"enum": ["Paris", "Oslo"]}, "metric": {"type": "boolean"}},
            "required": ["city"],
        },
    },
}


def test_lfm2_pythonic_calls_on_the_tiny_model():
    loaded = cera.load(str(TINY_LFM2), device="cpu", threads=2)
    try:
        session = loaded.new_session(n_ctx=512)
        chat = ChatSession(
            session, tools=[CITY_WEATHER], template=ChatTemplate(LFM2_STYLE, bos_token="<|startoftext|>")
        )
        assert chat.tool_format.name == "pythonic"
        chat.ingest("What's the weather in Paris?")
        # random weights: only the grammar makes this a call; it must parse and validate
        r = chat.complete(temperature=0, tool_choice="required", max_tokens=200)
        assert r.finish_reason in (FinishReason.STOP_TOKEN, FinishReason.GRAMMAR), r
        assert len(r.tool_calls) >= 1 and not r.parse_failures, r.raw
        assert r.raw.startswith("<|tool_call_start|>[get_weather(") and r.raw.endswith("<|tool_call_end|>")
        for c in r.tool_calls:
            jsonschema.validate(c.arguments, _schema(CITY_WEATHER))
        chat.ingest_tool_response(r.tool_calls[0].id, "sunny")
        assert "<|tool_response_start|>sunny<|tool_response_end|>" in chat.render()
    finally:
        loaded.close()


def test_stream_json_on_a_chat(smollm2):
    chat = smollm2.chat(n_ctx=1024)
    chat.ingest("Give a JSON object with a key 'colour' naming a colour.")
    schema = {"type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]}
    text = "".join(chat.stream_json(schema, temperature=0, max_tokens=60))
    jsonschema.validate(json.loads(text), schema)
    assert chat.phase == Phase.TURN_COMPLETE


def test_chat_from_two_threads_is_refused_while_generating(smollm2):
    chat = smollm2.chat(n_ctx=512)
    chat.ingest("Write a long story.")
    errors = []
    stream = chat.stream(temperature=0, max_tokens=30)
    next(stream)

    def other():
        try:
            chat.complete(temperature=0)
        except PhaseError as e:
            errors.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    list(stream)
    assert errors and "already being generated" in str(errors[0])
