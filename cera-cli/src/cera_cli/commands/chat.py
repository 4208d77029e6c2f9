"""`cera chat`: an interactive conversation using the model's chat template.

As people expect a chat in a terminal to behave: line editing and history (the standard
library's readline, where present), Ctrl-C stops the reply being written and returns to the
prompt (a second Ctrl-C, or one at the prompt, or Ctrl-D quits), and a full context never
ends the conversation: the oldest exchanges are dropped (or, with --context-shift, the
session shifts its oldest tokens out while it writes), and stderr says which happened.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import click

from ..chat_template_option import apply_chat_template, chat_template_option
from ..conversation import messages_of, prompt_length, say, set_messages
from ..options import (
    Console,
    context_hint,
    describe_seed,
    generate_options,
    kv_type_options,
    load_model,
    model_options,
    open_session,
    sampling_options,
)
from ..draft import attach_draft, draft_options, drafting
from ..images_cli import PendingImages, attach_projector, image_options
from ..lora_options import apply_loras, lora_options
from ..tools_cli import describe_call, tool_options

HELP = """Commands:
  /system [TEXT]  show the system message, or set it (the conversation goes on)
  /clear          start over, keeping the system message (/reset does the same)
  /save FILE      save the conversation (messages and evaluated state) to FILE
  /load FILE      continue a conversation saved with /save
  /image FILE     attach an image to the next message (repeatable; needs --mmproj)
  /help           this list
  /exit, /quit    quit (so does Ctrl-D; Ctrl-C stops a reply, and quits at the prompt)"""


class LineReader:
    """Reads the user's lines: with readline's editing and a history file when the input
    is a terminal, plain lines from a pipe otherwise."""

    def __init__(self, interactive: bool):
        self.interactive = interactive
        self.readline = None
        self.history = None
        if not interactive:
            return
        try:
            import readline
        except ImportError:  # Windows without pyreadline: input() still works, without history
            return
        from cera.sources.bundles import cache_dir

        self.readline = readline
        self.history = cache_dir() / "chat_history"
        readline.set_history_length(1000)
        try:
            readline.read_history_file(self.history)
        except OSError:
            pass  # no history yet

    def read(self, prompt: str = "> ") -> str | None:
        """The next line, or None at the end of input (Ctrl-D). Ctrl-C raises KeyboardInterrupt."""
        if self.interactive:
            try:
                return input(prompt)
            except EOFError:
                return None
        line = sys.stdin.readline()
        return line.rstrip("\n") if line else None

    def close(self) -> None:
        if self.readline is not None and self.history is not None:
            try:
                self.history.parent.mkdir(parents=True, exist_ok=True)
                self.readline.write_history_file(self.history)
            except OSError:
                pass  # a read-only home must not turn quitting into an error


class StopOnInterrupt:
    """While a reply is written, Ctrl-C cancels it (the session stops at the next token);
    a second Ctrl-C before it has stopped quits."""

    def __init__(self, session):
        self.session = session
        self.count = 0

    def _handler(self, signum, frame):
        self.count += 1
        if self.count > 1:
            raise KeyboardInterrupt
        self.session.cancel()

    def __enter__(self):
        self.previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self.previous)


class ChatLoop:
    def __init__(self, loaded, session, system, options, console: Console, kv_type: str, tools=None,
                 tool_choice: str = "auto", constrain_tools: bool = False, read_line=None, images=()):  # fmt: skip
        from cera.chat.session import Chat

        self.loaded = loaded
        self.session = session
        self.options = options
        self.console = console
        self.kv_type = kv_type
        self.tools = tools
        self.tool_choice, self.constrain_tools = tool_choice, constrain_tools
        self.read_line = read_line  # asks the user for a tool's result
        self.conversation = Chat(session, system=system, tools=tools)
        self.dropped = 0  # exchanges dropped for room, in all
        self.images = PendingImages(loaded, images)  # --image and /image: they go with the next message

    # -- the context ----------------------------------------------------------------------

    @staticmethod
    def _start(msgs) -> int:
        """Index of the first message that may be dropped (after the system message)."""
        return 1 if msgs and msgs[0]["role"] == "system" else 0

    def _tokens_with(self, msgs, content) -> int:
        return prompt_length(self.conversation, msgs + [{"role": "user", "content": content}])

    def make_room(self, content) -> bool:
        """Drop the oldest exchanges until this message and room for a reply fit the
        context. False (and says why) when even the message alone does not fit."""
        n_ctx = self.session.n_ctx
        limit = self.options.max_tokens
        # Room kept for the reply; with --context-shift the session makes room as it writes.
        reserve = 0 if self.options.context_shift else min(limit if limit else n_ctx // 4, n_ctx // 2)
        msgs = messages_of(self.conversation)
        dropped = []  # the user messages of the exchanges dropped
        while self._tokens_with(msgs, content) + reserve > n_ctx and len(msgs) > self._start(msgs):
            start = self._start(msgs)
            dropped.append(msgs.pop(start))
            while len(msgs) > start and msgs[start]["role"] != "user":
                del msgs[start]  # the reply (and any tool turns) of the dropped message go with it
        if dropped:
            set_messages(self.conversation, msgs)
            self.dropped += len(dropped)
            named = ", ".join(_quote(m.get("content") or "") for m in dropped)
            self.console.note(
                f"cera: the context ({n_ctx} tokens) is full: dropped the {len(dropped)} oldest exchange"
                f"{'s' if len(dropped) > 1 else ''} ({named}) to make room ({self.dropped} so far); "
                f"{context_hint(self.session)} to keep more"
            )
        need = self._tokens_with(msgs, content)
        if need + (1 if self.options.context_shift else reserve) > n_ctx:
            self.console.note(
                f"cera: this message is {need} tokens with the conversation's start and the reply needs room too, "
                f"but the context holds {n_ctx}: {context_hint(self.session)} or write less"
            )
            return False
        return True

    # -- a turn ---------------------------------------------------------------------------

    def send(self, line: str) -> None:
        content = self.images.content(line, self.console)
        if content is None or not self.make_room(content):
            return
        self.images.sent()
        shifted = self.session.n_shifted
        out = sys.stdout
        with StopOnInterrupt(self.session):
            if self.tools:
                self.tool_turns({"role": "user", "content": content})
            else:
                for chunk in say(self.conversation, {"role": "user", "content": content}, self.options):
                    out.write(chunk)
                    out.flush()
        out.write("\n")
        out.flush()
        s = self.session.last_summary
        reason = s.finish_reason.value
        if reason == "cancelled":
            self.console.note("[stopped]")
        elif reason == "context":
            self.console.note(
                f"cera: the reply was cut: the context ({self.session.n_ctx} tokens) is full; the next turn drops "
                f"the oldest exchanges ({context_hint(self.session)} or add --context-shift)"
            )
        if self.session.n_shifted > shifted:
            self.console.note(
                f"cera: --context-shift dropped {self.session.n_shifted - shifted} of the oldest tokens during the reply"
            )
        self.console.note(
            f"[{s.n_prompt_tokens} new prompt tokens ({self.conversation.last_reused} reused), "
            f"{s.n_generated} generated at {s.tokens_per_second:.1f} tok/s]"
        )

    def tool_turns(self, message) -> None:
        """A message, and the replies that follow while the model calls tools: each call is
        shown and its result asked for (an empty answer, or the end of input, stops)."""
        from cera.chat.session import Phase, TurnEnd
        from cera.tools import ReasoningDelta, TextDelta, ToolCallEvent, ToolCallFailed

        out = sys.stdout
        self.conversation.ingest(message)
        while True:
            calls = []
            for ev in self.conversation.stream(
                self.options, tool_choice=self.tool_choice, constrain_tools=self.constrain_tools
            ):
                if isinstance(ev, (TextDelta, ReasoningDelta)):
                    out.write(ev.text)
                    out.flush()
                elif isinstance(ev, ToolCallEvent):
                    calls.append(ev.call)
                    out.write(f"\n[call {describe_call(ev.call)}]")
                    out.flush()
                elif isinstance(ev, ToolCallFailed):
                    self.console.note(f"\ncera: a tool call did not parse ({ev.failure.reason}): {ev.failure.raw}")
                elif isinstance(ev, TurnEnd) and ev.result.phase != Phase.TURN_COMPLETE:
                    calls = []  # a cut reply's calls are not answered
            if not calls:
                return
            out.write("\n")
            for call in calls:
                result = self.read_line(f"result of {call.name} ({call.id})> ") if self.read_line else None
                if not result:
                    self.console.note("cera: no result given; the calls stay unanswered (the next message goes on)")
                    return
                self.conversation.ingest_tool_response(call.id, result)

    # -- commands -------------------------------------------------------------------------

    def command(self, line: str) -> bool:
        """Run a /command; False when it asks to quit."""
        name, _, arg = line.strip().partition(" ")
        arg = arg.strip()
        if name in ("/exit", "/quit", "/bye"):
            return False
        if name in ("/clear", "/reset"):
            self.clear()
            self.console.note("cera: conversation cleared" if name == "/clear" else "cera: conversation reset")
        elif name == "/system":
            self.system(arg)
        elif name == "/save":
            self.save(arg)
        elif name == "/load":
            self.load(arg)
        elif name == "/image":
            self.images.attach(arg, self.console)
        elif name in ("/help", "/?"):
            self.console.note(HELP)
        else:
            self.console.note(f"cera: unknown command {name}; /help lists them")
        return True

    def clear(self) -> None:
        from cera.chat.session import Chat

        msgs = messages_of(self.conversation)
        system = msgs[0]["content"] if msgs and msgs[0]["role"] == "system" else None
        self.session.reset()
        self.conversation = Chat(self.session, system=system, tools=self.tools)

    def system(self, text: str) -> None:
        msgs = messages_of(self.conversation)
        has = bool(msgs) and msgs[0]["role"] == "system"
        if not text:
            self.console.note(f"cera: system message: {msgs[0]['content']}" if has else "cera: no system message")
            return
        if has:
            msgs[0]["content"] = text
        else:
            msgs.insert(0, {"role": "system", "content": text})
        set_messages(self.conversation, msgs)
        self.console.note("cera: system message set (the next turn evaluates the conversation again)")

    def save(self, arg: str) -> None:
        if not arg:
            self.console.note("cera: /save needs a file name: /save FILE")
            return
        from cera.errors import CeraError

        try:
            self.conversation.save(Path(arg).expanduser())
        except CeraError as e:
            self.console.note(f"cera: {e}")
            return
        self.console.note(f"cera: saved the conversation ({_count(messages_of(self.conversation))}) to {arg}")

    def load(self, arg: str) -> None:
        if not arg:
            self.console.note("cera: /load needs a file name: /load FILE")
            return
        from cera.formats import checkpoint
        from cera.chat.session import Chat
        from cera.errors import CeraError

        path = Path(arg).expanduser()
        try:
            header = checkpoint.read_header(path)  # the schema checked; the payload is read once, by Chat.load
            n_ctx, kv_type = header.get("n_ctx"), header.get("kv_type")
            if (n_ctx, kv_type) != (self.session.n_ctx, self.session.state.kv_type) and n_ctx:
                # the file's state has its own shape: continue it in a session of that shape
                fresh = self.loaded.new_session(n_ctx=n_ctx, kv_type=kv_type)
                try:
                    conversation = Chat.load(fresh, path, tools=self.tools)
                except BaseException:
                    fresh.close()
                    raise
                self.session.close()
                self.session = fresh
                self.console.note(f"cera: {arg} was saved with -c {n_ctx} --kv-type {kv_type}; continuing with those")
            else:
                conversation = Chat.load(self.session, path, tools=self.tools)
        except CeraError as e:
            self.console.note(f"cera: cannot load {arg}: {e}")
            return
        self.conversation = conversation
        self.console.note(
            f"cera: loaded {arg}: {_count(messages_of(conversation))}, {self.session.n_tokens} tokens evaluated"
        )


def _quote(text, width: int = 40) -> str:
    """A message as a note names it: its first words, quoted (a message of parts: its text
    parts, an image as [image])."""
    if isinstance(text, list):
        text = " ".join(p.get("text", "") if p.get("type") == "text" else "[image]" for p in text if isinstance(p, dict))
    one = " ".join(str(text).split())
    return repr(one if len(one) <= width else one[: width - 3] + "...")


def _count(msgs) -> str:
    """The messages of a conversation as a person counts them: every message but the system
    message (the user's, the replies, tool results), and the exchanges they make."""
    n = sum(1 for m in msgs if m["role"] != "system")
    exchanges = sum(1 for m in msgs if m["role"] == "user")
    return f"{n} message{'s' if n != 1 else ''}, {exchanges} exchange{'s' if exchanges != 1 else ''}"


@click.command("chat")
@model_options
@lora_options
@chat_template_option
@sampling_options
@click.option("--system", "-sys", "--system-prompt", "system", default=None, help="System message.")
@kv_type_options
@click.option(
    "--prompt-cache",
    "prompt_cache",
    type=click.Path(file_okay=False),
    default=None,
    help="Directory of a prompt cache shared across runs (the chat keeps it warm in memory too).",
)
@image_options
@tool_options
@draft_options
def chat_cmd(model, threads, device, ctx_size, n_gpu_layers, verbose, quiet, system, kv_type, prompt_cache, mmproj,
             images, tools, tool_choice, constrain_tools, model_draft, device_draft, loras=(), **kw):  # fmt: skip
    """Chat with a model. Each turn evaluates only the new messages; /help lists the
    commands (/system, /clear, /save, /load, /image). --image files go with the first message."""
    options = generate_options(kw, drafting(model, model_draft, kw["spec"]))
    console = Console(verbose, quiet)
    loaded = apply_chat_template(load_model(model, device, threads, console, n_gpu_layers))
    attach_projector(loaded, mmproj, images, console)
    apply_loras(loaded, loras, console)
    attach_draft(loaded, model, model_draft, device_draft, threads, console, options.spec)
    if prompt_cache:
        loaded.enable_prefix_cache(directory=prompt_cache)
    if loaded.chat_template.is_fallback:
        console.note(f"cera: {loaded.name} has no chat template; using the generic fallback template")
    session = open_session(loaded, ctx_size, kv_type)
    interactive = sys.stdin.isatty()
    if interactive:
        # Ctrl-C must stop a reply or quit even when cera was started with SIGINT ignored
        # (a parent's SIG_IGN is inherited across exec, and Python then leaves it ignored)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    reader = LineReader(interactive)

    def read_result(prompt: str) -> str | None:
        if interactive:
            return reader.read(prompt)
        sys.stdout.write(prompt)
        line = reader.read()
        sys.stdout.write((line or "") + "\n")
        return line

    loop = ChatLoop(
        loaded, session, system, options, console, kv_type, tools, tool_choice, constrain_tools, read_result, images
    )
    if interactive:
        console.note(
            f"cera chat with {loaded.name} ({describe_seed(options)}, context {session.n_ctx} tokens). "
            "/help lists the commands; Ctrl-C stops a reply, Ctrl-D quits."
        )
    try:
        while True:
            try:
                line = reader.read()
            except KeyboardInterrupt:  # Ctrl-C at the prompt: quit
                if interactive:
                    sys.stdout.write("\n")
                break
            if line is None:
                break
            if not line.strip():
                continue
            if line.lstrip().startswith("/") and not loop.command(line):
                break
            if line.lstrip().startswith("/"):
                continue
            try:
                loop.send(line)
            except KeyboardInterrupt:  # a second Ctrl-C during a reply
                sys.stdout.write("\n")
                break
    finally:
        reader.close()
