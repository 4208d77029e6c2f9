"""What every tool-call wire format shares: the call and result types, the tool specs, and
the helpers formats parse and constrain with (the base class each format fills in is
`cera.tools.format.ToolFormat`)."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Sequence

import attrs

from ..errors import CeraError


class ToolError(CeraError):
    """Tool specs or a tool choice that cannot be used (names the tool and the problem)."""


@attrs.frozen
class ToolCall:
    """One call the model made: ``arguments`` parsed (a dict), ``raw`` as the model wrote it."""

    id: str
    name: str
    arguments: dict
    raw: str = ""

    def to_openai(self) -> dict:
        """The call as an OpenAI chat message's ``tool_calls`` item (arguments as a JSON string)."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)},
        }

    def to_json(self) -> dict:
        """The call as `cera run --tools` prints it."""
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@attrs.frozen
class ParseFailure:
    """Markup the model meant as a call that does not parse (or names no declared tool):
    reported in the result, never raised, so one bad call does not lose the turn."""

    raw: str
    reason: str


@attrs.frozen
class ParsedReply:
    """An assistant reply split into its parts: the text (call markup removed), the calls,
    the failures, and the text of a leading ``<think>`` block."""

    content: str
    calls: tuple[ToolCall, ...] = ()
    failures: tuple[ParseFailure, ...] = ()
    reasoning: str | None = None


@attrs.frozen
class Tool:
    """A function the model may call: its name, description and parameters (a JSON Schema
    of type object)."""

    name: str
    description: str = ""
    parameters: dict = attrs.field(factory=lambda: {"type": "object", "properties": {}})

    def to_openai(self) -> dict:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")


def normalize_tools(tools) -> tuple[Tool, ...]:
    """OpenAI-style function specs (``{"type": "function", "function": {...}}``, or the inner
    object alone, or `Tool`s) as `Tool`s, checked."""
    if tools is None:
        return ()
    if isinstance(tools, dict):
        tools = [tools]
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence):
        raise ToolError("tools must be a list of function specs ({'type': 'function', 'function': {...}})")
    out, seen = [], set()
    for i, t in enumerate(tools):
        if isinstance(t, Tool):
            fn = {"name": t.name, "description": t.description, "parameters": t.parameters}
        elif isinstance(t, dict):
            if t.get("type", "function") != "function":
                raise ToolError(f"tools[{i}]: only type 'function' is supported, got {t.get('type')!r}")
            fn = t.get("function", t)
            if not isinstance(fn, dict):
                raise ToolError(f"tools[{i}]: 'function' must be an object with a name and parameters")
        else:
            raise ToolError(f"tools[{i}] must be an object, got {type(t).__name__}")
        name = fn.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise ToolError(
                f"tools[{i}]: name {name!r} must be letters, digits, '_', '.' or '-' (at most 64, not starting with a digit)"
            )
        if name in seen:
            raise ToolError(f"tools[{i}]: two tools are named {name!r}")
        seen.add(name)
        params = fn.get("parameters")
        if params is None:
            params = {"type": "object", "properties": {}}
        if not isinstance(params, dict) or params.get("type", "object") != "object":
            raise ToolError(f"tool {name!r}: parameters must be a JSON Schema of type object")
        props = params.get("properties", {})
        if not isinstance(props, dict):
            raise ToolError(f"tool {name!r}: parameters.properties must be an object")
        required = params.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise ToolError(f"tool {name!r}: parameters.required must be a list of names")
        out.append(Tool(name, str(fn.get("description") or ""), params))
    return tuple(out)


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


# -- parsing ---------------------------------------------------------------------------------


def json_values(text: str, separators: str = ",;\n\t\r ") -> list:
    """The JSON values written one after another in ``text`` (separated by whitespace,
    commas or semicolons). Raises ValueError naming what does not parse."""
    decoder = json.JSONDecoder()
    out, i, n = [], 0, len(text)
    while True:
        while i < n and text[i] in separators:
            i += 1
        if i >= n:
            return out
        try:
            value, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise ValueError(f"not valid JSON at character {e.pos}: {e.msg}") from None
        out.append(value)


