"""Hermes-style calls (Qwen 2.5, Qwen 3, Hermes 2/3, and templates that copy them): each
call a JSON object in its own block,

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

several blocks one after another for parallel calls. Small Qwen models often leave the tags
out and reply with the bare object: a reply that is only call objects naming declared tools
is read as calls too (and the call grammar allows that form)."""

from __future__ import annotations

import json

from .base import (
    ParseFailure,
    call_from_object,
    call_object_schema,
    json_reply_calls,
    json_values,
    lark_json,
    lark_literal,
)
from .format import ToolFormat


class Hermes(ToolFormat):
    name = "hermes"
    description = "Hermes / Qwen: <tool_call>{json}</tool_call> blocks"
    start, end = "<tool_call>", "</tool_call>"
    reply_may_be_call = True
    markers = ("<tool_call>",)
    architectures = ("qwen2", "qwen2moe", "qwen3", "qwen3moe")

    def parse_block(self, body, tools):
        raw = self.start + body + self.end
        try:
            values = json_values(body)
        except ValueError as e:
            return [ParseFailure(raw, f"the call is {e}")]
        if not values:
            return [ParseFailure(raw, "the call block is empty")]
        items = []
        for v in values:
            for obj in v if isinstance(v, list) else [v]:
                items.append(call_from_object(obj, tools, raw))
        return items

    def parse_reply_json(self, text, tools):
        return json_reply_calls(text, tools)

    def render(self, calls):
        return "\n".join(
            f"{self.start}\n{json.dumps({'name': c.name, 'arguments': c.arguments}, ensure_ascii=False)}\n{self.end}"
            for c in calls
        )

    def grammar(self, tools, tokenizer=None, parallel=True):
        open_, close = lark_literal(self.start, tokenizer), lark_literal(self.end, tokenizer)
        one = lark_json(call_object_schema(tools))
        return (
            ("start: call (SEP call)* | bare\n" if parallel else "start: call | bare\n") +
            f'call: {open_} "\\n" {one} "\\n" {close}\n'
            f"bare: {one}\n"
            "SEP: /[ \\t\\n]{0,3}/\n"
        )

    def triggers(self, tokenizer=None):
        from ..grammar import Trigger

        return [*super().triggers(tokenizer), Trigger(pattern=r"^\s*(\{)")]
