"""Phi-4-mini's calls: a JSON object (or a list of them) between ``<|tool_call|>`` and
``<|/tool_call|>``; its template lists the tools in ``<|tool|>...<|/tool|>``."""

from __future__ import annotations

import json

from .base import call_object_schema, lark_json, lark_literal
from .hermes import Hermes


class Phi4(Hermes):
    name = "phi4"
    description = "Phi-4-mini: <|tool_call|>{json}<|/tool_call|>"
    start, end = "<|tool_call|>", "<|/tool_call|>"
    markers = ("<|/tool_call|>", "<|tool|>")
    architectures = ()

    def render(self, calls):
        return "".join(
            f"{self.start}{json.dumps({'name': c.name, 'arguments': c.arguments}, ensure_ascii=False)}{self.end}"
            for c in calls
        )

    def grammar(self, tools, tokenizer=None, parallel=True):
        open_, close = lark_literal(self.start, tokenizer), lark_literal(self.end, tokenizer)
        one = lark_json(call_object_schema(tools))
        return f"start: call{'+' if parallel else ''} | bare\ncall: {open_} {one} {close}\nbare: {one}\n"
