"""The generic format, for models whose chat template knows nothing of tools: cera tells
the model about the tools in the system message and asks for a reply of one JSON object,

    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}

to call them (any other reply is the answer)."""

from __future__ import annotations

import json
import re

from .base import (
    ParseFailure,
    call_from_object,
    call_object_schema,
    cut_array_calls,
    json_values,
    lark_json,
    strip_fence,
)
from .format import ToolFormat

_CALLS_OPEN = re.compile(r'\s*\{\s*"tool_calls"\s*:\s*\[')


class Generic(ToolFormat):
    name = "generic"
    description = 'generic JSON: {"tool_calls": [{"name": ..., "arguments": {...}}]}'
    start = end = ""
    reply_may_be_call = True
    markers = ()
    architectures = ()

    @classmethod
    def detect(cls, template):
        return False

    def parse_block(self, body, tools):
        items = self.parse_reply_json(body, tools)
        return items if items is not None else [ParseFailure(body, "the reply is not a tool_calls object")]

    def parse_reply_json(self, text, tools):
        try:
            values = json_values(text)
        except ValueError:
            return None
        if len(values) != 1 or not isinstance(values[0], dict):
            return None
        obj = values[0]
        if "tool_calls" in obj:
            calls = obj["tool_calls"]
            if not isinstance(calls, list) or not calls:
                return [ParseFailure(text, "tool_calls must be a non-empty list of {name, arguments} objects")]
            return [call_from_object(c, tools, text) for c in calls]
        if "tool_call" in obj:
            return [call_from_object(obj["tool_call"], tools, text)]
        names = {t.name for t in tools}
        if obj.get("name") in names and "arguments" in obj:
            return [call_from_object(obj, tools, text)]
        return None

    def parse_cut(self, text, tools):
        m = _CALLS_OPEN.match(strip_fence(text))
        return cut_array_calls(strip_fence(text), tools, m.end() - 1) if m else None

    def render(self, calls):
        return json.dumps(
            {"tool_calls": [{"name": c.name, "arguments": c.arguments} for c in calls]}, ensure_ascii=False
        )

    def grammar(self, tools, tokenizer=None, parallel=True):
        calls = {"type": "array", "items": call_object_schema(tools), "minItems": 1, **({} if parallel else {"maxItems": 1})}
        schema = {
            "type": "object",
            "properties": {"tool_calls": calls},
            "required": ["tool_calls"],
            "additionalProperties": False,
        }
        return f"start: {lark_json(schema)}\n"

    def triggers(self, tokenizer=None):
        from ..grammar import Trigger

        return [Trigger(pattern=r"^\s*(\{)")]

    def system_prompt(self, tools):
        listed = "\n".join(json.dumps(t.to_openai()["function"], ensure_ascii=False) for t in tools)
        return (
            "You can call these tools:\n"
            f"{listed}\n"
            "To call tools, reply with only this JSON object and nothing else: "
            '{"tool_calls": [{"name": "<tool name>", "arguments": {<arguments>}}]}. '
            "Otherwise, answer normally."
        )
