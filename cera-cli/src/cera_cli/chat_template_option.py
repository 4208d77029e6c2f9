"""``--chat-template FILE|NAME`` for the commands that chat with a model (run, chat): the
template to use instead of the file's own (`cera.text.chat_template.chosen_template`)."""

from __future__ import annotations

import functools

import click

HELP = "Chat template to use instead of the model's: a Jinja file, 'chatml', or the name of a template the file carries."


def chat_template_option(func):
    @click.option("--chat-template", "chat_template", default=None, metavar="FILE|NAME", help=HELP)
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        click.get_current_context().meta["cera.chat_template"] = kwargs.pop("chat_template")
        return func(*args, **kwargs)

    return wrapper


def apply_chat_template(loaded):
    """``loaded`` with the template the command line chose, if it chose one."""
    choice = click.get_current_context().meta.get("cera.chat_template")
    if choice is not None:
        from cera.text.chat_template import chosen_template

        loaded.chat_template = chosen_template(loaded.gguf, choice)
    return loaded
