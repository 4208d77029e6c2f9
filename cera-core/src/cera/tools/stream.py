"""Splitting a reply as it streams: text deltas out, call markup held back and turned into
call events, a leading ``<think>`` block reported apart. The one parser of replies: a whole
reply is parsed by feeding it through a splitter too, so streamed and whole results agree.

Text that could still become a start marker (``<tool`` of ``<tool_call>``) is held until
the next text decides; a call block is held until its end marker (or the end of the reply),
so no markup ever reaches the text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from .base import ParsedReply, ParseFailure, Tool, ToolCall

if TYPE_CHECKING:  # a format parses whole replies with a splitter: the import goes one way at run time
    from .format import ToolFormat

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@attrs.frozen
class TextDelta:
    text: str


@attrs.frozen
class ReasoningDelta:
    text: str


@attrs.frozen
class ToolCallEvent:
    call: ToolCall


@attrs.frozen
class ToolCallFailed:
    failure: ParseFailure


_CALL_KEYS = ("name", "function", "tool_calls", "tool_call", "type", "id")
_FENCE_LANGS = ("", "json", "tool_call", "tool_code")
_FIRST_KEY = re.compile(r'\[?\s*\{\s*"((?:[^"\\]|\\.){0,40})"')


def _json_reply_start(buf: str) -> bool | None:
    """Whether a reply that opens like this may be nothing but call objects (True), is
    not (False), or cannot be told yet (None). Decided early, so that answers in prose,
    code or other JSON stream as they come instead of being held to the end."""
    lead = buf.lstrip()
    if lead.startswith("```"):  # a fenced block: JSON (or untagged) may hold calls
        line, nl, rest = lead[3:].partition("\n")
        if not nl:
            return None if len(line) < 20 else False
        if line.strip().lower() not in _FENCE_LANGS:
            return False
        lead = rest.lstrip()
    elif "```".startswith(lead):  # nothing yet, or the start of a fence
        return None
    if not lead:
        return None
    if lead[0] not in "{[":
        return False
    m = _FIRST_KEY.match(lead)
    if m:
        return m.group(1) in _CALL_KEYS
    return None if len(lead) < 64 else False


def _held(buf: str, marker: str) -> int:
    """How many characters at the end of ``buf`` could begin ``marker``."""
    for k in range(min(len(marker) - 1, len(buf)), 0, -1):
        if marker.startswith(buf[-k:]):
            return k
    return 0


class ReplySplitter:
    """Feed reply text as it arrives; get events. ``finish()`` at the end of the reply."""

    def __init__(self, fmt: ToolFormat, tools: Sequence[Tool] = (), think: bool = True, calls: bool = True,
                 drop_repeats: bool = False):  # fmt: skip
        self.fmt = fmt
        self.tools = tuple(tools)
        self.calls_enabled = calls and bool(fmt.start or fmt.reply_may_be_call)
        self.state = "start" if think else "lead"
        self.buf = ""
        self.text: list[str] = []
        self.reasoning: list[str] | None = None
        self.calls: list[ToolCall] = []
        self.failures: list[ParseFailure] = []
        # a call that repeats an earlier one of the reply exactly is dropped (under a call
        # grammar that ends at the first repeat, `cera.grammar.call_repeats`)
        self.drop_repeats = drop_repeats
        self._keys: set[str] = set()  # the calls made, by name and arguments

    # -- events ----------------------------------------------------------------------------

    def _text(self, s: str, out: list) -> None:
        if s:
            self.text.append(s)
            out.append(TextDelta(s))

    def _block(self, body: str, out: list, items=None) -> None:
        for item in items if items is not None else self.fmt.parse_block(body, self.tools):
            if isinstance(item, ToolCall):
                key = json.dumps([item.name, item.arguments], sort_keys=True, ensure_ascii=False)
                if key in self._keys and self.drop_repeats:
                    continue
                self._keys.add(key)
                if not item.id:
                    item = attrs.evolve(item, id=self.fmt.new_id())
                self.calls.append(item)
                out.append(ToolCallEvent(item))
            else:
                self.failures.append(item)
                out.append(ToolCallFailed(item))

    # -- the machine ---------------------------------------------------------------------------

    def feed(self, chunk: str) -> list:
        self.buf += chunk
        out: list = []
        while self._step(out, final=False):
            pass
        return out

    def finish(self) -> list:
        out: list = []
        while self._step(out, final=True):
            pass
        return out

    def _step(self, out: list, final: bool) -> bool:
        """Advance once; True when the state changed and another step may go further."""
        buf, fmt = self.buf, self.fmt
        if self.state == "start":  # a <think> block may open the reply
            lead = buf.lstrip()
            if lead.startswith(THINK_OPEN):
                self.buf = lead[len(THINK_OPEN) :]
                self.state, self.reasoning = "think", []
                return True
            if not final and THINK_OPEN.startswith(lead):
                return False  # undecided (empty, or a part of "<think>")
            self.state = "lead"
            return True
        if self.state == "think":
            at = buf.find(THINK_CLOSE)
            if at < 0:
                keep = 0 if final else _held(buf, THINK_CLOSE)
                part = buf[: len(buf) - keep]
                if part:
                    self.reasoning.append(part)
                    out.append(ReasoningDelta(part))
                self.buf = buf[len(buf) - keep :]
                if final:
                    self.state = "text"
                return False
            if buf[:at]:
                self.reasoning.append(buf[:at])
                out.append(ReasoningDelta(buf[:at]))
            self.buf = buf[at + len(THINK_CLOSE) :]
            self.state = "after_think"
            return True
        if self.state in ("after_think", "after_call"):  # whitespace after </think> or a call is not text
            lead = buf.lstrip()
            if not lead and not final:
                self.buf = ""
                return False
            self.buf = lead
            self.state = "lead" if self.state == "after_think" else "text"
            return True
        if self.state == "lead":  # a reply of nothing but JSON may be the calls
            if self.calls_enabled and fmt.reply_may_be_call:
                verdict = _json_reply_start(buf)
                if verdict is None and not final:
                    return False  # undecided: hold it
                if verdict:
                    self.state = "whole"
                    return True
            self.state = "text"
            return True
        if self.state == "text":
            if not self.calls_enabled or not fmt.start:
                self._text(buf, out)
                self.buf = ""
                return False
            at = buf.find(fmt.start)
            if at < 0:
                keep = 0 if final else _held(buf, fmt.start)
                self._text(buf[: len(buf) - keep], out)
                self.buf = buf[len(buf) - keep :]
                return False
            self._text(buf[:at], out)
            self.buf = buf[at + len(fmt.start) :]
            self.state = "call"
            return True
        if self.state == "call":
            if fmt.end:
                at = buf.find(fmt.end)
                if at >= 0:
                    self._block(buf[:at], out)
                    self.buf = buf[at + len(fmt.end) :]
                    self.state = "after_call"
                    return True
            if final:
                self._block(buf, out, self._unclosed(buf))
                self.buf = ""
                self.state = "text"
            return False
        if self.state == "whole":
            if final:
                items = fmt.parse_reply_json(buf, self.tools)
                if items is None:  # cut short (a token limit): the calls it holds whole
                    items = fmt.parse_cut(buf, self.tools)
                self.state = "text"
                if items is None:  # not calls: read it as text (it may still hold call blocks)
                    return True
                self._block(buf, out, items)
                self.buf = ""
            return False
        raise AssertionError(self.state)

    def _unclosed(self, body: str):
        """A block the reply ended inside: its calls if they parse whole (a model may end
        its turn without writing the end marker), else a failure that says it was cut."""
        items = self.fmt.parse_block(body, self.tools)
        if self.fmt.end and any(isinstance(i, ParseFailure) for i in items):
            return [ParseFailure(self.fmt.start + body, f"the reply ended inside a call, before {self.fmt.end!r}")]
        return items

    def result(self) -> ParsedReply:
        return ParsedReply(
            content="".join(self.text).strip(),
            calls=tuple(self.calls),
            failures=tuple(self.failures),
            reasoning="".join(self.reasoning).strip() if self.reasoning is not None else None,
        )
