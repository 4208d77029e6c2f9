"""Chat templates: the Jinja template a GGUF file carries, rendered as transformers does.

`tokenizer.chat_template` (or a named variant, `tokenizer.chat_template.<name>`) is
Jinja2 source written for Hugging Face's `apply_chat_template`. cera renders it the same
way: jinja2's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loop
controls extension, `{% generation %}` blocks rendered as plain text, and the helpers
real templates call: `raise_exception`, `strftime_now`, a `tojson` that writes JSON as
`json.dumps` does (no ASCII or HTML escaping), `dict` and a `namespace` that refuses
underscore names. Templates see only plain JSON data (the messages are copied), plus
`bos_token`/`eos_token` (and `unk_token`/`pad_token`) from the file's vocabulary.

Templates are untrusted input. They run in `cera.text.template_sandbox`: jinja2's immutable
sandbox (anything that reaches for Python internals stops the render with a
`TemplateError`, imports and includes have no loader) with budgets, stated in
`TemplateBudget`, for compilation (source size, nesting, time) and for each render (time,
the size of the prompt and of every value built, everything produced in all); hitting one
is a `TemplateError` naming it. A file's template is compiled on its first render, so a
file whose template is broken still loads and runs raw prompts.

A file without a template gets a fallback, the same choice llama.cpp makes: the
`tool_use` variant if the file has one, otherwise ChatML
(`<|im_start|>{role}\\n{content}<|im_end|>\\n` per message, and `<|im_start|>assistant\\n`
as the generation prompt). `is_fallback` tells which happened.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import jinja2

from ..errors import TemplateError
from .template_budget import DEFAULT_BUDGET, TemplateBudget
from .template_sandbox import compile_template, make_environment
from .template_sandbox import render as _render_in_sandbox

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

_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def _raise_exception(message):
    raise TemplateError(f"the chat template refused the input: {message}")


def _strftime_now(fmt):
    if not isinstance(fmt, str) or len(fmt) > 1000:
        raise TemplateError("strftime_now() takes a format string of at most 1000 characters")
    return datetime.now().strftime(fmt)


_HELPERS = {"raise_exception": _raise_exception, "strftime_now": _strftime_now}


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
                 name: str | None = None, is_fallback: bool = False, budget: TemplateBudget | None = None,
                 lazy: bool = False):  # fmt: skip
        if not isinstance(source, str):
            raise TemplateError(f"a chat template must be a string, not {type(source).__name__}")
        self.source = source
        self.name = name
        self.is_fallback = is_fallback
        self.budget = budget or DEFAULT_BUDGET
        self.special_tokens = {"bos_token": bos_token, "eos_token": eos_token, **(special_tokens or {})}
        self._env = None
        self._template = None
        self._error: TemplateError | None = None  # a failed compilation, kept: it is not retried
        if not lazy:
            self._compiled()

    def _compiled(self):
        """jinja's template, compiled on first use within the budget."""
        if self._template is not None:
            return self._template
        if self._error is not None:
            raise self._error
        env = make_environment(self.budget, _HELPERS)
        env.label = self._label()
        try:
            try:
                self._template = compile_template(env, self.source, self._label())
            except jinja2.TemplateSyntaxError as e:
                raise TemplateError(
                    f"chat template{self._label()} does not parse: {e.message} (line {e.lineno})"
                ) from None
            except jinja2.exceptions.SecurityError as e:
                raise TemplateError(f"chat template{self._label()} was refused by the sandbox: {e}") from None
        except TemplateError as e:
            self._error = e
            raise
        self._env = env
        return self._template

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
            return cls(src, name=name, lazy=True, **specials)
        src = meta.get(TEMPLATE_KEY)
        if isinstance(src, str) and src and src != "chatml":
            return cls(src, lazy=True, **specials)
        tool_use = meta.get(f"{TEMPLATE_KEY}.tool_use")
        if isinstance(tool_use, str) and tool_use:
            return cls(tool_use, name="tool_use", lazy=True, **specials)
        return cls(CHATML_FALLBACK, name="chatml", is_fallback=True, **specials)

    def render(self, messages, add_generation_prompt: bool = True, tools=None, **extra) -> str:
        """The prompt text for `messages` (a list of {"role", "content", ...} dicts).

        `tools` is a list of JSON-schema tool definitions; `extra` variables are passed to the
        template as well (for example `documents`, `enable_thinking`, or a `bos_token` override).
        """
        if isinstance(messages, (str, bytes)) or not isinstance(messages, (list, tuple)):
            raise TemplateError("messages must be a list of {'role': ..., 'content': ...} dicts")
        try:
            msgs = plain_data(list(messages), "messages")
        except RecursionError:
            raise TemplateError("messages are nested too deeply to be plain JSON-like data") from None
        for i, m in enumerate(msgs):
            if not isinstance(m, dict):
                raise TemplateError(f"message {i} is a {type(m).__name__}, not a dict with 'role' and 'content'")
        msgs = [_alias_reasoning(m) for m in msgs]
        if tools is not None:
            if not isinstance(tools, (list, tuple)) or not all(isinstance(t, Mapping) for t in tools):
                raise TemplateError("tools must be a list of JSON-schema dicts")
            try:
                tools = plain_data(list(tools), "tools")
            except RecursionError:
                raise TemplateError("tools are nested too deeply to be plain JSON-like data") from None
        try:
            variables = {**self.special_tokens, **plain_data(extra, "variables")}
        except RecursionError:
            raise TemplateError("template variables are nested too deeply to be plain JSON-like data") from None
        variables.setdefault("documents", None)
        template = self._compiled()
        label = self._label()
        try:
            return _render_in_sandbox(
                self._env, template,
                dict(messages=msgs, tools=tools, add_generation_prompt=bool(add_generation_prompt), **variables),
            )  # fmt: skip
        except TemplateError:
            raise
        except jinja2.exceptions.SecurityError as e:
            raise TemplateError(f"chat template{label} tried something the sandbox forbids: {e}") from None
        except jinja2.TemplateError as e:
            raise TemplateError(f"chat template{label} failed: {e}") from None
        except TypeError as e:
            if "no loader" in str(e):
                raise TemplateError(
                    f"chat template{label} tries to import, include or extend another template; "
                    f"templates get no access to files"
                ) from None
            raise TemplateError(f"chat template{label} failed: TypeError: {e}") from None
        except MemoryError:
            raise TemplateError(f"chat template{label} ran out of memory") from None
        except RecursionError:
            raise TemplateError(f"chat template{label} recursed too deeply") from None
        except (ValueError, KeyError, IndexError, AttributeError, OverflowError, ZeroDivisionError,
                AssertionError, UnicodeError, LookupError, ArithmeticError) as e:
            raise TemplateError(f"chat template{label} failed: {type(e).__name__}: {e}") from None

    def __repr__(self) -> str:
        kind = "fallback " if self.is_fallback else ""
        return f"<ChatTemplate {kind}{self.name or 'default'} ({len(self.source)} chars)>"


