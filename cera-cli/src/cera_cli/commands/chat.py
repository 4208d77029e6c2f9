"""`cera chat`: an interactive conversation using the model's chat template."""

from __future__ import annotations

import sys

import click

from ..options import echo_err, generate_options, load_model, model_options, sampling_options

HELP = "Commands: /reset starts over, /exit or Ctrl-D quits."


@click.command("chat")
@model_options
@sampling_options
@click.option("--system", default=None, help="System message.")
@click.option("--kv-type", type=click.Choice(["f16", "f32", "q8_0"]), default="f16", show_default=True, help="KV cache precision.")
@click.option("--prompt-cache", "prompt_cache", type=click.Path(file_okay=False), default=None, help="Directory of a prompt cache shared across runs (the chat keeps it warm in memory too).")
def chat_cmd(model, threads, device, ctx_size, system, kv_type, prompt_cache, **kw):
    """Chat with a model. Each turn evaluates only the new messages."""
    from cera.chat import Chat

    options = generate_options(kw)
    loaded = load_model(model, device, threads)
    if prompt_cache:
        loaded.enable_prefix_cache(directory=prompt_cache)
    if loaded.chat_template.is_fallback:
        echo_err(f"cera: {loaded.name} has no chat template; using the generic fallback template")
    session = loaded.new_session(n_ctx=ctx_size, kv_type=kv_type)
    conversation = Chat(session, system=system)
    interactive = sys.stdin.isatty()
    if interactive:
        echo_err(f"cera chat with {loaded.name}. {HELP}")
    while True:
        if interactive:
            sys.stdout.write("> ")
            sys.stdout.flush()
        line = sys.stdin.readline()
        if not line:
            break
        text = line.rstrip("\n")
        if not text.strip():
            continue
        if text.strip() in ("/exit", "/quit"):
            break
        if text.strip() == "/reset":
            session.reset()
            conversation = Chat(session, system=system)
            echo_err("cera: conversation reset")
            continue
        for chunk in conversation.stream(text, options):
            sys.stdout.write(chunk)
            sys.stdout.flush()
        sys.stdout.write("\n")
        sys.stdout.flush()
        s = session.last_summary
        echo_err(
            f"[{s.n_prompt_tokens} new prompt tokens ({conversation.last_reused} reused), "
            f"{s.n_generated} generated at {s.tokens_per_second:.1f} tok/s]"
        )
