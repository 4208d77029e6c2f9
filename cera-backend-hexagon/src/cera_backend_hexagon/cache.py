"""Context binaries kept between runs: one folder per (model file, SoC, graph).

The key is the SHA-256 of the model file's bytes, the SoC and HTP architecture, the graph's
full description (every node with its shapes and attributes: the layout, the outputs and
the state geometry are all in it), the version of this lowering and QNN's version. A folder
``$CERA_CACHE_DIR/hexagon/<soc>/<key>/`` holds ``graph_ctx.onnx`` (onnxruntime's EPContext
model), its ``graph_ctx_qnn.bin`` (the HTP context binary) and ``meta.json`` (what was
compiled, how long it took, the sizes). A folder is written under a temporary name and
renamed into place, so a reader never sees half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from .target import Soc

LOWERING_VERSION = "1"


def cache_root() -> Path:
    from cera.sources import bundles

    return bundles.cache_dir() / "hexagon"


def qnn_version() -> str:
    try:
        from onnxruntime_qnn.build_and_package_info import __version__, qnn_version

        return f"{__version__}/{qnn_version}"
    except ImportError:
        return "?"


def graph_key(file_sha256: str, soc: Soc, description: str) -> str:
    h = hashlib.sha256()
    for part in (file_sha256, soc.label, str(soc.soc_model), LOWERING_VERSION, qnn_version(), description):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


def entry_dir(soc: Soc, key: str) -> Path:
    return cache_root() / soc.label / key


def lookup(soc: Soc, key: str) -> Path | None:
    d = entry_dir(soc, key)
    ctx = d / "graph_ctx.onnx"
    return ctx if ctx.exists() and (d / "meta.json").exists() else None


def staging(soc: Soc, key: str) -> Path:
    d = entry_dir(soc, key)
    tmp = d.parent / f".{key}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def publish(tmp: Path, soc: Soc, key: str, meta: dict) -> Path:
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    d = entry_dir(soc, key)
    try:
        os.rename(tmp, d)
    except OSError:  # another process published it first: theirs is as good
        shutil.rmtree(tmp, ignore_errors=True)
    return d / "graph_ctx.onnx"


def meta(ctx_path: Path) -> dict:
    try:
        return json.loads((ctx_path.parent / "meta.json").read_text())
    except (OSError, ValueError):
        return {}
