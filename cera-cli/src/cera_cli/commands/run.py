"""`cera run`: generate text from a prompt, streaming it to stdout."""

from __future__ import annotations

import sys

import click

from ..options import echo_err, generate_options, load_model, model_options, sampling_options


@click.command("run")
@model_options
@sampling_options
@click.option("-p", "--prompt", required=True, help="The prompt ('-' reads it from stdin).")
@click.option("--chat/--raw", "chat", default=None, help="Wrap the prompt in the model's chat template (default: when the file has one).")
@click.option("--system", default=None, help="System message (chat mode).")
@click.option("--kv-type", type=click.Choice(["f16", "f32", "q8_0"]), default="f16", show_default=True, help="KV cache precision.")
@click.option("--prompt-cache", "prompt_cache", type=click.Path(file_okay=False), default=None, help="Directory of a prompt cache: a later run whose prompt starts the same evaluates only the rest.")
@click.option("--no-timings", is_flag=True, help="Do not print timings to stderr.")
def run_cmd(model, threads, device, ctx_size, prompt, chat, system, kv_type, prompt_cache, no_timings, **kw):
    """Generate text from a prompt. Only the generated text goes to stdout; timings go to stderr."""
    options = generate_options(kw)
    if prompt == "-":
        prompt = sys.stdin.read()
    loaded = load_model(model, device, threads)
    if prompt_cache:
        loaded.enable_prefix_cache(directory=prompt_cache)
    use_chat = chat if chat is not None else not loaded.chat_template.is_fallback
    session = loaded.new_session(n_ctx=ctx_size, kv_type=kv_type)
    if use_chat:
        from cera.chat import Chat

        conversation = Chat(session, system=system)
        chunks = conversation.stream(prompt, options)
    else:
        if system:
            raise click.UsageError("--system needs --chat")
        session.append_text(prompt)
        chunks = session.stream(options)
    out = sys.stdout
    for chunk in chunks:
        out.write(chunk)
        out.flush()
    out.write("\n")
    summary = session.last_summary
    if summary.incomplete:  # a grammar or schema's value cut short: stdout is not a whole value
        click.echo(
            f"cera: the output is incomplete: generation stopped ({summary.finish_reason.value}) before the "
            f"grammar or schema was satisfied; raise -n/--max-tokens", err=True,
        )
    if not no_timings:
        echo_err(
            f"\ncera: prompt {summary.n_prompt_tokens} tokens in {summary.prompt_seconds:.2f} s "
            f"({summary.prompt_tokens_per_second:.1f} tok/s); generated {summary.n_generated} tokens in "
            f"{summary.generate_seconds:.2f} s ({summary.tokens_per_second:.1f} tok/s); "
            f"stop: {summary.finish_reason.value}; backend {loaded.backend.name}"
            + (f"; speculation: {summary.accepted}/{summary.drafted} drafted tokens accepted" if summary.drafted else "")
            + (f"; prompt cache: {'hit' if loaded.prefix_cache.hits else 'miss'}" if loaded.prefix_cache else "")
        )
