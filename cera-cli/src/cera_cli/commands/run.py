"""`cera run`: generate text from a prompt, streaming it to stdout."""

from __future__ import annotations

import sys

import click

from ..chat_template_option import apply_chat_template, chat_template_option
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
from ..images_cli import attach_projector, image_options, user_content
from ..lora_options import apply_loras, lora_options
from ..tools_cli import run_turn, tool_options


def read_prompt(words: tuple[str, ...], prompt: str | None, file: str | None) -> str:
    """The prompt from exactly one of: the words after the options, -p, -f, or stdin."""
    given = [name for name, v in (("a positional prompt", words), ("-p/--prompt", prompt), ("-f/--file", file)) if v]
    if len(given) > 1:
        raise click.UsageError(f"give the prompt once: {' and '.join(given)} were both given")
    if words:
        return " ".join(words)
    if file:
        if file == "-":
            return sys.stdin.read()
        try:
            with open(file, encoding="utf-8") as f:
                return f.read()
        except OSError as e:
            raise click.BadParameter(f"cannot read {file}: {e.strerror}", param_hint="'-f' / '--file'") from None
        except UnicodeDecodeError:
            raise click.BadParameter(f"{file} is not UTF-8 text", param_hint="'-f' / '--file'") from None
    if prompt == "-":
        return sys.stdin.read()
    if prompt is not None:
        return prompt
    if not sys.stdin.isatty():
        return sys.stdin.read()
    raise click.UsageError('no prompt: cera run "your prompt", or -p TEXT, -f FILE, or pipe it on stdin')


@click.command("run")
@model_options
@lora_options
@chat_template_option
@sampling_options
@click.argument("words", nargs=-1, metavar="[PROMPT]...")
@click.option(
    "-p", "--prompt", default=None, help="The prompt ('-' reads it from stdin). It may also follow the options."
)
@click.option("-f", "--file", "file", default=None, help="Read the prompt from a file ('-': stdin).")
@click.option(
    "--chat/--raw", "chat", default=None,
    help="--chat wraps the prompt in the model's chat template and the reply ends with the turn; --raw "
    "continues the text as written. Default: --chat when the file has a template.",
)  # fmt: skip
@click.option("--system", "-sys", "--system-prompt", "system", default=None, help="System message (chat mode).")
@kv_type_options
@click.option(
    "--prompt-cache",
    "prompt_cache",
    type=click.Path(file_okay=False),
    default=None,
    help="Directory of a prompt cache: a later run whose prompt starts the same evaluates only the rest.",
)
@click.option("--no-timings", is_flag=True, help="Do not print the summary (timings, seed) to stderr.")
@image_options
@tool_options
@draft_options
def run_cmd(model, threads, device, ctx_size, n_gpu_layers, verbose, quiet, words, prompt, file, chat, system,
            kv_type, prompt_cache, no_timings, mmproj, images, tools, tool_choice, constrain_tools, model_draft,
            device_draft, loras=(), **kw):  # fmt: skip
    """Generate text from a prompt: cera run -m MODEL "PROMPT". Only the generated text goes
    to stdout; notes and the summary (timings, the seed that repeats the run) go to stderr.
    Exit status: 0 when it ran, 1 on an error, 2 on a bad option, 3 when -n is below the
    fewest tokens any value of --json/--json-schema/--grammar/--regex takes."""
    from cera.state import kv_cell_bytes

    options = generate_options(kw, drafting(model, model_draft, kw["spec"]))
    text = read_prompt(words, prompt, file)
    console = Console(verbose, quiet)
    loaded = apply_chat_template(load_model(model, device, threads, console, n_gpu_layers))
    attach_projector(loaded, mmproj, images, console)
    apply_loras(loaded, loras, console)
    attach_draft(loaded, model, model_draft, device_draft, threads, console, options.spec)
    if prompt_cache:
        loaded.enable_prefix_cache(directory=prompt_cache)
    use_chat = chat if chat is not None else not loaded.chat_template.is_fallback
    if tools and chat is False:
        raise click.UsageError("--tools needs --chat: calls are rendered through the chat template")
    use_chat = use_chat or bool(tools)
    if use_chat and chat is None:
        console.detail("cera: chat mode (the file has a chat template; --raw continues the text as written)")
    session = open_session(loaded, ctx_size, kv_type)
    if use_chat:
        from cera.chat.session import ChatSession

        conversation = ChatSession(session, system=system, tools=tools)
        content = user_content(text, images)
        n_prompt = len(conversation.prompt.prompt_ids([*conversation.messages, {"role": "user", "content": content}]))
        chunks = conversation.reply({"role": "user", "content": content}, options) if not tools else None
    else:
        if system:
            raise click.UsageError("--system needs --chat (a raw prompt has no system turn)")
        n_prompt = len(session.append_prompt(text, images) if images else session.append_text(text))
        chunks = session.stream(options)
    if n_prompt >= session.n_ctx:
        raise click.UsageError(
            f"the prompt is {n_prompt} tokens and the context holds {session.n_ctx}: {context_hint(session)}, "
            f"or shorten the prompt"
        )
    out = sys.stdout
    if tools:  # stdout carries the calls' JSON array alone; the text goes to stderr
        console.detail(f"cera: tool calls in the {conversation.tool_format.name} format")
        run_turn(conversation, {"role": "user", "content": content}, options, tool_choice, constrain_tools)
    else:
        for chunk in chunks:
            out.write(chunk)
            out.flush()
        out.write("\n")
        out.flush()
    summary = session.last_summary
    if summary.finish_reason.value == "error":  # non-finite logits: what was printed is all there is
        from cera.errors import GenerationError

        raise GenerationError(summary.error or "generation ended with an error")
    if summary.incomplete:  # a grammar or schema's value cut short: stdout is not a whole value
        click.echo(
            f"cera: the output is incomplete: generation stopped ({summary.finish_reason.value}) before the "
            f"grammar or schema was satisfied; raise -n/--max-tokens",
            err=True,
        )
    if summary.finish_reason.value == "context" and not options.context_shift:
        console.note(
            f"cera: the context ({session.n_ctx} tokens) is full: the text was cut; {context_hint(session)} or add --context-shift"
        )
    if session.n_shifted:
        console.note(f"cera: --context-shift dropped {session.n_shifted} of the oldest tokens to go on")
    if no_timings:
        return
    console.note(
        f"\ncera: prompt {summary.n_prompt_tokens} tokens in {summary.prompt_seconds:.2f} s "
        f"({summary.prompt_tokens_per_second:.1f} tok/s); generated {summary.n_generated} tokens in "
        f"{summary.generate_seconds:.2f} s ({summary.tokens_per_second:.1f} tok/s); "
        f"stop: {summary.finish_reason.value}; {describe_seed(options)}; backend {loaded.backend.name}"
        + (f"; speculation: {summary.accepted}/{summary.drafted} drafted tokens accepted" if summary.drafted else "")
        + (f"; prompt cache: {'hit' if loaded.prefix_cache.hits else 'miss'}" if loaded.prefix_cache else "")
    )
    t = console.timings
    console.detail(
        f"cera: phases: resolve {t.get('resolve', 0):.3f} s, load {t.get('load', 0):.3f} s, "
        f"prompt {summary.prompt_seconds:.3f} s, generate {summary.generate_seconds:.3f} s; "
        f"context {session.n_ctx} tokens ({kv_type} cache, {kv_cell_bytes(loaded.model.state, kv_type)} bytes a token), "
        f"{session.n_tokens} used; mode {'chat' if use_chat else 'raw'}"
    )
