"""What a generation must follow: a `Constraint` (GBNF, JSON Schema, any JSON object,
a regular expression, or llguidance Lark), optionally lazy behind `Trigger`s.

A constraint is a plain value: it compiles to an llguidance grammar for one vocabulary
when a generation starts (`compile`). Bad input is a `GrammarError` that says where and
what: a GBNF error names line and column; a JSON Schema that is not JSON names its line
and column; a schema keyword the engine cannot enforce is named (``lenient=True`` turns
that into a warning and ignores the keyword).
"""

from __future__ import annotations

import json
import warnings

import attrs

from ..errors import GrammarError

# Where JSON allows whitespace: nothing, one space, or one newline and an indent of at
# most 20 spaces or tabs (llama.cpp's json.gbnf `ws`): a small model left free to write
# whitespace fills values with blank lines and can spend its whole budget on them.
JSON_WHITESPACE = r"(?: |\n[ \t]{0,20})?"
KINDS = ("gbnf", "json_schema", "regex", "lark")


@attrs.frozen
class Trigger:
    """Where a lazy constraint takes over. ``token``: when this token id is generated
    (it is the first token the grammar reads). ``word``: when this text appears (the
    grammar reads from its first character on). ``pattern``: when this regular expression
    (Python syntax) matches the text generated so far; the grammar reads from the start
    of its first non-empty group, or of the whole match (as llama.cpp's trigger patterns)."""

    token: int | None = None
    word: str | None = None
    pattern: str | None = None

    def __attrs_post_init__(self):
        given = [x for x in (self.token, self.word, self.pattern) if x is not None]
        if len(given) != 1:
            raise GrammarError("a Trigger takes exactly one of token=, word= or pattern=")
        if self.pattern is not None:
            import re

            try:
                re.compile(self.pattern)
            except re.error as e:
                raise GrammarError(f"trigger pattern {self.pattern!r}: {e}") from None


@attrs.frozen
class Constraint:
    """A grammar the output must follow. Build with `gbnf`, `json_schema`, `json`,
    `regex` or `lark`; `lazy(...)` makes it apply only from a trigger on."""

    kind: str
    source: object
    lenient: bool = False
    triggers: tuple[Trigger, ...] = ()
    # the output is tool calls: it ends at the first call that repeats an earlier one
    # (cera.grammar.call_repeats)
    end_on_repeat: bool = False

    @classmethod
    def gbnf(cls, text: str) -> Constraint:
        from . import gbnf

        gbnf.parse(text)  # syntax errors now, not when generation starts
        return cls("gbnf", text)

    @classmethod
    def json_schema(cls, schema, lenient: bool = False) -> Constraint:
        return cls("json_schema", _schema(schema), lenient=lenient)

    @classmethod
    def json(cls) -> Constraint:
        """Any JSON object (what OpenAI's JSON mode and llama.cpp's json.gbnf produce)."""
        return cls("json_schema", {"type": "object"})

    @classmethod
    def regex(cls, pattern: str) -> Constraint:
        if not isinstance(pattern, str):
            raise GrammarError(f"a regular expression must be a string, got {type(pattern).__name__}")
        return cls("regex", pattern)

    @classmethod
    def lark(cls, text: str) -> Constraint:
        """llguidance's Lark dialect, passed through as it is."""
        return cls("lark", text)

    @property
    def is_json(self) -> bool:
        return self.kind == "json_schema"

    @property
    def is_lazy(self) -> bool:
        return bool(self.triggers)

    def lazy(self, *triggers: Trigger) -> Constraint:
        """The same constraint, applied only once one of ``triggers`` appears: generation
        is free until then (tool calls inside free text)."""
        if not triggers or not all(isinstance(t, Trigger) for t in triggers):
            raise GrammarError("lazy() takes one or more Trigger(...)")
        return attrs.evolve(self, triggers=tuple(triggers))

    def compile(self, tokenizer=None, n_vocab: int | None = None) -> str:
        """The llguidance grammar (checked); ``tokenizer`` resolves GBNF ``<text>`` tokens
        and lets the check see the vocabulary."""
        import llguidance

        if self.kind == "gbnf":
            from .gbnf import to_lark

            grammar = llguidance.LLMatcher.grammar_from_lark(to_lark(self.source, tokenizer, n_vocab))
            what = "GBNF grammar"
        elif self.kind == "json_schema":
            options = {"whitespace_pattern": JSON_WHITESPACE}
            if self.lenient:
                options["lenient"] = True
            try:
                grammar = llguidance.LLMatcher.grammar_from_json_schema(self.source, defaults=options)
            except ValueError as e:
                raise GrammarError(f"JSON Schema: {e}") from None
            what = "JSON Schema"
        elif self.kind == "regex":
            grammar = llguidance.LLMatcher.grammar_from_regex(self.source)
            what = f"regular expression {self.source!r}"
        elif self.kind == "lark":
            grammar = llguidance.LLMatcher.grammar_from_lark(self.source)
            what = "Lark grammar"
        else:
            raise GrammarError(f"unknown constraint kind {self.kind!r}; known: {', '.join(KINDS)}")
        lt = None
        if tokenizer is not None:
            from .vocab import ll_tokenizer

            lt = ll_tokenizer(tokenizer, n_vocab)
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, lt)
        if is_error:
            msg = messages[0] if messages else "invalid"
            if msg.startswith("Unimplemented keys"):
                msg += " (cera cannot enforce these JSON Schema keywords; remove them, or pass lenient=True / --json-schema-lenient to ignore them with a warning)"
            raise GrammarError(f"{what}: {msg.strip()}")
        for m in messages:
            warnings.warn(f"{what}: {m}", stacklevel=2)
        return grammar


