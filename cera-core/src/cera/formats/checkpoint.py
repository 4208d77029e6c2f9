"""Checkpoint files: a session's state on disk, written atomically and checked on read.

A checkpoint holds everything needed to continue a sequence exactly: the model's
fingerprint (architecture, every tensor's name, type and shape, the tokenizer), the
state's layout (the declared kinds and shapes, the KV precision, the ring sizes), the
tokens evaluated and queued, the output kept for the last position, the state's arrays,
and for a chat its messages. Format (little-endian)::

    b"CERACKPT"  magic
    u32          format version (FORMAT_VERSION)
    u64          header length
    header       UTF-8 JSON: fields, and per array its name, dtype, shape, offset, length
    payload      the arrays back to back
    32 bytes     SHA-256 of everything before it

Saving writes a temporary file in the same directory, fsyncs it, renames it over the
target and fsyncs the directory, so a crash at any byte leaves the previous checkpoint
intact. Loading checks the magic, the version, the checksum, the fingerprint, the KV
precision and the layout before it touches the session: a file from another model, another
precision, a newer format or a damaged one is refused with an error that says which, and
nothing is half-restored.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from pathlib import Path

import numpy as np

from ..errors import CeraError

MAGIC = b"CERACKPT"
FORMAT_VERSION = 1


class CheckpointError(CeraError):
    """A checkpoint file is damaged, from another model, precision or format version."""


def model_fingerprint(loaded) -> str:
    """A SHA-256 over what decides a model's computation and tokens: the architecture,
    every tensor's name, type and shape, the tokenizer's model, vocabulary and merges."""
    cached = getattr(loaded, "_fingerprint", None)
    if cached:
        return cached
    h = hashlib.sha256()
    g = loaded.gguf
    h.update(f"arch={g.architecture}\n".encode())
    for name in sorted(g.tensors):
        info = g.tensors[name]
        h.update(f"{name}|{info.type_name}|{tuple(info.shape)}\n".encode())
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.merges",
                "tokenizer.ggml.token_type"):  # fmt: skip
        value = g.get(key)
        h.update(f"{key}=".encode())
        if isinstance(value, (list, tuple)):
            for v in value:
                h.update(str(v).encode("utf-8", "surrogateescape") + b"\x00")
        elif isinstance(value, np.ndarray):
            h.update(value.tobytes())
        else:
            h.update(str(value).encode("utf-8", "surrogateescape"))
        h.update(b"\n")
    loaded._fingerprint = h.hexdigest()
    return loaded._fingerprint


def state_layout(state) -> list:
    """What a snapshot's arrays must fit: per declaration its kind and shape."""
    out = []
    for i, d in enumerate(state.decls):
        if d.kind == "kv":
            out.append(["kv", d.n_kv_heads, d.k_dim, d.v_dim, d.window, int(state.k[i].shape[2])])
        elif d.kind == "conv":
            out.append(["conv", d.channels, d.kernel])
        elif d.kind == "ssm":
            out.append(["ssm", d.n_heads, d.head_dim, d.state_dim])
        else:
            out.append(["cross", d.n_kv_heads, d.k_dim, d.v_dim, d.max_len])
    return out


def _arrays_of(snapshot) -> list[tuple[str, np.ndarray]]:
    arrays = [("positions", snapshot.positions)]
    for i, item in enumerate(snapshot.kv):
        if isinstance(item, tuple):
            arrays += [(f"{i}.a", item[0]), (f"{i}.b", item[1])]
        else:
            arrays.append((f"{i}.a", item))
    return arrays


