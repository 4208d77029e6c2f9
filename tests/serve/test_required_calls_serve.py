"""``tool_choice: required`` through `cera serve` on the default model (SmolLM2-135M, the
generic JSON format): the reply ends with ``tool_calls`` and finish reason ``tool_calls``,
no call markup in ``content``; ``parallel_tool_calls: false`` gives one call."""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai", reason="the openai package is not installed (pip install openai)")
pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e ./cera-serve)")

from test_openai_client import ServerThread  # noqa: E402 - the serve tests share their server harness

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]


def test_required_returns_tool_calls_and_no_markup(loaded):
    with ServerThread(loaded, parallel=1, n_ctx=2048) as s:
        client = s.client()
        r = client.chat.completions.create(model="x", messages=ASK, tools=[WEATHER], tool_choice="required",
                                           temperature=0, max_tokens=256)  # fmt: skip
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls, choice.message
        assert all(c.function.name == "get_weather" for c in choice.message.tool_calls)
        assert not choice.message.content or "tool_calls" not in choice.message.content
        assert r.usage.completion_tokens < 256
        r = client.chat.completions.create(model="x", messages=ASK, tools=[WEATHER], tool_choice="required",
                                           temperature=0, max_tokens=256, parallel_tool_calls=False)  # fmt: skip
        assert len(r.choices[0].message.tool_calls) == 1 and r.choices[0].finish_reason == "tool_calls"
        stream = client.chat.completions.create(model="x", messages=ASK, tools=[WEATHER], tool_choice="required",
                                                temperature=0, max_tokens=256, stream=True)  # fmt: skip
        text, calls, reasons = [], [], []
        for chunk in stream:
            if chunk.choices:
                text.append(chunk.choices[0].delta.content or "")
                calls += chunk.choices[0].delta.tool_calls or []
                reasons.append(chunk.choices[0].finish_reason)
        assert calls and "".join(text) == "" and reasons[-1] == "tool_calls"
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="x", messages=ASK, tools=[WEATHER], tool_choice="required",
                                           extra_body={"parallel_tool_calls": "yes"})  # fmt: skip
