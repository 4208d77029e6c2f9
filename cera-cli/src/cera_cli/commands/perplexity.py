"""`cera perplexity -m MODEL -f FILE`: a text's perplexity, as llama.cpp's llama-perplexity
computes it (`cera.generation.perplexity`), so the two figures compare on the same file,
text and chunk size; with --kv-type, what a compressed cache costs in quality."""

from __future__ import annotations

import json
import sys

import click

from ..options import Console, kv_type_options, load_model, model_options


@click.command("perplexity")
@model_options
@click.option("-f", "--file", "file", required=True, type=click.Path(dir_okay=False), help="The text to score (UTF-8; '-': stdin).")
@click.option("-b", "--batch-size", "n_batch", type=click.IntRange(min=1), default=2048, show_default=True, help="Tokens per forward pass (at most a chunk).")
@click.option("--chunks", type=click.IntRange(min=1), default=None, help="Score at most this many chunks (default: all).")
@kv_type_options
@click.option("--json", "as_json", is_flag=True, help='Print {"ppl", "ppl_stderr", "chunks", "tokens", "kv_bytes", "seconds", ...} only.')
def perplexity_cmd(model, threads, device, ctx_size, n_gpu_layers, verbose, quiet, file, n_batch, chunks, kv_type, as_json):  # fmt: skip
    """Perplexity of a text: chunks of -c tokens (default 512), each scored on its second half."""
    from cera.generation.perplexity import perplexity

    from .tokenize import _read_text

    text = _read_text(None, file) if file != "-" else _read_text("-", None)
    console = Console(verbose, quiet)
    loaded = load_model(model, device, threads, console, n_gpu_layers)
    n_ctx = ctx_size or 512
    bar = None

    def progress(done, total):
        nonlocal bar
        if quiet:
            return
        if bar is None:
            bar = click.progressbar(length=total, label="perplexity", file=sys.stderr, show_pos=True)
            bar.__enter__()
        bar.update(1)

    try:
        result = perplexity(loaded, text, n_ctx=n_ctx, kv_type=kv_type, n_batch=n_batch, max_chunks=chunks,
                            progress=progress)  # fmt: skip
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    if as_json:
        click.echo(json.dumps(result.as_dict()))
        return
    click.echo(",".join(f"[{i + 1}]{p:.4f}" for i, p in enumerate(result.chunk_ppl)))
    click.echo(
        f"Final estimate: PPL = {result.ppl:.4f} +/- {result.stderr:.5f} "
        f"({result.chunks} chunks of {result.n_ctx} tokens, {result.tokens} scored; {kv_type} cache of "
        f"{result.kv_bytes / 2**20:.2f} MiB; {result.seconds:.1f} s)"
    )
