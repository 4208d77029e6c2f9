"""Files the audio components convert once and keep: ``<cera cache>/converted/NAME``.

Each converted file has a JSON record beside it (``NAME.json``) holding the file's SHA-256 and
a description of what it was made from (the converter's version, the source's name or
digest). A later use takes the file only when the record matches both the file on disk and
the source asked for; otherwise it converts again. The file and its record are written
atomically, so a damaged, half-copied or stale file is never used.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from .bundles import cache_dir, sha256_file


def converted_folder() -> Path:
    return cache_dir() / "converted"


def cached_conversion(file_name: str, source: dict, make: Callable[[Path], object], *, label: str, quiet: bool = False) -> Path:
    """The converted file ``file_name``, made by ``make(path)`` (which writes ``path``
    atomically) unless the cached copy verifies against its record for ``source``.
    ``label`` names what is converted in the message on standard error."""
    folder = converted_folder()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name
    record = folder / (file_name + ".json")
    if path.exists() and record.exists():
        try:
            info = json.loads(record.read_text())
            if info.get("source") == source and info.get("sha256") == sha256_file(path):
                return path
        except (OSError, ValueError):
            pass
    if not quiet:
        print(f"cera: converting {label} to {path}", file=sys.stderr, flush=True)
    make(path)
    fd, tmp = tempfile.mkstemp(prefix=record.name + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"sha256": sha256_file(path), "source": source}, f)
        os.replace(tmp, record)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
