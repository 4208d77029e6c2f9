"""Tool calling from the command line: ``--tools`` (a JSON file as @FILE, or inline JSON:
a list of OpenAI-style function specs, or an object with a "tools" list), ``--tool-choice``
and ``--constrain-tools`` for `cera run` and `cera chat`.

`cera run --tools` prints on stdout only the JSON array of the calls the model made (``[]``
when it answered in prose), so ``| jq`` works; the reply's text and the timings go to
stderr. `cera chat --tools` shows each call and asks for its result.
"""

from __future__ import annotations

import functools
import json
import sys

import click


def tool_options(func):
    @click.option(
        "--tools",
        "tools",
        default=None,
        metavar="@FILE|JSON",
        help="Tools the model may call: OpenAI-style function specs, as @file.json or inline JSON.",
    )
    @click.option(
        "--tool-choice",
        "tool_choice",
        default="auto",
        show_default=True,
        metavar="auto|none|required|NAME",
        help="Whether the model may call (auto), must not (none), must call some tool (required) or one by name.",
    )
    @click.option("--constrain-tools", "constrain_tools", is_flag=True,
                  help="Hold calls to the declared tools and their schemas (required arguments included) once the model starts one.")  # fmt: skip
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        spec = kwargs.pop("tools")
        kwargs["tools"] = load_tools(spec) if spec is not None else None
        choice, constrain = kwargs["tool_choice"], kwargs["constrain_tools"]
        if kwargs["tools"] is None and (choice != "auto" or constrain):
            raise click.UsageError("--tool-choice and --constrain-tools need --tools")
        return func(*args, **kwargs)

    return wrapper


def load_tools(value: str):
    """The tool specs of --tools, checked (a bad file or spec names itself and the problem)."""
    from cera.tools import ToolError, normalize_tools

    where = "the --tools JSON"
    text = value
    if value.startswith("@"):
        path = value[1:]
        where = path
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise click.BadParameter(f"cannot read {path}: {e.strerror}", param_hint="'--tools'") from None
        except UnicodeDecodeError:
            raise click.BadParameter(f"{path} is not UTF-8 text", param_hint="'--tools'") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        hint = "" if value.startswith("@") else " (a file goes as @FILE)"
        raise click.BadParameter(
            f"{where} is not JSON: {e.msg} at line {e.lineno}, column {e.colno}{hint}", param_hint="'--tools'"
        ) from None
    if isinstance(data, dict) and "tools" in data:
        data = data["tools"]
    try:
        tools = normalize_tools(data)
    except ToolError as e:
        raise click.BadParameter(f"{where}: {e}", param_hint="'--tools'") from None
    if not tools:
        raise click.BadParameter(f"{where} lists no tools", param_hint="'--tools'")
    return [t.to_openai() for t in tools]


def run_turn(conversation, text: str, options, tool_choice: str, constrain: bool) -> object:
    """`cera run --tools`: one turn; the text to stderr as it comes, the calls' JSON array
    to stdout at the end. Returns the turn's result."""
    from cera.chat.session import TurnEnd
    from cera.tools import TextDelta, ToolCallFailed

    conversation.ingest(text)
    result = None
    wrote = False
    for ev in conversation.stream(options, tool_choice=tool_choice, constrain_tools=constrain):
        if isinstance(ev, TextDelta):
            sys.stderr.write(ev.text)
            sys.stderr.flush()
            wrote = True
        elif isinstance(ev, ToolCallFailed):
            click.echo(f"cera: a tool call did not parse ({ev.failure.reason}): {ev.failure.raw}", err=True)
        elif isinstance(ev, TurnEnd):
            result = ev.result
    if wrote:
        sys.stderr.write("\n")
    sys.stdout.write(json.dumps([c.to_json() for c in result.tool_calls], ensure_ascii=False) + "\n")
    sys.stdout.flush()
    return result


def describe_call(call) -> str:
    return f"{call.name}({json.dumps(call.arguments, ensure_ascii=False)})"
