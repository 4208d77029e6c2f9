"""Chat templates: the Jinja template a GGUF file carries, rendered as transformers does.

`tokenizer.chat_template` (or a named variant, `tokenizer.chat_template.<name>`) is
Jinja2 source written for Hugging Face's `apply_chat_template`. cera renders it the same
way: jinja2's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loop
controls extension, `{% generation %}` blocks rendered as plain text, and the helpers
real templates call: `raise_exception`, `strftime_now`, a `tojson` that writes JSON as
`json.dumps` does (no ASCII or HTML escaping), `dict` and a `namespace` that refuses
underscore names. Templates see only plain JSON data (the messages are copied), plus
`bos_token`/`eos_token` (and `unk_token`/`pad_token`) from the file's vocabulary.

Templates are untrusted input. Everything that reaches for Python internals (an
attribute starting with "_", `mro`, `func_globals`, ...) stops the render at once with a
`TemplateError`, as do imports/includes (there is no loader), over-large repetitions
and ranges; nothing outside the template's own output is ever executed.

A file without a template gets a fallback, the same choice llama.cpp makes: the
`tool_use` variant if the file has one, otherwise ChatML
(`<|im_start|>{role}\\n{content}<|im_end|>\\n` per message, and `<|im_start|>assistant\\n`
as the generation prompt). `is_fallback` tells which happened.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .errors import TemplateError

TEMPLATE_KEY = "tokenizer.chat_template"

# llama.cpp's default when a file has no template (ChatML), written out in Jinja.
CHATML_FALLBACK = (
    "{%- for message in messages -%}\n"
    "  {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "  {{- '<|im_start|>assistant\\n' -}}\n"
    "{%- endif -%}"
)

# Limits on what a template may build (a template is untrusted input).
MAX_REPEAT = 1_000_000  # characters or items from one `*`
MAX_POWER = 10_000
MAX_RANGE_TOTAL = 2_000_000  # items all range() calls of one render may produce (nested loops)
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class _GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` (marks assistant text for training masks):
    rendered as its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


class _Namespace(jinja2.utils.Namespace):
    """jinja2's namespace(), refusing underscore names (they would shadow internals)."""

    def __init__(*args, **kwargs):  # noqa: N805 - same signature trick as jinja2's Namespace
        self, args = args[0], args[1:]
        values = dict(*args, **kwargs)
        for name in values:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, values)

    def __setitem__(self, name, value):
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name):
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError(f"a template may not store the underscore name {name!r} in a namespace")


class _Dict:
    """dict() for templates, without the dict type itself (no attribute to climb from)."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class _StrictSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, failing at once on unsafe attribute access (jinja2 would
    otherwise return an undefined value that prints as nothing) and bounding `*` and `**`."""

    intercepted_binops = frozenset(["*", "**"])

    def unsafe_undefined(self, obj, attribute):
        raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__} object is not allowed")

    def call_binop(self, context, operator, left, right):
        if operator == "*":
            for seq, count in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(count, int) and len(seq) * count > MAX_REPEAT:
                    raise SecurityError(f"a template may not build a sequence of more than {MAX_REPEAT} items")
        if operator == "**" and isinstance(right, (int, float)) and abs(right) > MAX_POWER:
            raise SecurityError(f"a template may not raise to powers above {MAX_POWER}")
        return super().call_binop(context, operator, left, right)


_range_budget: contextvars.ContextVar[list[int]] = contextvars.ContextVar("cera_template_range_budget")


def _budgeted_range(*args):
    """range() for templates: each call at most the sandbox's MAX_RANGE items, and all calls
    of one render together at most MAX_RANGE_TOTAL (nested loops cannot spin for hours)."""
    from jinja2.sandbox import safe_range

    r = safe_range(*args)
    budget = _range_budget.get(None)
    if budget is not None:
        budget[0] -= len(r)
        if budget[0] < 0:
            raise SecurityError(f"a template may not iterate over more than {MAX_RANGE_TOTAL} range items")
    return r


def _raise_exception(message):
    raise TemplateError(f"the chat template refused the input: {message}")


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # As transformers: plain json.dumps (jinja2's own tojson escapes HTML and sorts keys).
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


def _environment() -> jinja2.Environment:
    env = _StrictSandbox(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols], loader=None
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _Dict()
    env.globals["namespace"] = _Namespace
    env.globals["range"] = _budgeted_range
    return env


