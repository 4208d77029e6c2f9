"""The chat coordinator: a conversation over a session that knows where it stands.

    chat = loaded.chat(system="You are terse.", tools=[weather_spec])
    chat.ingest("What's the weather in Paris?")
    turn = chat.complete(temperature=0)          # TurnResult(text, tool_calls, finish_reason, usage)
    for call in turn.tool_calls:
        chat.ingest_tool_response(call.id, get_weather(**call.arguments))
    turn = chat.complete(temperature=0)          # evaluates only the tool result and what follows

Phases, and what each allows next (anything else is a `PhaseError` that says what to do):

- ``idle``: nothing to answer yet. `ingest` a message.
- ``prompt ready``: messages wait for a reply. `ingest` more, or `complete`/`stream`.
- ``generating``: a reply is being written. Only `cancel` (from another thread).
- ``turn complete``: the model ended its turn. `ingest` a message, or a tool result for one
  of the calls it made (`ingest_tool_response`).
- ``interrupted``: the reply was cut (token limit, cancel, a stop string or stop token that
  is not the template's end of turn, a full context). `complete` continues the same reply;
  `ingest` closes it as it stands and goes on.

A call that generates no token (``max_tokens=0``, or cancelled before the first) leaves
the prompt ready for a retry. Recovery from anything: `restore` a checkpoint, `reset`, or
`replace_history` (which re-evaluates from the first token that differs).

Each turn evaluates only what the new messages add: the session keeps the reply as the
model wrote it, and the coordinator appends the template's end of turn, the new messages
and the next generation prompt, as found by rendering (`cera.text.template_profile`). Replies
are split as they stream (`cera.tools.ReplySplitter`): text deltas never carry call markup;
calls arrive as `ToolCallEvent`s, and a call that does not parse as a `ToolCallFailed`
(and in `TurnResult.parse_failures`), never as an exception.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from enum import Enum

import attrs

from .prompt import ChatError, ChatPrompt, template_call
from .prompt import message as as_message
from ..errors import CeraError
from ..vision.content_parts import MEDIA_MARKER
from ..generation.events import EndEvent, GenerationSummary
from ..generation.options import GenerateOptions, make_options
from ..generation.sink import FinishReason, Sink
from ..tools import ReasoningDelta, ReplySplitter, TextDelta, ToolCall, ToolCallEvent, ToolCallFailed, normalize_tools
from ..tools.base import ParseFailure


class PhaseError(ChatError):
    """The chat's phase does not allow this call; the message says what does."""


class Phase(str, Enum):
    IDLE = "idle"
    PROMPT_READY = "prompt ready"
    GENERATING = "generating"
    TURN_COMPLETE = "turn complete"
    INTERRUPTED = "interrupted"


@attrs.frozen
class Usage:
    prompt_tokens: int  # the conversation before the reply, in tokens (OpenAI's prompt_tokens)
    evaluated_tokens: int  # ... of which this turn evaluated (the rest was already in the session)
    completion_tokens: int

    @property
    def cached_tokens(self) -> int:
        return self.prompt_tokens - self.evaluated_tokens

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@attrs.frozen
class TurnResult:
    text: str  # the reply's text, call markup and a <think> block removed
    tool_calls: tuple[ToolCall, ...]
    finish_reason: FinishReason
    usage: Usage
    phase: Phase  # where the chat stands after the turn
    reasoning: str | None = None  # a leading <think> block's text
    parse_failures: tuple[ParseFailure, ...] = ()
    raw: str = ""  # the reply as the model wrote it (call markup included)
    summary: GenerationSummary | None = None

    @property
    def openai_finish_reason(self) -> str:
        if self.tool_calls:
            return "tool_calls"
        return "length" if self.finish_reason in (FinishReason.LENGTH, FinishReason.CONTEXT) else "stop"


@attrs.frozen
class TurnEnd:
    """The last event of `ChatSession.stream`: the turn's result."""

    result: TurnResult


@attrs.frozen
class ChatCheckpoint:
    session: object  # cera.generation.session.Checkpoint
    state: dict


