"""Pythonic calls (LFM2 and LFM2.5): a Python list of calls with keyword arguments between
markers, several calls in one list,

    <|tool_call_start|>[get_weather(city="Paris"), get_time(zone="CET")]<|tool_call_end|>

Arguments are Python literals (``True``/``None``; JSON's ``true``/``null`` are read too);
a JSON list of call objects between the same markers is read as well, since some of these
templates render earlier calls that way."""

from __future__ import annotations

import ast
import json

from .base import ParseFailure, call_from_object, check_call, json_values, lark_json, lark_literal
from .format import ToolFormat

_NAMES = {"True": True, "true": True, "False": False, "false": False, "None": None, "null": None}


def _literal(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool, type(None))):
        return node.value
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values, strict=True):
            key = _literal(k) if k is not None else None
            if not isinstance(key, str):
                raise ValueError("dictionary keys must be strings")
            out[key] = _literal(v)
        return out
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _literal(node.operand)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
    raise ValueError(f"{ast.unparse(node)[:60]} is not a literal value")


def _dotted(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def py_literal(value) -> str:
    """``value`` (JSON data) as a Python literal."""
    if value is True:
        return "True"
    if value is False:
        return "False"
    if value is None:
        return "None"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a Python string literal
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(py_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {py_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"{type(value).__name__} is not JSON data")


class Pythonic(ToolFormat):
    name = "pythonic"
    description = "LFM2 pythonic: <|tool_call_start|>[f(a=1), ...]<|tool_call_end|>"
    start, end = "<|tool_call_start|>", "<|tool_call_end|>"
    markers = ("<|tool_call_start|>", "<|tool_list_start|>")
    architectures = ("lfm2", "lfm2moe")

    def parse_block(self, body, tools):
        raw = self.start + body + self.end
        text = body.strip()
        if text.startswith("{") or text.startswith("[{"):
            try:
                values = json_values(text)
            except ValueError as e:
                return [ParseFailure(raw, f"the calls are {e}")]
            return [call_from_object(o, tools, raw) for v in values for o in (v if isinstance(v, list) else [v])]
        try:
            tree = ast.parse(text, mode="eval").body
        except SyntaxError as e:
            return [ParseFailure(raw, f"the calls are not a Python list of calls: {e.msg} (column {e.offset})")]
        nodes = tree.elts if isinstance(tree, (ast.List, ast.Tuple)) else [tree]
        if not nodes:
            return [ParseFailure(raw, "the list of calls is empty")]
        items = []
        for node in nodes:
            src = ast.get_source_segment(text, node) or raw
            if not isinstance(node, ast.Call) or _dotted(node.func) is None:
                items.append(ParseFailure(src, "expected a call such as name(arg=value)"))
                continue
            if node.args:
                items.append(
                    ParseFailure(
                        src, f"{_dotted(node.func)}() has positional arguments; calls take name=value arguments"
                    )
                )
                continue
            try:
                args = {}
                for kw in node.keywords:
                    if kw.arg is None:
                        raise ValueError("**arguments are not allowed")
                    args[kw.arg] = _literal(kw.value)
            except ValueError as e:
                items.append(ParseFailure(src, f"in {_dotted(node.func)}(): {e}"))
                continue
            items.append(check_call(_dotted(node.func), args, tools, src))
        return items

    def render(self, calls):
        body = ", ".join(
            f"{c.name}({', '.join(f'{k}={py_literal(v)}' for k, v in c.arguments.items())})" for c in calls
        )
        return f"{self.start}[{body}]{self.end}"

    def grammar(self, tools, tokenizer=None, parallel=True):
        more = ' (", " call)*' if parallel else ""
        rules = [
            f'start: {lark_literal(self.start, tokenizer)} "[" call{more} "]" {lark_literal(self.end, tokenizer)}',
            "call: " + " | ".join(f"t{i}" for i in range(len(tools))),
        ]
        for i, tool in enumerate(tools):
            props = tool.parameters.get("properties", {}) or {}
            required = [p for p in tool.parameters.get("required", []) if p in props]
            order = required + [p for p in props if p not in required]
            items = [(f"t{i}a{j}", p in required) for j, p in enumerate(order)]
            for j, p in enumerate(order):
                rules.append(f"t{i}a{j}: {json.dumps(p + '=')} {_value(props[p])}")
            n = len(items)
            nullable = [False] * (n + 1)
            nullable[n] = True
            for j in range(n - 1, -1, -1):
                nullable[j] = not items[j][1] and nullable[j + 1]

            def ref(j, sep, i=i, n=n, nullable=nullable):
                if j == n:
                    return ""
                return f"t{i}s{j}{'c' if sep else ''}" + ("?" if nullable[j] else "")

            for j, (kv, req) in enumerate(items):
                for sep in (False, True):
                    head = (f'", " {kv}' if sep else kv) + " " + ref(j + 1, True)
                    alts = [head.strip()]
                    if not req and j + 1 < n:
                        alts.append(ref(j + 1, sep).rstrip("?"))
                    rules.append(f"t{i}s{j}{'c' if sep else ''}: " + " | ".join(alts))
            rules.append(f't{i}: {json.dumps(tool.name + "(")} {ref(0, False)} ")"')
        return "\n".join(rules) + "\n"


def _value(schema) -> str:
    """A Lark item for one argument's value: Python's booleans and None for those types,
    JSON (also Python) for the rest."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "boolean":
        return '("True" | "False")'
    if kind == "null":
        return '"None"'
    return lark_json(schema if isinstance(schema, dict) else {})
