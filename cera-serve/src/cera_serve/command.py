"""`cera serve`: the command (click only here; the server loads when it runs)."""

from __future__ import annotations

import os

import click


@click.command("serve")
@click.option("-m", "--model", default=None, help="GGUF file, bundle name or hub repo (default: the default bundle).")
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
def serve_cmd(model, host, port, parallel, ctx_size, threads, device, api_key, max_queue, prompt_cache, model_draft,
              device_draft, draft_max, draft_min, draft_p_min):  # fmt: skip
    """Serve a model over the OpenAI HTTP API (chat, completions, embeddings)."""
    import uvicorn

    from .app import ServerConfig, create_app

    config = ServerConfig(
        model=model, device=device, threads=threads, parallel=parallel, n_ctx=ctx_size, api_key=api_key or None,
        max_queue=max_queue, prompt_cache=prompt_cache, model_draft=model_draft, device_draft=device_draft,
        draft_max=draft_max, draft_min=draft_min, draft_p_min=draft_p_min,
    )  # fmt: skip
    if device_draft is not None and model_draft is None:
        raise click.UsageError("--device-draft needs a draft model: -md/--model-draft")
    if host not in ("127.0.0.1", "localhost", "::1") and not config.api_key:
        click.echo(f"cera serve: listening on {host} without --api-key: anyone who can reach it can use it", err=True)
    app = create_app(config)
    click.echo(
        f"cera serve: loading {model or 'the default model'}; http://{host}:{port}/v1 (pid {os.getpid()})", err=True
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")
