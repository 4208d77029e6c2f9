"""`cera serve`: the command (click only here; the server loads when it runs)."""

from __future__ import annotations

import os

import click


@click.command("serve")
@click.option(
    "-m",
    "--model",
    "models",
    multiple=True,
    help="GGUF file, bundle name or hub repo (default: the default bundle); repeat to serve several. "
    "A model's id is what you give here, or its --alias.",
)
@click.option("-a", "--alias", "aliases", multiple=True, help="The id clients use for each -m, in order.")
@click.option(
    "--chat-template",
    "chat_templates",
    multiple=True,
    metavar="FILE|NAME",
    help="Chat template instead of the model's own, for each -m in order: a Jinja file, 'chatml', or the name of "
    "a template the file carries.",
)
@click.option(
    "--models-memory",
    default=None,
    metavar="SIZE",
    help="Memory the loaded models may take (e.g. 6GiB; default: half the machine's); the least "
    "recently used idle model is unloaded to make room.",
)
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback unless you say otherwise)."
)
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="Port to listen on.")
@click.option(
    "-P",
    "--parallel",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Sequences decoded at once (continuous batching).",
)
@click.option(
    "-c",
    "--ctx-size",
    type=click.IntRange(min=16),
    default=None,
    help="Context per sequence (default: the model's, up to 4096).",
)
@click.option("-t", "--threads", type=click.IntRange(min=1), default=None, help="CPU threads.")
@click.option("--device", default="auto", show_default=True, help="Backend to run on.")
@click.option(
    "--api-key",
    default=None,
    envvar="CERA_API_KEY",
    help="Require this key (Authorization: Bearer KEY) on every route but /health; also $CERA_API_KEY.",
)
@click.option(
    "--max-queue",
    type=click.IntRange(min=0),
    default=64,
    show_default=True,
    help="Requests that may wait for a free sequence; more get 429.",
)
@click.option(
    "--prompt-cache",
    "prompt_cache",
    type=click.Path(file_okay=False),
    default=None,
    help="Directory of a disk prompt cache (a memory one is always on).",
)
def serve_cmd(models, aliases, chat_templates, models_memory, host, port, parallel, ctx_size, threads, device, api_key,
              max_queue, prompt_cache):  # fmt: skip
    """Serve models over the OpenAI HTTP API (chat, completions, responses, embeddings, rerank),
    Anthropic's messages API, and a chat page at /."""
    import uvicorn

    from cera.errors import CeraError

    from .app import ServerConfig, create_app
    from .models import model_ids, parse_size

    try:
        model_ids(list(models) or ["default"], list(aliases))
        if len(chat_templates) > max(1, len(models)):
            raise click.UsageError(f"{len(chat_templates)} chat templates for {max(1, len(models))} models: give one "
                                   "--chat-template per -m, in order")  # fmt: skip
        budget = parse_size(models_memory) if models_memory is not None else None
    except CeraError as e:
        raise click.UsageError(str(e)) from None
    model = models[0] if len(models) == 1 else None
    config = ServerConfig(
        model=model, models=tuple(models) if len(models) > 1 else (), aliases=tuple(aliases), memory_budget=budget,
        chat_templates=tuple(chat_templates),
        device=device, threads=threads, parallel=parallel, n_ctx=ctx_size, api_key=api_key or None,
        max_queue=max_queue, prompt_cache=prompt_cache,
    )  # fmt: skip
    if host not in ("127.0.0.1", "localhost", "::1") and not config.api_key:
        click.echo(f"cera serve: listening on {host} without --api-key: anyone who can reach it can use it", err=True)
    app = create_app(config)
    click.echo(
        f"cera serve: loading {models[0] if models else 'the default model'}; http://{host}:{port}/ (pid {os.getpid()})",
        err=True,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")
