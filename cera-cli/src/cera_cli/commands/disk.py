"""`cera models --disk` (what the fetched models take on disk) and `cera rm NAME` (remove
one), over `cera.sources.disk`."""

from __future__ import annotations

import json

import click


def _size(n: int) -> str:
    from .models import human_size

    return human_size(n)


def show_disk(as_json: bool) -> None:
    """The table of `cera models --disk`."""
    from cera.sources import disk

    found = disk.entries()
    if as_json:
        click.echo(json.dumps([{"name": e.name, "kind": e.kind, "size": e.size, "path": str(e.path)} for e in found],
                              indent=2))  # fmt: skip
        return
    if not found:
        click.echo("No models on disk yet (`cera pull NAME` fetches one; `cera models` lists the bundles).")
        return
    rows = [(e.name, e.kind, _size(e.size), str(e.path)) for e in found]
    head = ("NAME", "FROM", "SIZE", "PATH")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(3)]
    for r in [head, *rows]:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[3])
    click.echo(f"\n{len(found)} model{'s' if len(found) != 1 else ''}, {_size(sum(e.size for e in found))} in all; "
               "`cera rm NAME` removes one.")  # fmt: skip


@click.command("rm")
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
def rm_cmd(names):
    """Remove models from disk: bundles, converted files, Hugging Face repos of GGUF files
    (`cera models --disk` lists them with their names)."""
    from cera.sources import disk

    for name in names:
        entry = disk.remove(name)
        click.echo(f"removed {entry.name} ({entry.kind}, {_size(entry.size)}): {entry.path}")
