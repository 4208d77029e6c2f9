"""Writing a GGUF file atomically, for the converters: the file appears whole under its name
or not at all, with the permissions any file the user creates gets (umask), never mkstemp's
private 0600."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_gguf_file(out_path: str | os.PathLike, architecture: str, fill: Callable) -> Path:
    """``fill(writer)`` adds its keys and tensors to a ``gguf.GGUFWriter``, which is then
    written to ``out_path`` by `write_filled_writer`. Returns ``out_path``."""
    import gguf

    writer = gguf.GGUFWriter(None, architecture)
    fill(writer)
    return write_filled_writer(out_path, writer)


def write_filled_writer(out_path: str | os.PathLike, writer) -> Path:
    """Write a ``gguf.GGUFWriter`` made without a path (``GGUFWriter(None, arch)``) and
    filled, to a temporary file beside ``out_path`` that then replaces ``out_path``; on any
    failure the temporary file is removed and ``out_path`` is left as it was."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=out_path.name + ".", suffix=".tmp", dir=out_path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp_name, 0o666 & ~umask)
        writer.path = Path(tmp_name)
        writer.write_header_to_file(path=Path(tmp_name))
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp_name, out_path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return out_path