class ChatSession:
    """A conversation on a `cera.generation.session.Session` (see the module docstring)."""

    def __init__(self, session, system: str | None = None, tools=None, *, template=None, tool_format=None,
                 allow_reevaluation: bool = False):  # fmt: skip
        self.session = session
        self.tokenizer = session.tokenizer
        self.allow_reevaluation = allow_reevaluation
        self.prompt = ChatPrompt(session.loaded, tools, template=template, tool_format=tool_format,
                                 allow_reevaluation=allow_reevaluation)  # fmt: skip
        self.template, self.profile, self.tool_format = (
            self.prompt.template,
            self.prompt.profile,
            self.prompt.tool_format,
        )
        self._history: list[dict] = []  # messages whose text is in the session
        self._pending: list[dict] = [{"role": "system", "content": system}] if system else []
        self._rendered: str | None = None  # the render the session holds (up to a generation prompt)
        self._resync = False  # history replaced: the next turn syncs tokens from the first difference
        self._reply: dict | None = None  # a reply cut short, open to continue: {"text", "tokens", "splitter"}
        self._phase = Phase.IDLE
        self._open_calls: dict[str, str] = {}  # call id -> name, of the last turn's calls
        self._lock = threading.Lock()
        self.last_reused = 0  # tokens the last turn did not evaluate again
        self.last_result: TurnResult | None = None

    # -- where it stands --------------------------------------------------------------------

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def messages(self) -> list[dict]:
        """The conversation (copies): evaluated messages, then those waiting."""
        out = [dict(m) for m in self._history]
        if self._reply is not None:
            out.append(self._reply_message())
        return out + [dict(m) for m in self._pending]

    @messages.setter
    def messages(self, messages) -> None:
        self.replace_history(messages)

    @property
    def tools(self) -> tuple:
        return self.prompt.tools

    @tools.setter
    def tools(self, tools) -> None:
        """New tools change the prompt's tool list: the next turn re-evaluates from there."""
        new = normalize_tools(tools)
        if new != self.prompt.tools:
            self._need_phase_not(Phase.GENERATING, "change the tools")
            self.prompt.tools = new
            self._resync = True

    def _need_phase_not(self, phase, what):
        if self._phase == phase:
            raise PhaseError(f"cannot {what} while a reply is being generated; cancel() it first")

    # -- messages in ------------------------------------------------------------------------

    def ingest(self, message, role: str = "user") -> None:
        """Add a message (a string is a ``role`` message, by default the user's)."""
        m = as_message(message, role)
        self._need_phase_not(Phase.GENERATING, "add a message")
        if m["role"] == "tool":
            self._tool_message(m)
        self._close_reply()
        self._pending.append(m)
        self._phase = Phase.PROMPT_READY

    def ingest_tool_response(self, call_id: str, content) -> None:
        """The result of one of the calls of the last reply, as a ``tool`` message."""
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False)
        self.ingest({"role": "tool", "tool_call_id": call_id, "content": content})

    def _tool_message(self, m: dict) -> None:
        call_id = m.get("tool_call_id")
        if self._phase not in (Phase.TURN_COMPLETE, Phase.PROMPT_READY, Phase.INTERRUPTED) or not self._open_calls:
            raise PhaseError("a tool result answers a call of the model's last reply, and there is none to answer")
        if call_id not in self._open_calls:
            raise ChatError(
                f"no call of the last reply has the id {call_id!r}; its calls: "
                + ", ".join(f"{i} ({n})" for i, n in self._open_calls.items())
            )
        m.setdefault("name", self._open_calls[call_id])

    def _close_reply(self) -> None:
        """Make a reply that was cut short part of the history as it stands."""
        if self._reply is None:
            return
        self._history.append(self._reply_message())
        self._reply = None

    def _reply_message(self) -> dict:
        r = self._reply
        parsed = r["splitter"].result()
        if self.profile is not None and not self.profile.renders_tool_calls:
            return {"role": "assistant", "content": r["text"]}  # the template shows calls only as written
        msg = {"role": "assistant", "content": parsed.content}
        if parsed.calls:
            msg["tool_calls"] = [template_call(c) for c in parsed.calls]
        return msg

    # -- history ------------------------------------------------------------------------------

    def replace_history(self, messages) -> None:
        """Take ``messages`` as the whole conversation. When they continue what is held,
        nothing is re-evaluated; otherwise the next turn evaluates from the first token
        that differs."""
        self._need_phase_not(Phase.GENERATING, "replace the history")
        msgs = [as_message(m) for m in messages]
        self._close_reply()
        held = self.messages
        if msgs[: len(held)] == held:
            self._pending.extend(msgs[len(held) :])
        else:
            self._history, self._pending, self._reply = [], msgs, None
            self._resync = True
        self._open_calls = {}
        self._phase = Phase.PROMPT_READY if self._pending else Phase.IDLE

    def reset(self, system: str | None = None) -> None:
        """An empty conversation (with a new system message, if given) on a cleared session."""
        self._need_phase_not(Phase.GENERATING, "reset")
        self.session.reset()
        self._history, self._reply, self._rendered, self._resync = [], None, None, False
        self._pending = [{"role": "system", "content": system}] if system else []
        self._open_calls = {}
        self._phase = Phase.IDLE

    def checkpoint(self) -> ChatCheckpoint:
        self._need_phase_not(Phase.GENERATING, "checkpoint")
        return ChatCheckpoint(self.session.checkpoint(), self._state())

    def restore(self, cp: ChatCheckpoint) -> None:
        self._need_phase_not(Phase.GENERATING, "restore")
        self.session.restore(cp.session)
        self._set_state(cp.state)

    def _state(self) -> dict:
        reply = None
        if self._reply is not None:
            reply = {"text": self._reply["text"], "tokens": list(self._reply["tokens"])}
        return {
            "history": [dict(m) for m in self._history],
            "pending": [dict(m) for m in self._pending],
            "rendered": self._rendered,
            "resync": self._resync,
            "phase": self._phase.value,
            "open_calls": dict(self._open_calls),
            "reply": reply,
            "tools": [t.to_openai() for t in self.prompt.tools],
        }

    def _set_state(self, state: dict) -> None:
        self._history = [dict(m) for m in state["history"]]
        self._pending = [dict(m) for m in state["pending"]]
        self._rendered = state["rendered"]
        self._resync = state["resync"]
        self._phase = Phase(state["phase"])
        self._open_calls = dict(state["open_calls"])
        self.prompt.tools = normalize_tools(state.get("tools") or [])
        self._reply = None
        if state.get("reply") is not None:
            self._reply = self._new_reply()
            self._reply["tokens"] = list(state["reply"]["tokens"])
            self._feed(self._reply, state["reply"]["text"])
            if self._phase == Phase.TURN_COMPLETE:
                self._reply["splitter"].finish()

    def save(self, path) -> None:
        """Write the chat (its session's state, messages and phase) to a checkpoint file."""
        from ..formats import checkpoint

        self._need_phase_not(Phase.GENERATING, "save")
        with self.session._lock:
            checkpoint.save(self.session, path, extra={"chat": self._state()})

    @classmethod
    def load(cls, session, path, **kw) -> ChatSession:
        """A chat continued from a checkpoint written by `save`, on ``session`` (a fresh
        session of the same model and KV precision)."""
        from ..formats import checkpoint

        header, snap, last = checkpoint.load_checked(session, path)  # nothing applied yet
        data = header.get("extra", {}).get("chat")
        if not isinstance(data, dict) or not isinstance(data.get("history", data.get("messages")), list):
            raise checkpoint.CheckpointError(f"{path} is a session checkpoint, not a chat's (it has no messages)")
        chat = cls(session, **kw)
        try:
            _check_chat_state(data)
            if "history" in data:
                chat._set_state(data)
            else:  # a chat saved before phases: its messages are in the session up to its last reply
                chat._history = [dict(m) for m in data["messages"]]
                chat._tools = normalize_tools(data.get("tools") or [])
                chat._resync = True
                chat._phase = Phase.TURN_COMPLETE if chat._history else Phase.IDLE
        except (KeyError, TypeError, ValueError, AttributeError, CeraError) as e:
            raise checkpoint.CheckpointError(
                f"{path}: the chat state it holds is not valid ({type(e).__name__}: {str(e)[:200]}); the session was left as it was"
            ) from None
        checkpoint.apply(session, header, snap, last)
        return chat

    # -- rendering ------------------------------------------------------------------------------

    def render(self, messages=None, add_generation_prompt: bool = True) -> str:
        """The conversation (or ``messages``) as the template renders it for this chat."""
        return self.prompt.render(self.messages if messages is None else messages, add_generation_prompt)

    def prompt_tokens(self) -> list[int]:
        """The whole conversation so far with a generation prompt, tokenized (as a fresh
        session would evaluate it)."""
        return self.prompt.encode(self.render())

    def _sync_prompt(self) -> int:
        """Put the waiting messages and the generation prompt into the session; returns the
        tokens of the conversation that were already there."""
        s = self.session
        self._close_reply()
        history = self._history
        new = self.render(history + self._pending, add_generation_prompt=True)
        prev = self._rendered
        if prev is None or self._resync or self.profile is None or not s.tokens and not s.pending:
            reused = s.sync_tokens(self.prompt.encode(new))
        elif new == prev:  # the prompt is in already (a retry after a call that wrote nothing)
            reused = len(s.tokens)
        else:
            ids = self._continuation(prev, history, new)
            reused = len(s.tokens)
            s.append_tokens(ids)
        self._history.extend(self._pending)
        self._pending = []
        self._rendered, self._resync = new, False
        return reused

    def _continuation(self, prev: str, history: list[dict], new: str) -> list[int]:
        """The tokens that take the session from the reply it holds to ``new``: the end
        of the reply, the new messages, the generation prompt."""
        from ..text.template_profile import TemplateProfileError

        closed = self.render(history, add_generation_prompt=False)
        label = f"the chat template{self.template._label()}"
        if not new.startswith(prev) or not closed.startswith(prev):
            if self.allow_reevaluation:
                return self._resync_ids(new)
            raise TemplateProfileError(
                f"{label} renders the earlier conversation differently once a new message is added, so the new "
                f"message cannot be evaluated alone (pass allow_reevaluation=True to re-evaluate from the first "
                f"difference, or replace_history() to start over)"
            )
        tail_closed, tail_new = closed[len(prev) :], new[len(prev) :]
        c = 0
        for a, b in zip(tail_closed, tail_new, strict=False):
            if a != b:
                break
            c += 1
        end = self.profile.turn_end
        at = tail_new.rfind(end, 0, c) if end else c
        if at < 0:
            if self.allow_reevaluation:
                return self._resync_ids(new)
            raise TemplateProfileError(f"{label} does not end this reply with {end!r} as it ends others")
        delta = tail_new[at + len(end) :] if end else tail_new[c:]
        if MEDIA_MARKER in delta and self.prompt._images.get(new):  # a new image: placed by the whole prompt's encoding
            return self._resync_ids(new)
        return list(self.profile.turn_end_ids) + self.tokenizer.encode(delta, add_special=False, parse_special=True)

    def _resync_ids(self, new: str) -> list[int]:
        s = self.session
        s.sync_tokens(self.prompt.encode(new))
        ids, s.pending = list(s.pending), []
        return ids

    # -- replies --------------------------------------------------------------------------------

    def _new_reply(self, calls: bool = True) -> dict:
        return {"text": "", "tokens": [], "splitter": self.prompt.splitter(calls)}

    def _feed(self, reply: dict, text: str) -> list:
        reply["text"] += text
        return reply["splitter"].feed(text)

    def _options(self, options, kw, tool_choice, constrain_tools):
        return self.prompt.turn(make_options(options, kw), tool_choice, constrain_tools)

    def stream(self, options: GenerateOptions | None = None, *, tool_choice="auto", constrain_tools: bool = False,
               **kw) -> Iterator[TextDelta | ReasoningDelta | ToolCallEvent | ToolCallFailed | TurnEnd]:  # fmt: skip
        """Write the reply: text deltas (never call markup), reasoning deltas, each call as
        it completes (or its parse failure), then `TurnEnd` with the `TurnResult`.

        ``tool_choice``: "auto" (the model decides), "none" (no calls), "required" (the reply
        is calls), or a tool's name (a call to it). ``constrain_tools``: under "auto", hold
        calls to the declared tools and their schemas once the model starts one (required
        and named choices are always constrained)."""
        with self._lock:
            if self._phase == Phase.GENERATING:
                raise PhaseError("a reply is already being generated")
            if self._phase in (Phase.IDLE, Phase.TURN_COMPLETE):
                what = (
                    "ingest a message first"
                    if self._phase == Phase.IDLE
                    else "the model finished its turn; ingest a message (or a tool result) first"
                )
                raise PhaseError(f"nothing to answer: {what}")
            options, processors, choice = self._options(options, kw, tool_choice, constrain_tools)
            continuing = self._phase == Phase.INTERRUPTED
            if not continuing:
                self.last_reused = self._sync_prompt()
                self._reply = self._new_reply(calls=choice != "none")
                self._open_calls = {}
            held = len(self.session.tokens) + len(self.session.pending)
            self._phase = Phase.GENERATING
        yield from self._generate(options, processors, held, continuing)

    def _generate(self, options, processors, held, continuing):
        s, reply = self.session, self._reply
        markers = self.prompt.marker_ids()
        ok = False
        events = s.events(options, processors=processors)
        try:
            for ev in events:
                if isinstance(ev, EndEvent):
                    summary = ev.summary
                    out = self._feed(reply, ev.text)
                    break
                reply["tokens"].append(ev.id)
                out = self._feed(reply, markers.get(ev.id, ev.text))
                yield from out
            else:  # pragma: no cover - events always end with an EndEvent
                raise ChatError("the generation ended without a summary")
            ok = True
        finally:
            if not ok:  # an error or an abandoned stream: the reply stands as it was cut
                events.close()
                self._phase = Phase.INTERRUPTED if reply["tokens"] or continuing else Phase.PROMPT_READY
                if self._phase == Phase.PROMPT_READY:
                    self._reply = None
        yield from out
        complete = summary.finish_reason == FinishReason.GRAMMAR or (
            summary.finish_reason == FinishReason.STOP_TOKEN and summary.stop_token in self.tokenizer.eog_ids
        )
        if complete:
            yield from reply["splitter"].finish()
            self._phase = Phase.TURN_COMPLETE
        elif not reply["tokens"] and not continuing:
            self._phase = Phase.PROMPT_READY  # nothing written: the prompt waits for a retry
            self._reply = None
        else:
            self._phase = Phase.INTERRUPTED
        parsed = reply["splitter"].result() if complete else _peek(reply)
        if complete:
            self._open_calls = {c.id: c.name for c in parsed.calls}
            self._history.append(self._reply_message())
            self._reply = None
        result = TurnResult(
            text=parsed.content,
            tool_calls=parsed.calls,
            finish_reason=summary.finish_reason,
            usage=Usage(held, summary.n_prompt_tokens, summary.n_generated),
            phase=self._phase,
            reasoning=parsed.reasoning,
            parse_failures=parsed.failures,
            raw=reply["text"],
            summary=summary,
        )
        self.last_result = result
        yield TurnEnd(result)

    def complete(self, options: GenerateOptions | None = None, *, tool_choice="auto", constrain_tools: bool = False,
                 sink: Sink | None = None, **kw) -> TurnResult:  # fmt: skip
        """Write the reply and return it (see `stream`). ``sink`` receives the text deltas."""
        result = None
        for ev in self.stream(options, tool_choice=tool_choice, constrain_tools=constrain_tools, **kw):
            if isinstance(ev, TextDelta) and sink is not None:
                sink.on_text(ev.text)
            elif isinstance(ev, TurnEnd):
                result = ev.result
        if sink is not None:
            sink.on_finish(result.finish_reason)
        return result

    def stream_json(self, schema=None, options: GenerateOptions | None = None, **kw) -> Iterator[str]:
        """Write the reply as one JSON value (valid under ``schema``, or any JSON object),
        yielding its text as it comes."""
        from ..grammar import Constraint

        constraint = Constraint.json() if schema is None else Constraint.json_schema(schema)
        for ev in self.stream(options, tool_choice="none", grammar=constraint, **kw):
            if isinstance(ev, TextDelta):
                yield ev.text

    def cancel(self) -> None:
        """Stop the reply being generated (from another thread); the chat is then interrupted."""
        self.session.cancel()

    # -- conveniences -----------------------------------------------------------------------------

    def reply(self, content, options: GenerateOptions | None = None, **kw) -> Iterator[str]:
        """Ingest a user message and stream the reply's text."""
        self.ingest(content)
        for ev in self.stream(options, **kw):
            if isinstance(ev, TextDelta):
                yield ev.text

    def send(
        self, content, options: GenerateOptions | None = None, sink: Sink | None = None, **kw
    ) -> GenerationSummary:
        """Ingest a user message and complete the reply; returns the generation summary."""
        self.ingest(content)
        return self.complete(options, sink=sink, **kw).summary


