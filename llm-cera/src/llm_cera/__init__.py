"""llm-cera: cera's models inside the `llm` command line tool and Python library.

Models are named ``cera/<source>``: every language-model bundle cera knows
(``cera/smollm2-135m-instruct-q4_1``; the default one is also ``cera``), every model added
with ``llm cera add``, and any ``.gguf`` path written as ``-m cera/<path>``.

A conversation keeps its cera session between turns: each turn renders the whole
conversation with the model's chat template and the session evaluates only what differs
from what it already holds (the KV cache of the earlier turns is reused), so `llm chat`
costs one new message per turn, not the whole history.

Nothing is loaded when llm lists models; a model loads (and a bundle is fetched) on its
first prompt, once per process.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import OrderedDict
from pathlib import Path

import click
import llm
from pydantic import Field

PREFIX = "cera/"
MAX_SESSIONS = 4  # conversations whose KV cache a model keeps at once (least recently used go)

_loaded: dict[str, object] = {}  # resolved path -> cera LoadedModel, shared by every model object
_load_lock = threading.Lock()


def _registry_file() -> Path:
    return llm.user_dir() / "cera-models.json"


def _saved_models() -> dict[str, str]:
    """name -> path, of the models added with `llm cera add`."""
    try:
        data = json.loads(_registry_file().read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _paths_in_argv() -> list[str]:
    # llm resolves -m NAME only among the models registered, and a hook is not told which
    # name is wanted: a ``cera/<path>`` on the command line naming an existing file is
    # registered so that `llm -m cera/./model.gguf` works without `llm cera add` first.
    out = []
    for arg in sys.argv[1:]:
        for value in (arg, arg.partition("=")[2]):
            if (
                value.startswith(PREFIX)
                and value.endswith(".gguf")
                and Path(value[len(PREFIX) :]).expanduser().is_file()
            ):
                out.append(value[len(PREFIX) :])
    return out


@llm.hookimpl
def register_models(register):
    from cera.sources import bundles

    seen = set()

    def add(name: str, source: str, aliases=()):
        if name in seen:
            return
        seen.add(name)
        register(CeraModel(PREFIX + name, source), aliases=aliases)

    for name in bundles.model_names():
        add(name, name, aliases=("cera",) if name == bundles.DEFAULT_MODEL else ())
    for name, path in _saved_models().items():
        add(name, path)
    for path in _paths_in_argv():
        add(path, path)


@llm.hookimpl
def register_commands(cli):
    @cli.group(name="cera")
    def cera_group():
        "Models run locally by cera"

    @cera_group.command(name="add")
    @click.argument("path", type=click.Path(exists=True, dir_okay=False))
    @click.option("--name", default=None, help="Model name after cera/ (default: the file's name without .gguf).")
    def add_cmd(path, name):
        "Make a GGUF file available as -m cera/NAME."
        path = str(Path(path).expanduser().resolve())
        name = name or Path(path).name.removesuffix(".gguf")
        saved = _saved_models()
        saved[name] = path
        _registry_file().write_text(json.dumps(saved, indent=2))
        click.echo(f"{PREFIX}{name} -> {path}")

    @cera_group.command(name="remove")
    @click.argument("name")
    def remove_cmd(name):
        "Forget a model added with `llm cera add`."
        saved = _saved_models()
        key = name.removeprefix(PREFIX)
        if key not in saved:
            raise click.ClickException(
                f"{PREFIX}{key} was not added with `llm cera add` (added: {', '.join(saved) or 'none'})"
            )
        del saved[key]
        _registry_file().write_text(json.dumps(saved, indent=2))

    @cera_group.command(name="models")
    def models_cmd():
        "List the cera models llm can use."
        from cera.sources import bundles

        for e in bundles.listing("llm"):
            click.echo(f"{PREFIX}{e.name}  ({'cached' if e.cached else 'fetched on first use'})")
        for name, path in _saved_models().items():
            click.echo(f"{PREFIX}{name}  ({path})")


def _load(source: str):
    """The cera model for a source, loaded once per process."""
    import cera
    from cera.sources import resolve

    with _load_lock:
        local = resolve(source, quiet=True)
        path = str(local.path)
        if path not in _loaded:
            _loaded[path] = cera.load(local, quiet=True)
        return _loaded[path]


def _text_of(message) -> str:
    from llm.parts import TextPart

    return "".join(p.text for p in message.parts if isinstance(p, TextPart))


def _tool_specs(prompt) -> list[dict]:
    """llm's tools as the OpenAI-style function specs cera's tool calling takes."""
    out = []
    for t in getattr(prompt, "tools", None) or ():
        spec = {"name": t.name, "parameters": t.input_schema or {"type": "object", "properties": {}}}
        if t.description:
            spec["description"] = t.description
        out.append({"type": "function", "function": spec})
    return out


def _chat_messages(message) -> list[dict]:
    """One llm message as chat-template messages: an assistant's calls go with its text (as
    cera's chat writes them, so the session's tokens still match), a tool message becomes
    one message per result."""
    from llm.parts import ToolCallPart, ToolResultPart

    if message.role == "tool":
        return [
            {
                "role": "tool",
                "tool_call_id": p.tool_call_id or "",
                "name": p.name,
                "content": p.output if p.exception is None else f"error: {p.exception}",
            }
            for p in message.parts
            if isinstance(p, ToolResultPart)
        ]
    if message.role not in ("system", "user", "assistant"):
        return []
    out = {"role": message.role, "content": _text_of(message)}
    calls = [p for p in message.parts if isinstance(p, ToolCallPart)] if message.role == "assistant" else []
    if calls:
        out["tool_calls"] = [
            {"id": p.tool_call_id or "", "type": "function", "function": {"name": p.name, "arguments": p.arguments}}
            for p in calls
        ]
    return [out]


class CeraModel(llm.Model):
    can_stream = True
    # --schema: cera's JSON-Schema constraint (cera.grammar) masks every token that would
    # leave the schema, so the reply is JSON of that shape. Tools (-T, --functions, chain()):
    # cera's tool calling renders them with the model's chat template and parses the calls
    # out of the reply (cera.tools); llm runs them and sends the results back.
    supports_schema = True
    supports_tools = True

    class Options(llm.Options):
        temperature: float | None = Field(
            None, ge=0, description="Temperature; 0 for greedy decoding (cera's default: 0.8)"
        )
        max_tokens: int | None = Field(
            None, ge=-1, description="Tokens to generate at most (-1: until the context is full; default 1024)"
        )
        top_k: int | None = Field(None, ge=0, description="Top-k (0: off)")
        top_p: float | None = Field(None, gt=0, le=1, description="Top-p (1: off)")
        min_p: float | None = Field(None, ge=0, le=1, description="Min-p (0: off)")
        repeat_penalty: float | None = Field(None, gt=0, description="Repetition penalty (1: off)")
        seed: int | None = Field(None, ge=-1, description="Random seed (-1 or unset: random; the one used is logged)")
        stop: str | None = Field(None, description="A stop string")
        ctx_size: int | None = Field(
            None, ge=16, description="Context size in tokens (default: the model's, up to 4096)"
        )

    def __init__(self, model_id: str, source: str):
        self.model_id = model_id
        self.source = source
        self._sessions: OrderedDict = OrderedDict()  # conversation key -> cera Chat

    def __str__(self) -> str:
        return f"cera: {self.model_id}"

    def _chat(self, key, n_ctx):
        """The chat (session) of a conversation: kept between turns, least recent dropped."""
        from cera.chat.session import Chat

        chat = self._sessions.get(key)
        if chat is not None and (n_ctx is None or chat.session.n_ctx == n_ctx):
            self._sessions.move_to_end(key)
            return chat
        if chat is not None:
            chat.session.close()
        chat = Chat(_load(self.source).new_session(n_ctx=n_ctx))
        self._sessions[key] = chat
        while len(self._sessions) > MAX_SESSIONS:
            _, old = self._sessions.popitem(last=False)
            old.session.close()
        return chat

    def _messages(self, prompt, conversation) -> list[dict]:
        """The whole conversation as chat-template messages, this turn's last."""
        chain = getattr(prompt, "messages", None)
        if chain:
            return [out for m in chain for out in _chat_messages(m)]
        # older llm: rebuild from the conversation's responses
        out = [{"role": "system", "content": prompt.system}] if prompt.system else []
        for r in conversation.responses if conversation else []:
            out.append({"role": "user", "content": r.prompt.prompt})
            out.append({"role": "assistant", "content": r.text_or_raise()})
        out.append({"role": "user", "content": prompt.prompt})
        return out

    def execute(self, prompt, stream, response, conversation):
        import secrets

        from cera.errors import CeraError
        from cera.generation.options import GenerateOptions

        o = prompt.options
        values = {
            k: getattr(o, k)
            for k in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty")
            if getattr(o, k) is not None
        }
        values["max_tokens"] = 1024 if o.max_tokens is None else (None if o.max_tokens == -1 else o.max_tokens)
        if o.stop:
            values["stop"] = (o.stop,)
        greedy = values.get("temperature", 0.8) == 0
        seed = None if greedy else (o.seed if o.seed is not None and o.seed >= 0 else secrets.randbelow(2**32))
        values["seed"] = seed
        if prompt.schema:
            values["json_schema"] = prompt.schema
        messages = self._messages(prompt, conversation)
        if not messages or messages[-1]["role"] not in ("user", "tool"):
            raise llm.ModelError("cera needs a user message (or tool results) to answer")
        from cera.chat.session import TurnEnd
        from cera.tools import TextDelta, ToolCallEvent, ToolCallFailed

        result, failures = None, []
        try:
            options = GenerateOptions(**values)
            chat = self._chat(conversation.id if conversation is not None else None, o.ctx_size)
            chat.tools = _tool_specs(prompt)
            # the whole conversation as llm has it: the session keeps what still matches
            chat.replace_history(messages)
            for ev in chat.stream(options):
                if isinstance(ev, TextDelta):
                    yield ev.text
                elif isinstance(ev, ToolCallEvent):
                    c = ev.call
                    response.add_tool_call(llm.ToolCall(name=c.name, arguments=dict(c.arguments), tool_call_id=c.id))
                elif isinstance(ev, ToolCallFailed):
                    failures.append({"raw": ev.failure.raw, "reason": ev.failure.reason})
                elif isinstance(ev, TurnEnd):
                    result = ev.result
        except CeraError as e:
            raise llm.ModelError(f"cera: {e}") from e
        s = result.summary
        response.set_usage(input=s.n_prompt_tokens + chat.last_reused, output=s.n_generated)
        response.response_json = {
            "finish_reason": s.finish_reason.value,
            "prompt_tokens_evaluated": s.n_prompt_tokens,
            "prompt_tokens_reused": chat.last_reused,
            "seed": seed,
            "tokens_per_second": round(s.tokens_per_second, 2),
        }
        if failures:  # markup the model meant as a call that did not parse: never shown as text
            response.response_json["tool_call_errors"] = failures
