"""Where a Streaming Sortformer comes from: a ``.nemo`` file or a Hugging Face Hub repository.

``nvidia/diar_streaming_sortformer_4spk-v2.1`` (any ``org/repo[@REVISION]`` holding one
``.nemo`` file) is fetched through cera's Hub client (`cera.sources.hub`: the Hugging Face
cache, resumable, checked against the Hub's SHA-256). A ``.nemo`` file is converted to GGUF
once, into ``<cera cache>/converted/`` under a name that carries the first 16 hex digits of
its SHA-256 and the converter version, so a changed file or converter converts again; the
GGUF is written atomically (a half-written file is never used).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from cera.errors import ModelNotFound
from cera.sources import bundles
from cera.sources.bundles import sha256_file

from .sortformer_convert import CONVERTER_VERSION, convert_nemo

RELEASED = "nvidia/diar_streaming_sortformer_4spk-v2.1"


def nemo_gguf(nemo_path: str | os.PathLike, quiet: bool = False) -> Path:
    """The cached GGUF conversion of a ``.nemo`` file, converting it first if missing."""
    nemo_path = Path(nemo_path)
    if not nemo_path.is_file():
        raise ModelNotFound(f"{nemo_path}: no such .nemo file")
    digest = sha256_file(nemo_path)[:16]
    out = bundles.cache_dir() / "converted" / f"{nemo_path.stem}-{digest}-v{CONVERTER_VERSION}.gguf"
    if out.is_file():
        return out
    if not quiet:
        print(f"cera: converting {nemo_path.name} to {out}", file=sys.stderr, flush=True)
    return convert_nemo(nemo_path, out)


def hub_nemo(source: str, quiet: bool = False) -> Path:
    """The ``.nemo`` file of a Hub repository (``org/repo[@REVISION]``), fetched into the cache."""
    from cera.sources.hub import Hub, parse_source

    src = parse_source(source)
    if src is None or src.quant:
        raise ModelNotFound(f"{source}: not a Hub repository name (org/repo[@REVISION])")
    hub = Hub(quiet=quiet)
    state = hub.state(src.repo, src.revision)
    nemos = sorted(name for name in state.files if name.endswith(".nemo"))
    if len(nemos) != 1:
        found = ", ".join(nemos) if nemos else "none"
        raise ModelNotFound(
            f"{source}: a Sortformer repository holds one .nemo file; found {found}. "
            f"Download the one you mean and give its path to -m"
        )
    return hub.fetch(state, nemos)[0]


def sortformer_gguf(source: str, quiet: bool = False) -> Path:
    """A GGUF path for a ``.nemo`` file or a Hub repository holding one."""
    path = Path(source)
    if path.suffix == ".nemo":
        return nemo_gguf(path, quiet=quiet)
    return nemo_gguf(hub_nemo(source, quiet=quiet), quiet=quiet)