def call_from_object(obj, tools, raw: str, args_keys=("arguments", "parameters")) -> ToolCall | ParseFailure:
    """A call from ``{"name": ..., "arguments": {...}}`` (also OpenAI's ``{"function":
    {...}}`` wrapping, and arguments given as a JSON string)."""
    if not isinstance(obj, dict):
        return ParseFailure(raw, f"a call must be a JSON object, got {type(obj).__name__}")
    if isinstance(obj.get("function"), dict):
        obj = {**obj["function"], **({"id": obj["id"]} if "id" in obj else {})}
    name = obj.get("name")
    args = next((obj[k] for k in args_keys if k in obj), {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            return ParseFailure(raw, f"the arguments of {name!r} are a string that is not JSON: {e.msg}")
    call = check_call(name, args, tools, raw)
    if isinstance(call, ToolCall) and isinstance(obj.get("id"), str) and obj["id"]:
        call = attrs.evolve(call, id=obj["id"])
    return call


def strip_fence(text: str) -> str:
    """The inside of a Markdown code fence that is the whole text (models often wrap a
    JSON call in one), else the text."""
    t = text.strip()
    if t.startswith("```") and t.endswith("```") and len(t) >= 6:
        inner = t[3:-3]
        first, nl, rest = inner.partition("\n")
        return rest if nl and not first.strip().startswith(("{", "[")) else inner
    return text


def json_reply_calls(text: str, tools, args_keys=("arguments", "parameters")) -> list[ToolCall | ParseFailure] | None:
    """A reply that is nothing but call-shaped objects (``{"name": ..., "arguments":
    {...}}`` and nothing else, one or several, or a list of them; a Markdown fence around
    them is dropped), as calls (a name that is not a declared tool: a failure); None for
    any other reply, so an answer that happens to be JSON stays text."""
    text = strip_fence(text)
    try:
        values = json_values(text)
    except ValueError:
        return None
    objs = [o for v in values for o in (v if isinstance(v, list) else [v])]

    def looks_like_call(o):
        if not isinstance(o, dict):
            return False
        fn = o.get("function") if isinstance(o.get("function"), dict) else o
        return (
            isinstance(fn.get("name"), str)
            and any(k in fn for k in args_keys)
            and set(fn) <= {"name", "id", "type", *args_keys}
        )

    if not objs or not all(looks_like_call(o) for o in objs):
        return None
    return [call_from_object(o, tools, text, args_keys) for o in objs]


def cut_array_calls(text: str, tools, at: int) -> list[ToolCall | ParseFailure] | None:
    """The calls of a JSON array of call objects that opens at ``text[at]`` (a ``[``) and
    was cut before its end: each complete object as a call, then one failure for the cut
    rest; None when no complete object came before the cut."""
    decoder = json.JSONDecoder()
    items: list[ToolCall | ParseFailure] = []
    i, n = at + 1, len(text)
    while True:
        while i < n and text[i] in ", \t\n\r":
            i += 1
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            break
        items.append(call_from_object(obj, tools, text[i:end]))
        i = end
    if not items:
        return None
    rest = text[i:].strip()
    if rest and rest not in ("]", "]}"):
        items.append(ParseFailure(rest, "the reply ended inside a call (the token limit cut it); the calls before it are kept"))
    return items


def check_call(name, args, tools, raw) -> ToolCall | ParseFailure:
    if not isinstance(name, str) or not name:
        return ParseFailure(raw, "the call has no function name")
    if not isinstance(args, dict):
        return ParseFailure(raw, f"the arguments of {name!r} are not an object")
    if tools and name not in {t.name for t in tools}:
        return ParseFailure(
            raw, f"the model called {name!r}, which is not one of the tools ({', '.join(t.name for t in tools)})"
        )
    return ToolCall("", name, args, raw)  # the id is given when the reply is split (ToolFormat.new_id)


# -- grammars --------------------------------------------------------------------------------

# JSON whitespace the constrained calls allow, per place (a small model left free to write
# whitespace can fill its budget with newlines); the value cera.grammar uses for schemas.
from ..grammar.constraint import JSON_WHITESPACE  # noqa: E402 - the one definition


def arguments_schema(tool: Tool) -> dict:
    """The tool's parameters as a closed schema: required arguments required, no others
    unless the schema itself allows additional properties."""
    schema = dict(tool.parameters)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    schema.setdefault("additionalProperties", False)
    return schema


def call_object_schema(tools: Sequence[Tool], args_key: str = "arguments") -> dict:
    """A JSON Schema of one call object ``{"name": ..., args_key: {...}}``: a branch per tool."""
    branches = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, args_key: arguments_schema(t)},
            "required": ["name", args_key],
            "additionalProperties": False,
        }
        for t in tools
    ]
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def lark_json(schema: dict) -> str:
    """A llguidance Lark item matching JSON valid under ``schema`` (whitespace bounded)."""
    return "%json " + json.dumps({**schema, "x-guidance": {"whitespace_pattern": JSON_WHITESPACE}})


def special_token_id(text: str, tokenizer) -> int | None:
    """The id of the vocabulary token spelled ``text`` when the grammar engine sees it as a
    special token (control, or user-defined like ``<tool_call>``), else None."""
    if tokenizer is None or not text:
        return None
    tid = tokenizer.token_id(text)
    if tid is None:
        return None
    from ..grammar.vocab import token_bytes_cached

    return tid if token_bytes_cached(tokenizer)[tid][:1] == b"\xff" else None


def lark_literal(text: str, tokenizer=None) -> str:
    """A marker in llguidance's Lark: the special token by id when the vocabulary has it as
    one, else the quoted text."""
    tid = special_token_id(text, tokenizer)
    return f"<[{tid}]>" if tid is not None else json.dumps(text)
