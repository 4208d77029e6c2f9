"""The converters' atomic GGUF writer: whole file or none, the user's umask, the old file kept on failure."""

import os
import stat

import numpy as np
import pytest

from cera.formats.gguf import GGUFFile
from cera.formats.gguf_write import write_gguf_file


def _fill(writer):
    writer.add_uint32("t.n", 7)
    writer.add_tensor("w", np.arange(6, dtype=np.float32))


def test_writes_a_readable_file_with_the_umask_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        out = write_gguf_file(tmp_path / "sub" / "m.gguf", "t", _fill)
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644  # mkstemp alone would leave 0600
    with GGUFFile(out) as f:
        assert f.architecture == "t"
        assert int(f.arch_get("n")) == 7
    assert [p.name for p in out.parent.iterdir()] == ["m.gguf"]


def test_a_failing_fill_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    out = tmp_path / "m.gguf"
    out.write_bytes(b"old")

    def broken(writer):
        writer.add_uint32("t.n", 1)
        raise ValueError("no tensor")

    with pytest.raises(ValueError, match="no tensor"):
        write_gguf_file(out, "t", broken)
    assert out.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["m.gguf"]
