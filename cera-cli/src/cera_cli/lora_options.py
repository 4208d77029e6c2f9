"""--lora and --lora-scaled (llama.cpp's spellings): LoRA adapters applied on the loaded
model, for the commands that generate (run, chat, bench)."""

from __future__ import annotations

import functools
from pathlib import Path

import click


def parse_lora(value: str) -> tuple[str, float]:
    """``FILE`` or ``FILE:SCALE`` (a path that exists as written is taken whole)."""
    if Path(value).expanduser().exists():
        return value, 1.0
    path, sep, scale = value.rpartition(":")
    if sep and path:
        try:
            return path, float(scale)
        except ValueError:
            pass
    return value, 1.0


def lora_options(func):
    """--lora FILE[:SCALE] (repeatable), --lora-scaled FILE SCALE (repeatable)."""

    @click.option(
        "--lora", "lora", multiple=True, metavar="FILE[:SCALE]",
        help="LoRA adapter to apply: a llama.cpp GGUF adapter or a PEFT directory, scale 1 unless given; repeatable.",
    )  # fmt: skip
    @click.option(
        "--lora-scaled", "lora_scaled", multiple=True, nargs=2, type=(str, float), metavar="FILE SCALE",
        help="LoRA adapter with a scale (llama.cpp's spelling); repeatable.",
    )  # fmt: skip
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        given = [parse_lora(v) for v in kwargs.pop("lora")] + [(p, float(s)) for p, s in kwargs.pop("lora_scaled")]
        kwargs["loras"] = given
        return func(*args, **kwargs)

    return wrapper


def apply_loras(loaded, loras, console=None) -> None:
    """Attach the adapters and make them what the model's sessions apply."""
    if not loras:
        return
    items = [(loaded.load_adapter(path), scale) for path, scale in loras]
    loaded.use_adapters(items)
    if console is not None:
        console.detail("cera: LoRA adapters " + ", ".join(f"{a.name} ({a.path}) x{s:g}" for a, s in items))
