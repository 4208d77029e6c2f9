"""Llama 3.1 / 3.2 / 3.3 JSON calls: the reply is the call, a JSON object with the
arguments under ``parameters`` (several separated by ``;``), optionally after the
``<|python_tag|>`` token:

    {"name": "get_weather", "parameters": {"city": "Paris"}}
"""

from __future__ import annotations

import json

from .base import (
    ParseFailure,
    call_from_object,
    call_object_schema,
    json_reply_calls,
    json_values,
    lark_json,
    special_token_id,
)
from .format import ToolFormat


class Llama3(ToolFormat):
    name = "llama3"
    description = 'Llama 3.x: {"name": ..., "parameters": {...}} (optionally after <|python_tag|>)'
    start = "<|python_tag|>"
    end = ""
    reply_may_be_call = True
    markers = ("<|python_tag|>", '"parameters": dictionary of argument name')
    architectures = ()

    def parse_block(self, body, tools):
        raw = self.start + body
        try:
            values = json_values(body)
        except ValueError as e:
            return [ParseFailure(raw, f"the call is {e}")]
        if not values:
            return [ParseFailure(raw, "no call follows <|python_tag|>")]
        return [call_from_object(o, tools, raw) for v in values for o in (v if isinstance(v, list) else [v])]

    def parse_reply_json(self, text, tools):
        return json_reply_calls(text, tools, ("parameters", "arguments"))

    def render(self, calls):
        return "; ".join(json.dumps({"name": c.name, "parameters": c.arguments}, ensure_ascii=False) for c in calls)

    def grammar(self, tools, tokenizer=None, parallel=True):
        tag = special_token_id(self.start, tokenizer)
        lead = f"<[{tag}]>?" if tag is not None else ""
        one = lark_json(call_object_schema(tools, "parameters"))
        more = ' ("; " call)*' if parallel else ""
        return f'start: {lead} call{more}\ncall: {one}\n'

    def triggers(self, tokenizer=None):
        from ..grammar import Trigger

        tag = special_token_id(self.start, tokenizer)
        out = [Trigger(pattern=r"^\s*(\{)")]  # a reply that opens with an object is the call
        if tag is not None:
            out.append(Trigger(token=tag))
        return out
