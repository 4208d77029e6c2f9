"""The default speaker encoder: resemblyzer's GE2E encoder converted to GGUF, cached.

On first use ``pretrained.pt`` is fetched (bundle ``resemblyzer-ge2e``: the resemblyzer
package from PyPI, SHA-256 checked, see `cera.sources.bundles`), converted to GGUF without torch
and written to ``<cera cache>/converted/``, atomically, beside a small JSON record of its
SHA-256 and the converter version. Later uses check the file against that record and
convert again if it does not match (a damaged or half-copied file is never used).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from cera.sources import bundles
from cera.sources.bundles import sha256_file

BUNDLE = "resemblyzer-ge2e"
FILE_NAME = "resemblyzer-ge2e-0.1.4.gguf"


def default_model_path(quiet: bool = False) -> Path:
    """The cached default GGUF, converting it first if it is missing or does not verify."""
    from .convert import CONVERTER_VERSION, convert

    folder = bundles.cache_dir() / "converted"
    path = folder / FILE_NAME
    record = folder / (FILE_NAME + ".json")
    if path.exists() and record.exists():
        try:
            info = json.loads(record.read_text())
            if info.get("converter") == CONVERTER_VERSION and info.get("sha256") == sha256_file(path):
                return path
        except (OSError, ValueError):
            pass
    pt_path = bundles.fetch_file(BUNDLE, quiet=quiet)
    if not quiet:
        print(f"cera: converting {pt_path.name} to {path}", file=sys.stderr, flush=True)
    convert(pt_path, path)
    fd, tmp = tempfile.mkstemp(prefix=record.name + ".", suffix=".tmp", dir=folder)
    with os.fdopen(fd, "w") as f:
        json.dump({"sha256": sha256_file(path), "converter": CONVERTER_VERSION, "source": pt_path.name}, f)
    os.replace(tmp, record)
    return path
