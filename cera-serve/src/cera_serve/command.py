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
@click.option(
    "-md", "--model-draft", "model_draft", default=None, metavar="MODEL",
    help="A smaller model of the same vocabulary that drafts tokens for the model to verify in one pass "
    "(speculative decoding, on by default for every request; a request's speculative.n_max 0 turns it off).",
)  # fmt: skip
@click.option("--device-draft", "device_draft", default=None, metavar="DEVICE",
              help="Backend of the draft model (default: the model's).")  # fmt: skip
@click.option("--draft-max", "--draft", "--draft-n", "draft_max", type=click.IntRange(0, 256), default=16,
              show_default=True, help="Most tokens the draft model drafts per verification pass.")  # fmt: skip
@click.option("--draft-min", "--draft-n-min", "draft_min", type=click.IntRange(0, 256), default=0, show_default=True,
              help="A shorter draft is not verified (the token is evaluated plainly).")  # fmt: skip
@click.option("--draft-p-min", "draft_p_min", type=click.FloatRange(0.0, 1.0), default=0.75, show_default=True,
              help="Drafting stops where the draft gives its token less probability than this.")  # fmt: skip
@click.option(
    "--lora", "lora", multiple=True, metavar="[NAME=]FILE[:SCALE]",
    help="LoRA adapter (GGUF adapter or PEFT directory) that requests may choose by NAME (its file's stem unless given): "
    "\"model\": NAME, or llama.cpp's \"lora\": [{\"id\": N, \"scale\": S}]; listed in /v1/models; repeatable.",
)  # fmt: skip
@click.option(
    "--lora-scaled", "lora_scaled", multiple=True, nargs=2, type=(str, float), metavar="[NAME=]FILE SCALE",
    help="LoRA adapter with the scale a request that names it gets (llama.cpp's spelling); repeatable.",
)  # fmt: skip
@click.option("--mmproj", default=None, metavar="FILE", help="Multimodal projector (mmproj GGUF): chat messages may hold images.")
@click.option(
    "--allow-local-images", is_flag=True,
    help="Let image parts name files on this machine (path or file:// URL); by default only data: URLs are read.",
)  # fmt: skip
def serve_cmd(models, aliases, chat_templates, models_memory, host, port, parallel, ctx_size, threads, device, api_key,
              max_queue, prompt_cache, model_draft, device_draft, draft_max, draft_min, draft_p_min, mmproj, allow_local_images, lora=(),
              lora_scaled=()):  # fmt: skip
    """Serve models over the OpenAI HTTP API (chat, completions, responses, embeddings, rerank),
    Anthropic's messages API, and a chat page at /."""
    import uvicorn

    from cera.errors import CeraError

    from .adapters import parse_spec
    from .app import ServerConfig, create_app
    from .models import model_ids, parse_size

    try:
        loras = tuple(parse_spec(v) for v in lora) + tuple(parse_spec(v, s) for v, s in lora_scaled)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--lora'") from None
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
        max_queue=max_queue, prompt_cache=prompt_cache, model_draft=model_draft, device_draft=device_draft,
        draft_max=draft_max, draft_min=draft_min, draft_p_min=draft_p_min, loras=loras, mmproj=mmproj,
        allow_local_images=allow_local_images,
    )  # fmt: skip
    if device_draft is not None and model_draft is None:
        raise click.UsageError("--device-draft needs a draft model: -md/--model-draft")
    if host not in ("127.0.0.1", "localhost", "::1") and not config.api_key:
        click.echo(f"cera serve: listening on {host} without --api-key: anyone who can reach it can use it", err=True)
    app = create_app(config)
    click.echo(
        f"cera serve: loading {models[0] if models else 'the default model'}; http://{host}:{port}/ (pid {os.getpid()})",
        err=True,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")
