"""Formats whose calls are one JSON array after a marker, running to the end of the reply:
Mistral (``[TOOL_CALLS][{"name": ..., "arguments": {...}}]``; its newer templates write
``[TOOL_CALLS]name[ARGS]{...}`` per call, which is read as well) and IBM Granite 3
(``<|tool_call|>[...]``)."""

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
    lark_literal,
)
from .format import ToolFormat

_ARGS = "[ARGS]"
_NAME_ARGS = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.\-]*)\s*(?:\[CALL_ID\]\s*\S+?\s*)?\[ARGS\]")


class JsonArray(ToolFormat):
    def parse_block(self, body, tools):
        raw = self.start + body
        if _ARGS in body:
            return self._name_args(body, tools)
        try:
            values = json_values(body)
        except ValueError as e:
            lead = len(body) - len(body.lstrip())
            cut = cut_array_calls(body, tools, lead) if body[lead : lead + 1] == "[" else None
            return cut if cut is not None else [ParseFailure(raw, f"the calls are {e}")]
        if not values:
            return [ParseFailure(raw, "no call follows the marker")]
        items = []
        for v in values:
            for obj in v if isinstance(v, list) else [v]:
                items.append(call_from_object(obj, tools, raw))
        return items

    def _name_args(self, body, tools):
        """``name[ARGS]{json}`` repeated (each call after its own marker, or in a row)."""
        items, decoder, i = [], json.JSONDecoder(), 0
        while i < len(body) and body[i:].strip():
            if body.startswith(self.start, i):
                i += len(self.start)
            m = _NAME_ARGS.match(body, i)
            if not m:
                return [*items, ParseFailure(self.start + body[i:], "expected a function name and [ARGS]")]
            try:
                args, i = decoder.raw_decode(body, m.end())
            except json.JSONDecodeError as e:
                return [
                    *items,
                    ParseFailure(self.start + body[m.start() :], f"the arguments are not valid JSON: {e.msg}"),
                ]
            items.append(
                call_from_object({"name": m.group(1), "arguments": args}, tools, self.start + body[m.start() : i])
            )
        return items

    def render(self, calls):
        return self.start + json.dumps([{"name": c.name, "arguments": c.arguments} for c in calls], ensure_ascii=False)

    def grammar(self, tools, tokenizer=None, parallel=True):
        schema = {"type": "array", "items": call_object_schema(tools), "minItems": 1, **({} if parallel else {"maxItems": 1})}
        return f"start: {lark_literal(self.start, tokenizer)} {lark_json(schema)}\n"


class Mistral(JsonArray):
    name = "mistral"
    description = "Mistral: [TOOL_CALLS][{json}, ...]"
    start = "[TOOL_CALLS]"
    markers = ("[TOOL_CALLS]", "[AVAILABLE_TOOLS]")
    architectures = ()

    def new_id(self) -> str:
        # Mistral's templates accept only ids of 9 letters and digits
        import secrets
        import string

        return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(9))


class Granite(JsonArray):
    name = "granite"
    description = "Granite: <|tool_call|>[{json}, ...]"
    start = "<|tool_call|>"
    markers = ("<|tool_call|>",)
    architectures = ("granite", "granitemoe", "granitehybrid")