def _peek(reply: dict):
    """The reply cut so far, parsed as if it ended here (the open splitter keeps going)."""
    probe = ReplySplitter(reply["splitter"].fmt, reply["splitter"].tools, calls=reply["splitter"].calls_enabled)
    probe.feed(reply["text"])
    probe.finish()
    return probe.result()


Chat = ChatSession  # the name of earlier releases


def _check_chat_state(data: dict) -> None:
    """The shape of a saved chat's state (`ChatSession._state`), checked before any of it is used."""
    messages = data.get("history", data.get("messages"))
    lists = [messages] + [data[k] for k in ("pending",) if k in data]
    for items in lists:
        if not isinstance(items, list) or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in items):
            raise ValueError("messages should be a list of objects with a role")
    if "history" in data:
        if not isinstance(data.get("rendered"), (str, type(None))) or not isinstance(data.get("resync"), bool):
            raise ValueError("rendered should be text and resync true or false")
        if not isinstance(data.get("open_calls"), dict) or not isinstance(data.get("tools") or [], list):
            raise ValueError("open_calls should be an object and tools a list")
        reply = data.get("reply")
        if reply is not None and not (isinstance(reply, dict) and isinstance(reply.get("text"), str)
                                      and isinstance(reply.get("tokens"), list)):  # fmt: skip
            raise ValueError("reply should be an object with text and tokens")

__all__ = [
    "Chat",
    "ChatCheckpoint",
    "ChatError",
    "ChatSession",
    "Phase",
    "PhaseError",
    "TurnEnd",
    "TurnResult",
    "Usage",
]