def plain_data(value: Any, where: str = "input") -> Any:
    """A copy of `value` made of JSON types only (what a template may see)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {plain_data(k, where): plain_data(v, where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_data(v, where) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return plain_data(value.item(), where)
    raise TemplateError(
        f"chat template {where} must be JSON-like data (dict, list, str, number, bool, None), "
        f"not {type(value).__name__}"
    )


def _alias_reasoning(message: dict) -> dict:
    # transformers fills `reasoning_content` from the other names for it, and `thinking`.
    reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
    if reasoning is not None:
        message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
    return message


class ChatTemplate:
    """A compiled chat template and the special-token texts it is rendered with."""

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "", special_tokens: dict | None = None,
                 name: str | None = None, is_fallback: bool = False):
        if not isinstance(source, str):
            raise TemplateError(f"a chat template must be a string, not {type(source).__name__}")
        self.source = source
        self.name = name
        self.is_fallback = is_fallback
        self.special_tokens = {"bos_token": bos_token, "eos_token": eos_token, **(special_tokens or {})}
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise TemplateError(f"chat template{self._label()} does not parse: {e.message} (line {e.lineno})") from None
        except SecurityError as e:
            raise TemplateError(f"chat template{self._label()} was refused by the sandbox: {e}") from None

    def _label(self) -> str:
        return f" {self.name!r}" if self.name else ""

    @classmethod
    def from_gguf(cls, gguf_file, name: str | None = None) -> ChatTemplate:
        """The file's template (`tokenizer.chat_template`, or `tokenizer.chat_template.<name>`).

        Without one: the `tool_use` variant if present, else the ChatML fallback
        (`is_fallback` True). Asking for a name the file lacks is an error listing those it has.
        """
        meta = gguf_file.metadata
        where = str(getattr(gguf_file, "path", "the model file"))
        specials = _special_token_texts(meta)
        if name is not None:
            key = f"{TEMPLATE_KEY}.{name}"
            src = meta.get(key)
            if not isinstance(src, str):
                have = available_templates(meta)
                raise TemplateError(
                    f"{where} has no chat template named {name!r} (key {key}); "
                    f"it has: {', '.join(repr(h) for h in have) or 'none'}"
                )
            return cls(src, name=name, **specials)
        src = meta.get(TEMPLATE_KEY)
        if isinstance(src, str) and src and src != "chatml":
            return cls(src, **specials)
        tool_use = meta.get(f"{TEMPLATE_KEY}.tool_use")
        if isinstance(tool_use, str) and tool_use:
            return cls(tool_use, name="tool_use", **specials)
        return cls(CHATML_FALLBACK, name="chatml", is_fallback=True, **specials)

    def render(self, messages, add_generation_prompt: bool = True, tools=None, **extra) -> str:
        """The prompt text for `messages` (a list of {"role", "content", ...} dicts).

        `tools` is a list of JSON-schema tool definitions; `extra` variables are passed to the
        template as well (for example `documents`, `enable_thinking`, or a `bos_token` override).
        """
        if isinstance(messages, (str, bytes)) or not isinstance(messages, (list, tuple)):
            raise TemplateError("messages must be a list of {'role': ..., 'content': ...} dicts")
        msgs = plain_data(list(messages), "messages")
        for i, m in enumerate(msgs):
            if not isinstance(m, dict):
                raise TemplateError(f"message {i} is a {type(m).__name__}, not a dict with 'role' and 'content'")
        msgs = [_alias_reasoning(m) for m in msgs]
        if tools is not None:
            if not isinstance(tools, (list, tuple)) or not all(isinstance(t, Mapping) for t in tools):
                raise TemplateError("tools must be a list of JSON-schema dicts")
            tools = plain_data(list(tools), "tools")
        variables = {**self.special_tokens, **plain_data(extra, "variables")}
        variables.setdefault("documents", None)
        token = _range_budget.set([MAX_RANGE_TOTAL])
        try:
            return self._template.render(
                messages=msgs, tools=tools, add_generation_prompt=bool(add_generation_prompt), **variables
            )
        except TemplateError:
            raise
        except SecurityError as e:
            raise TemplateError(f"chat template{self._label()} tried something the sandbox forbids: {e}") from None
        except jinja2.TemplateError as e:
            raise TemplateError(f"chat template{self._label()} failed: {e}") from None
        except TypeError as e:
            if "no loader" in str(e):
                raise TemplateError(
                    f"chat template{self._label()} tries to import, include or extend another template; "
                    f"templates get no access to files"
                ) from None
            raise TemplateError(f"chat template{self._label()} failed: TypeError: {e}") from None
        except (ValueError, KeyError, IndexError, AttributeError, OverflowError, RecursionError,
                ZeroDivisionError) as e:
            raise TemplateError(f"chat template{self._label()} failed: {type(e).__name__}: {e}") from None
        finally:
            _range_budget.reset(token)

    def __repr__(self) -> str:
        kind = "fallback " if self.is_fallback else ""
        return f"<ChatTemplate {kind}{self.name or 'default'} ({len(self.source)} chars)>"


def available_templates(meta: dict) -> list[str]:
    """Names of the named templates a file carries."""
    names = {k[len(TEMPLATE_KEY) + 1 :] for k in meta if k.startswith(TEMPLATE_KEY + ".")}
    listed = meta.get("tokenizer.chat_templates")
    if isinstance(listed, list):
        names.update(x for x in listed if isinstance(x, str))
    return sorted(names)


def _special_token_texts(meta: dict) -> dict:
    """bos/eos (and unk/pad) token texts for the template, as llama.cpp and transformers
    pass them; tokens a file lacks are empty strings."""
    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list):
        return {}
    from .tokenizer.vocab import special_ids_from_metadata

    special = special_ids_from_metadata(meta)

    def text(tid):
        if isinstance(tid, int) and 0 <= tid < len(tokens):
            return tokens[tid]
        return ""

    out = {"bos_token": text(special.get("bos")), "eos_token": text(special.get("eos"))}
    extra = {}
    for slot in ("unk", "pad"):
        t = text(special.get(slot))
        if t:
            extra[f"{slot}_token"] = t
    if extra:
        out["special_tokens"] = extra
    return out