def write_atomic(path: Path, chunks, _crash_at: int | None = None) -> None:
    """Write ``chunks`` (bytes) to ``path`` through a temporary file, fsync, rename.
    ``_crash_at`` (tests): end the process after that many bytes, as a crash would."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    written = 0
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                if _crash_at is not None and written + len(chunk) >= _crash_at:
                    f.write(chunk[: max(0, _crash_at - written)])
                    f.flush()
                    os._exit(137)
                f.write(chunk)
                written += len(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:  # pragma: no cover - platforms without directory fsync
        pass


def encode(session, extra: dict | None = None) -> list[bytes]:
    """The chunks of a checkpoint of ``session`` (its state snapshot and its tokens)."""
    snap = session.state.snapshot(session.slot)
    return encode_snapshot(session.loaded, session.state, snap, session.tokens, session.pending, session.last, extra)


def encode_snapshot(loaded, state, snap, tokens, pending, last, extra: dict | None = None) -> list[bytes]:
    """The chunks of a checkpoint of a state snapshot with its tokens."""
    arrays = _arrays_of(snap)
    last = dict(last or {})
    if "logits" in last:
        arrays.append(("last.logits", np.asarray(last["logits"], np.float32)))
    entries, offset = [], 0
    for name, a in arrays:
        a = np.ascontiguousarray(a)
        entries.append({"name": name, "dtype": a.dtype.str, "shape": list(a.shape), "offset": offset, "nbytes": a.nbytes})
        offset += a.nbytes
    header = {
        "format": FORMAT_VERSION,
        "model": model_fingerprint(loaded),
        "model_name": loaded.name,
        "kv_type": state.kv_type,
        "n_ctx": state.n_ctx,
        "layout": state_layout(state),
        "n_filled": snap.n_filled,
        "tokens": [int(t) for t in tokens],
        "pending": [int(t) for t in pending],
        "last_argmax": last.get("argmax"),
        "arrays": entries,
        "extra": extra or {},
    }
    head = json.dumps(header).encode()
    chunks = [MAGIC, struct.pack("<IQ", FORMAT_VERSION, len(head)), head]
    chunks += [np.ascontiguousarray(a).tobytes() for _, a in arrays]
    digest = hashlib.sha256()
    for c in chunks:
        digest.update(c)
    return chunks + [digest.digest()]


def save(session, path, extra: dict | None = None, _crash_at: int | None = None) -> Path:
    """Write a checkpoint of ``session`` to ``path`` atomically."""
    path = Path(path)
    try:
        write_atomic(path, encode(session, extra), _crash_at)
    except OSError as e:
        raise CheckpointError(f"cannot write checkpoint {path}: {e.strerror or e}; check the directory and free space") from None
    return path


def read_header(path) -> dict:
    """The header of a checkpoint file alone (no checksum check: `read` does that)."""
    with open(path, "rb") as f:
        head = f.read(len(MAGIC) + 12)
        if len(head) < len(MAGIC) + 12 or head[: len(MAGIC)] != MAGIC:
            raise CheckpointError(f"{path} is not a cera checkpoint")
        version, head_len = struct.unpack_from("<IQ", head, len(MAGIC))
        if version > FORMAT_VERSION or head_len > 1 << 31:
            raise CheckpointError(f"{path}: checkpoint format {version} is not readable here")
        try:
            return json.loads(f.read(head_len))
        except ValueError:
            raise CheckpointError(f"{path}: the header is not valid JSON") from None


def read(path) -> tuple[dict, dict[str, np.ndarray]]:
    """Header and arrays of a checkpoint file, checked (magic, version, checksum)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {e.strerror or e}") from None
    if len(data) < len(MAGIC) + 12 + 32 or data[: len(MAGIC)] != MAGIC:
        raise CheckpointError(f"{path} is not a cera checkpoint (bad magic or too short)")
    version, head_len = struct.unpack_from("<IQ", data, len(MAGIC))
    if version > FORMAT_VERSION:
        raise CheckpointError(f"{path} has checkpoint format {version}; this cera reads up to {FORMAT_VERSION}: upgrade cera")
    if hashlib.sha256(data[:-32]).digest() != data[-32:]:
        raise CheckpointError(f"{path} is damaged (its checksum does not match); it cannot be restored")
    start = len(MAGIC) + 12
    try:
        header = json.loads(data[start : start + head_len])
    except ValueError:
        raise CheckpointError(f"{path}: the header is not valid JSON") from None
    payload = memoryview(data)[start + head_len : -32]
    arrays = {}
    for e in header.get("arrays", []):
        a = np.frombuffer(payload, dtype=np.dtype(e["dtype"]), count=int(np.prod(e["shape"])), offset=e["offset"])
        arrays[e["name"]] = a.reshape(e["shape"]).copy()
    return header, arrays


def check(header: dict, session, path) -> None:
    """Refuse a checkpoint that does not belong to this session's model and state."""
    if header.get("model") != model_fingerprint(session.loaded):
        raise CheckpointError(
            f"{path} was saved from another model ({header.get('model_name')!r}); load it with the model it came from"
        )
    if header.get("kv_type") != session.state.kv_type:
        raise CheckpointError(
            f"{path} holds a {header.get('kv_type')} KV cache; this session's is {session.state.kv_type}: "
            f"create the session with kv_type={header.get('kv_type')!r}"
        )
    if header.get("layout") != state_layout(session.state):
        raise CheckpointError(f"{path}: its state layout does not fit this session (another context or batch size?)")
    if header.get("n_filled", 0) > session.state.n_ctx:
        raise CheckpointError(f"{path} holds {header['n_filled']} tokens; this session's context is {session.state.n_ctx}")


def decode_snapshot(header: dict, arrays: dict, path):
    """The SlotSnapshot and kept output a checkpoint holds."""
    from ..state import SlotSnapshot

    items = []
    for i, lay in enumerate(header["layout"]):
        a, b = arrays.get(f"{i}.a"), arrays.get(f"{i}.b")
        if a is None or (lay[0] in ("kv", "cross") and b is None):
            raise CheckpointError(f"{path}: the arrays of state {i} are missing")
        items.append((a, b) if lay[0] in ("kv", "cross") else a)
    snap = SlotSnapshot(owner=0, n_filled=int(header["n_filled"]), positions=arrays["positions"], kv=tuple(items),
                        cross_len=())  # fmt: skip
    last = None
    if "last.logits" in arrays:
        last = {"logits": arrays["last.logits"]}
    elif header.get("last_argmax") is not None:
        last = {"argmax": int(header["last_argmax"])}
    return snap, last


def restore(session, path) -> dict:
    """Restore ``session`` from ``path`` (everything checked first). Returns the header's
    ``extra`` (a chat's messages)."""
    header, arrays = read(path)
    check(header, session, path)
    snap, last = decode_snapshot(header, arrays, path)
    with session._lock:
        session.state.restore(session.slot, snap)
        session.tokens = [int(t) for t in header["tokens"]]
        session.pending = [int(t) for t in header["pending"]]
        session.last = last
        session._snapshots = []
    return header.get("extra", {})


__all__ = ["CheckpointError", "FORMAT_VERSION", "model_fingerprint", "read", "restore", "save", "write_atomic"]
