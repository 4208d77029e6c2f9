"""``tool_choice: required`` ends: the calls of a reply close after the calls the request
allows (one without ``parallel_tool_calls``; else up to the first exact repeat, which is
dropped), within the token budget, and complete calls are returned even from a reply cut
short; call markup never reaches the text. On the default model (SmolLM2-135M, whose
template knows no tools: the generic JSON format), through the chat coordinator, `cera run`
(the server: tests/serve/test_required_calls_serve.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest

import cera
from cera.generation.sink import FinishReason
from cera.tools import Generic, Hermes, Mistral, ReplySplitter, normalize_tools

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TOOLS = normalize_tools([WEATHER])
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


def split(fmt, text, drop_repeats=False):
    s = ReplySplitter(fmt, TOOLS, drop_repeats=drop_repeats)
    s.feed(text)
    s.finish()
    return s.result()


# -- the parser, on replies as the default model wrote them -----------------------------------


def test_a_cut_generic_reply_keeps_its_complete_calls_and_no_markup_in_the_text():
    text = '{"tool_calls": [' + CALL + ", " + CALL.replace("Paris", "Lyon") + ', {"name": "get_weather", "argu'
    r = split(Generic(), text)
    assert [(c.name, c.arguments) for c in r.calls] == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Lyon"})]
    assert r.content == ""
    (failure,) = r.failures
    assert failure.raw.startswith('{"name": "get_weather", "argu') and "cut" in failure.reason


def test_a_cut_array_reply_keeps_its_complete_calls():
    r = split(Mistral(), "[TOOL_CALLS][" + CALL + ", {\"name\": \"get_wea")
    assert [c.arguments for c in r.calls] == [{"city": "Paris"}] and r.content == "" and len(r.failures) == 1


@pytest.mark.parametrize("fmt, text", [
    (Generic(), '{"tool_calls": [' + CALL + ", " + CALL + "]}"),
    (Hermes(), f"<tool_call>\n{CALL}\n</tool_call>\n<tool_call>\n{CALL}\n</tool_call>"),
], ids=["generic", "hermes"])  # fmt: skip
def test_a_call_repeated_exactly_in_one_reply_is_made_once(fmt, text):
    r = split(fmt, text, drop_repeats=True)  # as a call grammar that ends at the first repeat reads it
    assert [(c.name, c.arguments) for c in r.calls] == [("get_weather", {"city": "Paris"})]
    assert not r.failures and r.content == ""
    assert len(split(fmt, text).calls) == 2  # free calls stand as the model wrote them


def test_the_repeat_scanner_sees_a_repeated_call():
    from cera.grammar.call_repeats import CallRepeats

    g = CallRepeats()
    assert not g.feed(b'{"tool_calls": [' + CALL.encode())
    assert not g.feed(b', {"name": "get_weather", "arguments": {"city": "Lyon"}}')
    assert not g.feed(b', {"name": "get_weather", "arguments": {"city": "Pa')
    assert g.feed(b'ris"}}')


# -- the default model --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    loaded = cera.load(smollm2_path, device="cpu", threads=2, quiet=True)
    yield loaded
    loaded.close()


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "one-call"])
def test_required_ends_with_calls_before_the_limit(smollm2, parallel):
    chat = smollm2.chat(tools=[WEATHER])
    chat.ingest("What's the weather in Paris?")
    turn = chat.complete(temperature=0, max_tokens=256, tool_choice="required", parallel_tool_calls=parallel)
    assert turn.tool_calls, turn.raw
    assert turn.finish_reason in (FinishReason.GRAMMAR, FinishReason.STOP_TOKEN), turn.raw
    assert turn.usage.completion_tokens < 256
    assert turn.openai_finish_reason == "tool_calls"
    for c in turn.tool_calls:
        jsonschema.validate(c.arguments, WEATHER["function"]["parameters"])
    keys = [json.dumps([c.name, c.arguments], sort_keys=True) for c in turn.tool_calls]
    assert len(set(keys)) == len(keys)
    if not parallel:
        assert len(turn.tool_calls) == 1
    assert "tool_calls" not in turn.text and not turn.parse_failures


def test_required_under_a_small_budget_still_returns_a_whole_call(smollm2):
    chat = smollm2.chat(tools=[WEATHER])
    chat.ingest("What's the weather in Paris?")
    turn = chat.complete(temperature=0.9, seed=3, max_tokens=40, tool_choice="required")
    assert turn.tool_calls and turn.usage.completion_tokens <= 40 and not turn.parse_failures, turn.raw
    json.loads(turn.raw)  # the reply is one whole JSON value


def test_cera_run_required_prints_the_call(smollm2_path, tmp_path):
    tools = tmp_path / "weather.json"
    tools.write_text(json.dumps([WEATHER]))
    r = subprocess.run([sys.executable, "-m", "cera_cli.main", "run", "-m", str(smollm2_path), "-t", "2", "--tools",
                        f"@{tools}", "--tool-choice", "required", "--temp", "0", "What's the weather in Paris?"],
                       capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr
    calls = json.loads(r.stdout)
    assert calls and all(c["name"] == "get_weather" and c["arguments"].get("city") for c in calls), r.stdout
    assert "stop: length" not in r.stderr