def chosen_template(gguf_file, choice: str) -> ChatTemplate:
    """The template a user chose over the file's own (``--chat-template``): a template the
    file carries by that name (``tokenizer.chat_template.<name>``), ``chatml``, or a Jinja
    file. It is compiled now, so a template that does not parse is an error before any
    prompt; a choice that is none of these is an error listing the names there are."""
    from pathlib import Path

    if not isinstance(choice, str) or not choice:
        raise TemplateError("a chat template choice must be a name or the path of a Jinja file")
    meta = gguf_file.metadata
    specials = _special_token_texts(meta)
    names = available_templates(meta)
    if choice in names:
        template = ChatTemplate.from_gguf(gguf_file, name=choice)
    elif choice == "chatml":
        template = ChatTemplate(CHATML_FALLBACK, name="chatml", **specials)
    else:
        path = Path(choice).expanduser()
        if not path.is_file():
            known = ", ".join(repr(n) for n in ["chatml", *names])
            raise TemplateError(f"--chat-template {choice!r} is neither a Jinja file nor a template name; the names "
                                f"here are {known}")  # fmt: skip
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise TemplateError(f"cannot read the chat template file {path}: {e}") from None
        template = ChatTemplate(source, name=path.name, lazy=True, **specials)
    template._compiled()
    return template


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
