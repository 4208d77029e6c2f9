"""Damaged and crafted checkpoints and prefix-cache entries: a real chat checkpoint with its
header's fields replaced by generated JSON (the checksum recomputed, so only the schema can
refuse it), bytes flipped or cut, files that are not files. `Session.load`, `Chat.load`,
`checkpoint.read_header` and a prefix-cache lookup on a shared folder holding the entry end
in a restored session (that then generates) or a `CeraError`; never another exception, a
hang, or a failed generation."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import tempfile
from pathlib import Path

import pytest
from hostile import json_values, long, quick
from hypothesis import given
from hypothesis import strategies as st

import cera
from cera.formats import checkpoint
from cera.chat.session import Chat
from cera.errors import CeraError

FIELDS = ["format", "model", "model_name", "kv_type", "n_ctx", "layout", "n_filled", "tokens", "pending", "last_argmax",
          "arrays", "extra"]  # fmt: skip
SYSTEM = "You are a careful assistant. " * 4


TINY = Path(__file__).resolve().parents[1] / "models" / "reference" / "tiny" / "tiny-mistral.gguf"


@pytest.fixture(scope="module")
def loaded():
    m = cera.load(str(TINY), device="cpu", threads=1, quiet=True)  # 3 layers of 64: a case is milliseconds
    yield m
    m.close()


@pytest.fixture(scope="module")
def original(loaded, tmp_path_factory) -> bytes:
    s = loaded.new_session(n_ctx=256)
    chat = Chat(s, system=SYSTEM)
    chat.send("Hi", max_tokens=2, temperature=0)
    path = tmp_path_factory.mktemp("orig") / "chat.ckpt"
    chat.save(path)
    s.close()
    return path.read_bytes()


def _split(data: bytes):
    n = struct.unpack_from("<Q", data, 12)[0]
    return json.loads(data[20 : 20 + n]), data[20 + n : -32]


def _join(header, payload: bytes) -> bytes:
    head = json.dumps(header).encode()
    body = checkpoint.MAGIC + struct.pack("<IQ", 1, len(head)) + head + payload
    return body + hashlib.sha256(body).digest()


def _array_field(header):
    return st.sampled_from(range(len(header["arrays"]))), st.sampled_from(["name", "dtype", "shape", "offset", "nbytes"])


edits = st.lists(st.one_of(
    st.tuples(st.just("field"), st.sampled_from(FIELDS), json_values),
    st.tuples(st.just("array"), st.integers(0, 200), st.sampled_from(["name", "dtype", "shape", "offset", "nbytes"]),
              json_values | st.sampled_from(["<f2", "<f4", "|u1", "<i8", "|O", "<U4", ">f4", [1], [-1, 2]])),
    st.tuples(st.just("tokens"), st.integers(-5, 2000)),
    st.tuples(st.just("flip"), st.integers(0, 10**9), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(0, 10**9)),
    st.tuples(st.just("chat"), json_values),
), min_size=1, max_size=3)  # fmt: skip


def build(original: bytes, ops) -> bytes:
    header, payload = _split(original)
    raw_ops = []
    for op in ops:
        if op[0] == "field":
            header[op[1]] = op[2]
        elif op[0] == "array" and isinstance(header.get("arrays"), list) and header["arrays"]:
            entry = header["arrays"][op[1] % len(header["arrays"])]
            if isinstance(entry, dict):
                entry[op[2]] = op[3]
        elif op[0] == "tokens" and isinstance(header.get("tokens"), list):
            n = max(0, len(header["tokens"]) + op[1]) if op[1] < 0 else op[1]
            header["tokens"] = (header["tokens"] * (n // max(1, len(header["tokens"])) + 1))[:n]
        elif op[0] == "chat" and isinstance(header.get("extra"), dict):
            header["extra"]["chat"] = op[1]
        else:
            raw_ops.append(op)
    try:
        data = bytearray(_join(header, payload))
    except (TypeError, ValueError):  # a generated value JSON cannot hold: keep the original header
        data = bytearray(original)
    for op in raw_ops:
        if op[0] == "flip" and data:
            data[op[1] % len(data)] ^= op[2]
        elif op[0] == "cut":
            del data[op[1] % (len(data) + 1) :]
    return bytes(data)


def check(loaded, original: bytes, ops) -> None:
    root = Path(tempfile.mkdtemp(prefix="cera-fuzz-ckpt-"))
    try:
        path = root / "case.ckpt"
        path.write_bytes(build(original, ops))
        for attempt in ("header", "session", "chat"):
            s = loaded.new_session(n_ctx=256)
            try:
                if attempt == "header":
                    checkpoint.read_header(path)
                elif attempt == "session":
                    s.load(path)
                else:
                    Chat.load(s, path)
                s.append_text(" more")
                s.generate(max_tokens=1, temperature=0)  # whatever was restored generates
            except CeraError:
                pass
            finally:
                s.close()
        # the same bytes as an entry of a shared prompt-cache folder: a miss or a hit, and generation works
        cache = loaded.enable_prefix_cache(directory=root / "pc")
        entry = cache.directory / f"{len(_split(original)[0]['tokens']):08d}-{'0' * 40}.ckpt"
        shutil.copyfile(path, entry)
        s = loaded.new_session(n_ctx=256)
        try:
            # the prompt the original entry holds, and more: an intact entry is a hit
            s.append_tokens(_split(original)[0]["tokens"] + [5, 6])
            s.generate(max_tokens=1, temperature=0)
        finally:
            s.close()
            loaded.prefix_cache = None
    finally:
        shutil.rmtree(root, ignore_errors=True)


@quick(examples=40, deadline_ms=10000)
@given(ops=edits)
def test_crafted_checkpoints_and_cache_entries(loaded, original, ops):
    check(loaded, original, ops)


@pytest.mark.slow
@long(examples=1500, deadline_ms=30000)
@given(ops=edits)
def test_crafted_checkpoints_and_cache_entries_long(loaded, original, ops):
    check(loaded, original, ops)
