"""Tool calling: the wire formats models write calls in, parsing replies into calls (also
while they stream), and grammars that hold calls to the declared tools.

    from cera.tools import format_for, normalize_tools
    fmt = format_for(loaded)                 # from the chat template's markers, else the architecture
    reply = fmt.parse(text, normalize_tools(specs))
    reply.calls, reply.content, reply.failures

Each format is one small module (markers, parser, renderer, grammar); `FORMATS` is the
table, in the order detection tries them. The chat coordinator (`cera.chat.session.ChatSession`)
renders the tools through the model's own template, splits replies as they stream, and
builds the constraint for ``tool_choice`` with `call_constraint`.
"""

from __future__ import annotations

from .array import Granite, Mistral
from .base import ParsedReply, ParseFailure, Tool, ToolCall, ToolError, normalize_tools
from .format import ToolFormat
from .generic import Generic
from .hermes import Hermes
from .llama3 import Llama3
from .phi4 import Phi4
from .pythonic import Pythonic
from .stream import ReasoningDelta, ReplySplitter, TextDelta, ToolCallEvent, ToolCallFailed

# Detection order: the first whose markers the template has (Phi-4's closing marker before
# Granite's opening one, which Phi-4 shares).
FORMATS: tuple[type[ToolFormat], ...] = (Hermes, Pythonic, Mistral, Llama3, Phi4, Granite, Generic)


def by_name(name: str) -> ToolFormat:
    for f in FORMATS:
        if f.name == name:
            return f()
    raise ToolError(f"unknown tool-call format {name!r}; known: {', '.join(f.name for f in FORMATS)}")


def format_for(loaded=None, *, architecture: str = "", template: str | None = None) -> ToolFormat:
    """The format a model writes calls in: the first whose markers its chat template has;
    else the architecture's usual one when the template renders tools at all; else generic."""
    if loaded is not None:
        architecture = loaded.architecture
        tmpl = loaded.chat_template
        template = "" if tmpl.is_fallback else tmpl.source
    template = template or ""
    for f in FORMATS:
        if f.detect(template):
            return f()
    if "tools" in template:
        for f in FORMATS:
            if architecture in f.architectures:
                return f()
    return Generic()


CHOICES = ("auto", "none", "required")


def normalize_choice(choice, tools) -> str:
    """``tool_choice`` as cera reads it: "auto", "none", "required", or a tool's name
    (OpenAI's ``{"type": "function", "function": {"name": ...}}`` too)."""
    if choice is None:
        return "auto"
    if isinstance(choice, dict):
        fn = choice.get("function") if choice.get("type", "function") == "function" else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str):
            raise ToolError(
                'tool_choice must be "auto", "none", "required" or {"type": "function", "function": {"name": ...}}'
            )
        choice = name
    if not isinstance(choice, str):
        raise ToolError(f"tool_choice must be a string or an object, got {type(choice).__name__}")
    if choice in CHOICES:
        if choice == "required" and not tools:
            raise ToolError('tool_choice "required" needs tools')
        return choice
    names = [t.name for t in tools]
    if choice not in names:
        raise ToolError(
            f"tool_choice names {choice!r}, which is not one of the tools ({', '.join(names) or 'none given'})"
        )
    return choice


def call_constraint(fmt: ToolFormat, tools, choice: str, tokenizer, constrain: bool, parallel: bool = True):
    """The grammar for a turn: None (free), lazy (``auto`` with ``constrain``: free text
    until the start marker, then calls to the declared tools with arguments valid under
    their schemas, required ones included), or from the first token (``required``, or one
    named tool). ``parallel`` (OpenAI's ``parallel_tool_calls``): several calls may follow
    one another, up to the first that repeats an earlier one exactly; else one call."""
    import attrs

    from ..grammar import Constraint

    if not tools or choice == "none" or (choice == "auto" and not constrain):
        return None
    chosen = tools if choice in CHOICES else tuple(t for t in tools if t.name == choice)
    grammar = attrs.evolve(Constraint.lark(fmt.grammar(chosen, tokenizer, parallel=parallel)), end_on_repeat=parallel)
    return grammar.lazy(*fmt.triggers(tokenizer)) if choice == "auto" else grammar


__all__ = [
    "CHOICES", "FORMATS", "Generic", "Granite", "Hermes", "Llama3", "Mistral", "ParseFailure", "ParsedReply",
    "Phi4", "Pythonic", "ReasoningDelta", "ReplySplitter", "TextDelta", "Tool", "ToolCall", "ToolCallEvent",
    "ToolCallFailed", "ToolError", "ToolFormat", "by_name", "call_constraint", "format_for", "normalize_choice",
    "normalize_tools",
]  # fmt: skip