def _schema(schema):
    if isinstance(schema, (bytes, bytearray)):
        schema = schema.decode("utf-8", "replace")
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise GrammarError(f"JSON Schema, line {e.lineno}, column {e.colno}: expected valid JSON: {e.msg}") from None
    if isinstance(schema, bool):
        schema = {} if schema else {"not": {}}
    if not isinstance(schema, dict):
        raise GrammarError(f"a JSON Schema must be a JSON object, got {type(schema).__name__}")
    return _normalize(schema)


def _normalize(node):
    """Older drafts' forms that llama.cpp accepts: ``prefixItems`` given one schema (not a
    list) means every item (``items``), as llama.cpp reads it."""
    if isinstance(node, list):
        return [_normalize(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _normalize(v) for k, v in node.items()}
    if isinstance(out.get("items"), list) and "prefixItems" not in out:  # draft 4-7 tuples, as llama.cpp reads them
        out["prefixItems"] = out.pop("items")
        out["items"] = out.pop("additionalItems", False)
    if isinstance(out.get("prefixItems"), dict):
        one = out.pop("prefixItems")
        if not out.get("items"):
            out["items"] = one
    return out


def _read_at(value, what: str):
    """``@path`` stands for the file's text (a GBNF grammar or a JSON Schema never starts with @)."""
    if isinstance(value, str) and value.startswith("@"):
        from pathlib import Path

        path = Path(value[1:]).expanduser()
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise GrammarError(f"cannot read the {what.replace('_', ' ')} file {str(path)!r}: {e}") from None
    return value


def from_options(options) -> Constraint | None:
    """The constraint a `GenerateOptions` asks for (None: unconstrained)."""
    given = [
        n for n in ("grammar", "json_schema", "regex") if getattr(options, n, None) is not None
    ] + (["json"] if getattr(options, "json", False) else [])
    if not given:
        return None
    if len(given) > 1:
        raise GrammarError(f"give one constraint, not several: {', '.join(given)}")
    which = given[0]
    if which == "json":
        return Constraint.json()
    value = getattr(options, which)
    if isinstance(value, Constraint):
        return value
    if which != "regex":
        value = _read_at(value, which)
    if which == "grammar":
        return Constraint.gbnf(value)
    if which == "regex":
        return Constraint.regex(value)
    return Constraint.json_schema(value, lenient=getattr(options, "json_schema_lenient", False))
