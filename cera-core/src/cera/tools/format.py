"""`ToolFormat`: the base class each tool-call wire format fills in (markers, parsing a
block, rendering calls, the grammar of a call)."""

from __future__ import annotations

from collections.abc import Sequence

from .base import ParsedReply, ParseFailure, Tool, ToolCall, new_call_id, special_token_id
from .stream import ReplySplitter


class ToolFormat:
    """A tool-call wire format. A reply is text with call blocks in it: each block opens
    with `start` and closes with `end` ("" when the calls run to the end of the reply).
    Formats with `reply_may_be_call` also read a reply that is nothing but JSON as calls.

    Subclasses set the markers and implement `parse_block`, `render` and `grammar`."""

    name = "?"
    start = ""  # the text that opens a call block (a lazy grammar's trigger)
    end = ""  # the text that closes it ("" when the calls end the reply)
    reply_may_be_call = False  # a reply that is only JSON may be the calls (Llama 3, generic)
    markers: tuple[str, ...] = ()  # template texts that identify the format
    architectures: tuple[str, ...] = ()  # GGUF architectures whose tool template this usually is
    description = ""

    @classmethod
    def detect(cls, template: str) -> bool:
        return any(m in template for m in cls.markers)

    # -- parsing -------------------------------------------------------------------------

    def parse_block(self, body: str, tools: Sequence[Tool]) -> list[ToolCall | ParseFailure]:
        """The calls in the text between a block's markers (markers excluded)."""
        raise NotImplementedError

    def parse_reply_json(self, text: str, tools: Sequence[Tool]) -> list[ToolCall | ParseFailure] | None:
        """A whole reply that is JSON, read as calls; None when it is not a call (an answer
        in JSON stays text). Only for formats with `reply_may_be_call`."""
        return None

    def parse_cut(self, text: str, tools: Sequence[Tool]) -> list[ToolCall | ParseFailure] | None:
        """A reply of calls that was cut before its end (`parse_reply_json` refused it):
        the complete calls it holds and a failure for the cut rest; None when it holds no
        complete call. Only for formats with `reply_may_be_call`."""
        return None

    def parse(self, text: str, tools: Sequence[Tool] = ()) -> ParsedReply:
        """A whole reply split into text, calls and failures."""
        splitter = ReplySplitter(self, tools)
        splitter.feed(text)
        splitter.finish()
        return splitter.result()

    # -- writing ---------------------------------------------------------------------------

    def render(self, calls: Sequence[ToolCall]) -> str:
        """The text a model of this format writes for ``calls``."""
        raise NotImplementedError

    def grammar(self, tools: Sequence[Tool], tokenizer=None, parallel: bool = True) -> str:
        """llguidance Lark for one or more calls (one alone unless ``parallel``), from the
        start marker on (the marker included, by token id where the vocabulary has it as a
        special token)."""
        raise NotImplementedError

    def triggers(self, tokenizer=None) -> list:
        """Where a lazy call grammar takes over: the start marker (by token id when it is a
        special token, which never shows up as text)."""
        from ..grammar import Trigger

        tid = special_token_id(self.start, tokenizer)
        return [Trigger(token=tid) if tid is not None else Trigger(word=self.start)]

    def marker_ids(self, tokenizer) -> dict[int, str]:
        """The markers that are control tokens (text-free when detokenized), by id: the
        chat coordinator puts their text back so the parser sees them."""
        out = {}
        for m in (self.start, self.end):
            tid = tokenizer.token_id(m) if m else None
            if tid is not None and tokenizer.is_control(tid):
                out[tid] = m
        return out

    def new_id(self) -> str:
        """An id for a call the model wrote without one."""
        return new_call_id()

    def system_prompt(self, tools: Sequence[Tool]) -> str | None:
        """Text telling the model about the tools when its chat template does not render
        them (only the generic format needs it)."""
        return None

    def __repr__(self) -> str:
        return f"<ToolFormat {self.name}>"
