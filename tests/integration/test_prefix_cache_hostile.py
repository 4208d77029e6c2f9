"""The disk prefix cache against what others may put in its shared folder: a FIFO named
like an entry, a crafted entry with a valid (unkeyed) checksum and a header of the wrong
schema, an entry claiming gigabytes, an entry of another KV precision, and the temporary
files of killed writes. A bad entry is a miss, reported and removed; an entry of another
session's shape is a miss and stays; generation is never hurt; temporaries count against
the cap."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
import textwrap
import time

import pytest

import cera
from cera.formats import checkpoint

SYSTEM = "You are a careful assistant. " * 12
PROMPT = SYSTEM + "Tell me a story."


@pytest.fixture(scope="module")
def loaded(smollm2_path):
    m = cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    yield m
    m.close()


@pytest.fixture(scope="module")
def want(loaded):
    """The tokens without any cache."""
    loaded.prefix_cache = None
    return _run(loaded)[1].tokens


def _run(m, text=PROMPT, kv_type="f16"):
    s = m.new_session(n_ctx=256, kv_type=kv_type)
    s.append_text(text)
    out = s.generate(max_tokens=6, temperature=0, ignore_eos=True)
    s.close()
    return s, out


@pytest.fixture(autouse=True)
def no_cache_after(loaded):
    yield
    loaded.prefix_cache = None


@pytest.fixture
def folder(loaded, tmp_path, want):
    """A cache folder holding one real entry of PROMPT; yields (cache, entry path)."""
    cache = loaded.enable_prefix_cache(directory=tmp_path / "pc")
    _run(loaded)
    entries = list(cache.directory.glob("*.ckpt"))
    assert len(entries) == 1
    yield cache, entries[0]


def _fresh(loaded, cache):
    """A new cache object on the same folder (no warm entries): lookups go to disk."""
    return loaded.enable_prefix_cache(directory=cache.directory.parent)


def _rewrite(path, change):
    data = path.read_bytes()
    n = struct.unpack_from("<Q", data, 12)[0]
    header, payload = json.loads(data[20 : 20 + n]), data[20 + n : -32]
    payload = change(header, payload) or payload
    head = json.dumps(header).encode()
    body = checkpoint.MAGIC + struct.pack("<IQ", 1, len(head)) + head + payload
    path.write_bytes(body + hashlib.sha256(body).digest())


def test_a_fifo_named_like_an_entry_is_a_miss_and_removed(loaded, smollm2_path, tmp_path, want):
    """It hung every run sharing the folder; now: reported, removed, the run goes on."""
    directory = tmp_path / "pc"
    cache = loaded.enable_prefix_cache(directory=directory)
    fifo = cache.directory / "00000070-0000000000000000000000000000000000000000.ckpt"
    os.mkfifo(fifo)
    code = textwrap.dedent(f"""
        import cera
        m = cera.load({str(smollm2_path)!r}, device="cpu", threads=1, quiet=True)
        m.enable_prefix_cache(directory={str(directory)!r})
        s = m.new_session(n_ctx=256)
        s.append_text({PROMPT!r})
        print(s.generate(max_tokens=6, temperature=0, ignore_eos=True).tokens)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(want)
    assert "not a regular file" in proc.stderr and not fifo.exists()


def test_a_crafted_entry_with_a_valid_checksum_is_a_miss_and_removed(loaded, folder, want, capfd):
    cache, entry = folder
    _rewrite(entry, lambda h, p: h["arrays"][1].update(dtype="<i8", nbytes=h["arrays"][1]["nbytes"] * 4))
    cache = _fresh(loaded, cache)
    _, got = _run(loaded)
    assert got.tokens == want and cache.hits == 0
    err = capfd.readouterr().err
    assert "prompt cache: ignoring" in err
    # the next run stores a good entry in its place and hits it
    cache = _fresh(loaded, cache)
    _, again = _run(loaded)
    assert again.tokens == want and cache.hits == 1


@pytest.mark.parametrize("change", ["tokens as text", "wrong array type", "state of another shape"])
def test_wrong_typed_headers_never_fail_generation(loaded, folder, want, change):
    """A header the schema refuses, or arrays that do not fit the state: it failed every
    later generation with a GenerationError and stayed."""
    cache, entry = folder

    def edit(h, p):
        if change == "tokens as text":
            h["tokens"] = "x" * len(h["tokens"])
        elif change == "wrong array type":
            h["arrays"][1]["dtype"] = "<f4"
            h["arrays"][1]["shape"][-1] //= 2
        else:
            h["arrays"][1]["shape"] = [h["arrays"][1]["shape"][0] * 2, h["arrays"][1]["shape"][1] // 2] + h["arrays"][1]["shape"][2:]

    _rewrite(entry, edit)
    for _ in range(2):
        cache = _fresh(loaded, cache)
        _, got = _run(loaded)
        assert got.tokens == want
    assert cache.hits == 1  # the first run removed it and stored a good one, the second used that


def test_an_entry_claiming_gigabytes_is_refused_before_reading(loaded, folder, want):
    """A 6 GiB entry (sparse) was read whole before its checksum; now its header is checked
    against the state first, and the file is never read."""
    cache, entry = folder
    header_len = struct.unpack_from("<Q", entry.read_bytes(), 12)[0]
    with open(entry, "r+b") as f:
        f.truncate(6 * 2**30)
    t0 = time.monotonic()
    cache = _fresh(loaded, cache)
    _, got = _run(loaded)
    assert got.tokens == want
    assert time.monotonic() - t0 < 30
    assert all(p.stat().st_size < 2**30 for p in cache.directory.glob("*.ckpt"))
    assert header_len > 0


def test_an_entry_of_another_kv_precision_is_a_miss_and_stays(loaded, folder):
    cache, entry = folder
    cache = _fresh(loaded, cache)
    _, got = _run(loaded, kv_type="f32")
    assert cache.hits == 0 and entry.exists()  # another session's entry: not this one's to remove
    s_want = _run(loaded, kv_type="f32")[1]
    assert got.tokens == s_want.tokens


def test_temporary_files_of_killed_writes_count_against_the_cap(loaded, tmp_path):
    cache = loaded.enable_prefix_cache(directory=tmp_path / "pc", max_disk_bytes=10_000)
    stale = cache.directory / ".00000070-x.ckpt.abc123.tmp"
    stale.write_bytes(bytes(4096))
    old = time.time() - checkpoint.STALE_TMP_S - 1
    os.utime(stale, (old, old))
    size, n = cache.disk_usage()
    assert n == 1 and size == 4096  # counted
    _run(loaded)  # a store runs the eviction: the stale temporary goes, and the entry over the cap
    assert not stale.exists()
    assert cache.disk_usage()[0] <= 10_000
