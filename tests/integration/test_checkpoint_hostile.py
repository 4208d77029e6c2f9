"""Checkpoint files and chat ``/load`` against crafted input: headers of the wrong schema
(with a valid checksum), files that are not regular (/dev/zero, a FIFO), tokens that do not
fit the state or the context, and the temporary files of killed writes. Each is a
`CheckpointError` naming what is wrong, nothing is half-restored, and reads are bounded."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
import time
from pathlib import Path

import pytest

import cera
from cera.formats import checkpoint
from cera.chat.session import Chat
from cera.formats.checkpoint import CheckpointError


@pytest.fixture(scope="module")
def loaded(smollm2_path):
    m = cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    yield m
    m.close()


@pytest.fixture(scope="module")
def saved(loaded, tmp_path_factory) -> Path:
    """A chat checkpoint of a 128-token context, 20-odd tokens evaluated."""
    s = loaded.new_session(n_ctx=128)
    chat = Chat(s, system="Be brief.")
    chat.send("Hi", max_tokens=4, temperature=0)
    path = tmp_path_factory.mktemp("ckpt") / "chat.ckpt"
    chat.save(path)
    s.close()
    return path


def split(data: bytes) -> tuple[dict, bytes]:
    head_len = struct.unpack_from("<Q", data, 12)[0]
    return json.loads(data[20 : 20 + head_len]), data[20 + head_len : -32]


def join(header: dict, payload: bytes) -> bytes:
    head = json.dumps(header).encode()
    body = checkpoint.MAGIC + struct.pack("<IQ", checkpoint.FORMAT_VERSION, len(head)) + head + payload
    return body + hashlib.sha256(body).digest()  # a valid checksum: only the schema can refuse it


def crafted(saved: Path, tmp_path: Path, change) -> Path:
    header, payload = split(saved.read_bytes())
    payload = change(header, payload) or payload
    path = tmp_path / "crafted.ckpt"
    path.write_bytes(join(header, payload))
    return path


def _set(**kv):
    def change(h, p):
        h.update(kv)

    return change


def _array(i: int, **kv):
    def change(h, p):
        h["arrays"][i].update(kv)

    return change


# the headers that raised AttributeError, ValueError, TypeError or UFuncTypeError
HEADERS = {
    "extra not an object": (_set(extra=[1, 2]), "extra should be an object"),
    "arrays not a list": (_set(arrays={"a": 1}), "arrays should be a list"),
    "an array of object dtype": (_array(0, dtype="|O"), "not a numeric array type"),
    "a dtype that is no dtype": (_array(0, dtype="zz"), "not a numeric array type"),
    "a negative shape": (_array(1, shape=[-1, 4]), "should be an integer"),
    "an offset past the payload": (_array(1, offset=10**12), "offset"),
    "tokens as text": (_set(tokens="hello"), "tokens should be a list"),
    "n_filled as text": (_set(n_filled="7"), "n_filled should be an integer"),
    "a layout of numbers": (_set(layout=[1, 2, 3]), "layout should be a list"),
    "last_argmax as a list": (_set(last_argmax=[3]), "last_argmax should be an integer"),
    "the chat state of another shape": (lambda h, p: h["extra"].update(chat={"history": [], "pending": 3}),
                                        "the chat state it holds is not valid"),
    "a header that is a list": (lambda h, p: h.clear() or h.update({"format": "1"}), "format should be an integer"),
}


@pytest.mark.parametrize("case", list(HEADERS))
def test_a_crafted_header_is_a_checkpoint_error(loaded, saved, tmp_path, case):
    change, message = HEADERS[case]
    path = crafted(saved, tmp_path, change)
    s = loaded.new_session(n_ctx=128)
    s.append_text("Untouched")
    before = list(s.tokens) + list(s.pending)
    with pytest.raises(CheckpointError, match=message):
        Chat.load(s, path)
    assert list(s.tokens) + list(s.pending) == before  # nothing half-restored
    if "chat" not in case:  # a session's load reads no chat state
        with pytest.raises(CheckpointError):
            s.load(path)
        assert list(s.tokens) + list(s.pending) == before
    s.close()


def test_tokens_beyond_the_context_are_refused(loaded, saved, tmp_path):
    """1,107 tokens (and one queued) listed for a session of 128: refused, not restored
    past the context."""

    def change(h, p):
        h["tokens"] = h["tokens"] + [1] * (1107 - len(h["tokens"]))
        h["n_filled"] = 1107

    path = crafted(saved, tmp_path, change)
    s = loaded.new_session(n_ctx=128)
    with pytest.raises(CheckpointError, match=r"1108 tokens for a context of 128"):
        s.load(path)
    s.close()


def test_tokens_that_do_not_match_the_filled_positions_are_refused(loaded, saved, tmp_path):
    path = crafted(saved, tmp_path, lambda h, p: h.update(tokens=h["tokens"][:5]))
    s = loaded.new_session(n_ctx=128)
    with pytest.raises(CheckpointError, match=r"lists 5 tokens, but the state holds \d+ filled positions"):
        s.load(path)
    s.close()


def test_positions_out_of_the_context_are_refused(loaded, saved, tmp_path):
    def change(h, p):
        e = next(a for a in h["arrays"] if a["name"] == "positions")
        p = bytearray(p)
        p[e["offset"] : e["offset"] + 4] = struct.pack("<i", 10**6)
        return bytes(p)

    path = crafted(saved, tmp_path, change)
    s = loaded.new_session(n_ctx=128)
    with pytest.raises(CheckpointError, match="positions"):
        s.load(path)
    s.close()


def test_an_array_of_another_shape_than_the_state_is_refused(loaded, saved, tmp_path):
    def change(h, p):
        e = next(a for a in h["arrays"] if a["name"] == "0.a")
        e["shape"] = [e["shape"][0] * e["shape"][1]] + e["shape"][2:]

    path = crafted(saved, tmp_path, change)
    s = loaded.new_session(n_ctx=128)
    with pytest.raises(CheckpointError, match=r"the array 0\.a has shape"):
        s.load(path)
    s.close()


def test_dev_zero_is_refused_without_reading(loaded):
    s = loaded.new_session(n_ctx=128)
    t0 = time.monotonic()
    with pytest.raises(CheckpointError, match="not a regular file"):
        Chat.load(s, "/dev/zero")
    with pytest.raises(CheckpointError, match="not a regular file"):
        checkpoint.read_header("/dev/zero")
    assert time.monotonic() - t0 < 1
    s.close()


def test_a_fifo_is_refused_without_blocking(loaded, tmp_path):
    fifo = tmp_path / "chat.ckpt"
    os.mkfifo(fifo)
    s = loaded.new_session(n_ctx=128)
    outcome = []
    t = threading.Thread(target=lambda: outcome.append(_error(lambda: Chat.load(s, fifo))), daemon=True)
    t.start()
    t.join(5)
    assert outcome and isinstance(outcome[0], CheckpointError) and "not a regular file" in str(outcome[0])
    s.close()


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return e
    return None


def test_a_header_longer_than_the_file_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "big.ckpt"
    path.write_bytes(checkpoint.MAGIC + struct.pack("<IQ", 1, 2**40) + b"{}" + bytes(32))
    with pytest.raises(CheckpointError, match="its header claims"):
        checkpoint.read_header(path)


def test_the_chat_cli_load_reports_a_crafted_file(loaded, saved, tmp_path):
    """`/load` in `cera chat`: a message, never a traceback, and the conversation goes on."""
    from cera_cli.commands.chat import ChatLoop

    path = crafted(saved, tmp_path, _set(extra=[1]))
    notes = []

    class Console:
        def note(self, text):
            notes.append(text)

    loop = ChatLoop.__new__(ChatLoop)
    loop.console, loop.loaded, loop.tools = Console(), loaded, None
    loop.session = loaded.new_session(n_ctx=128)
    loop.load(str(path))
    loop.load("/dev/zero")
    assert len(notes) == 2 and all(n.startswith("cera: cannot load ") for n in notes), notes
    loop.session.close()


# -- the temporary files of killed writes ----------------------------------------------------------


def test_temporary_files_of_killed_writes_are_removed_once_stale(tmp_path):
    target = tmp_path / "a.ckpt"
    stale = tmp_path / ".a.ckpt.x1y2z3.tmp"
    fresh = tmp_path / ".a.ckpt.q9w8e7.tmp"
    other = tmp_path / ".b.ckpt.abcdef.tmp"
    for p in (stale, fresh, other):
        p.write_bytes(b"x" * 1000)
    old = time.time() - checkpoint.STALE_TMP_S - 60
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    checkpoint.write_atomic(target, [b"data"])
    assert target.read_bytes() == b"data"
    # the stale one of this target goes; a fresh one may be a write in progress; another target's waits for its own
    assert not stale.exists() and fresh.exists() and other.exists()
    assert [p.name for p, _ in checkpoint.stale_tmp_files(tmp_path)] == [other.name]
    assert checkpoint.remove_stale_tmp(tmp_path) == 1000 and not other.exists()
