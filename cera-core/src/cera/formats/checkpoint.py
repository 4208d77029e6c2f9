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
import stat
import struct
import tempfile
import time
from pathlib import Path

import numpy as np

from .. import kv_types
from .checkpoint_header import CheckpointError, check_fit, check_positions, validate

MAGIC = b"CERACKPT"
FORMAT_VERSION = 1
PREAMBLE = len(MAGIC) + 12  # magic, version, header length
MAX_HEADER_BYTES = 64 * 2**20  # a header lists the tokens: 64 MiB is millions of them
READ_PIECE = 8 * 2**20  # the payload is read (and hashed) this much at a time
# A temporary file of a write that was killed is removed by the next write to the same
# folder once it has not been written to for this long (a live write touches it with
# every chunk).
STALE_TMP_S = 15 * 60


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
    for i, m in enumerate(getattr(snapshot, "key_offsets", None) or ()):
        if m is not None:  # what a TurboQuant cache's keys are kept less (`cera.state.check_key_offsets`)
            arrays.append((f"{i}.key_offset", np.asarray(m, np.float32)))
    return arrays


def write_atomic(path: Path, chunks, _crash_at: int | None = None) -> None:
    """Write ``chunks`` (bytes) to ``path`` through a temporary file, fsync, rename.
    ``_crash_at`` (tests): end the process after that many bytes, as a crash would."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_tmp(path.parent, path.name)
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


def _is_tmp(name: str, target: str | None = None) -> bool:
    """Whether ``name`` is a temporary file `write_atomic` makes (``.TARGET.XXXX.tmp``)."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return False
    return target is None or name.startswith(f".{target}.")


def stale_tmp_files(folder: Path, target: str | None = None, older_than: float = STALE_TMP_S) -> list[tuple[Path, int]]:
    """Temporary files of killed writes in ``folder`` (of ``target`` alone, if given) not
    written to for ``older_than`` seconds, with their sizes."""
    out, now = [], time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return out
    for e in entries:
        if not _is_tmp(e.name, target):
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and now - st.st_mtime >= older_than:
            out.append((Path(e.path), st.st_size))
    return out


def remove_stale_tmp(folder: Path, target: str | None = None, older_than: float = STALE_TMP_S) -> int:
    """Remove what `stale_tmp_files` finds; returns the bytes freed."""
    freed = 0
    for p, size in stale_tmp_files(folder, target, older_than):
        try:
            p.unlink()
            freed += size
        except OSError:
            pass
    return freed


def encode(session, extra: dict | None = None) -> list[bytes]:
    """The chunks of a checkpoint of ``session`` (its state snapshot and its tokens)."""
    snap = session.state.snapshot(session.slot)
    return encode_snapshot(session.loaded, session.state, snap, session.tokens, session.pending, session.last, extra,
                           adapters=adapters_key(session))  # fmt: skip


def adapters_key(session) -> list:
    """The LoRA adapters a session's state was computed with: [[fingerprint, scale], ...]."""
    active = getattr(session, "adapters", None)
    return [list(k) for k in active.key] if active else []


def encode_snapshot(loaded, state, snap, tokens, pending, last, extra: dict | None = None, adapters=()) -> list[bytes]:
    """The chunks of a checkpoint of a state snapshot with its tokens (``adapters``: see
    `adapters_key`)."""
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
        "kv_rows": kv_types.KV_ROWS_VERSION,
        "n_ctx": state.n_ctx,
        "layout": state_layout(state),
        "n_filled": snap.n_filled,
        "tokens": [int(t) for t in tokens],
        "pending": [int(t) for t in pending],
        "last_argmax": last.get("argmax"),
        "arrays": entries,
        "extra": extra or {},
    }
    if adapters:
        header["adapters"] = [list(a) for a in adapters]
    head = json.dumps(header).encode()
    chunks = [MAGIC, struct.pack("<IQ", FORMAT_VERSION, len(head)), head]
    chunks += [np.ascontiguousarray(a).tobytes() for _, a in arrays]
    digest = hashlib.sha256()
    for c in chunks:
        digest.update(c)
    return chunks + [digest.digest()]


def save(session, path, extra: dict | None = None, _crash_at: int | None = None) -> Path:
    """Write a checkpoint of ``session`` to ``path`` atomically."""
    from ..vision.image_tokens import holds_images

    path = Path(path)
    if holds_images(session.tokens) or holds_images(session.pending):
        raise CheckpointError(
            "this session holds an image: checkpoint files of sessions with images are not supported (an image's "
            "rows are known only to this process); save before the image, or append it again after loading"
        )
    try:
        write_atomic(path, encode(session, extra), _crash_at)
    except OSError as e:
        raise CheckpointError(f"cannot write checkpoint {path}: {e.strerror or e}; check the directory and free space") from None
    return path


def _open_regular(path: Path):
    """``path`` opened for reading if it is a regular file (a FIFO, device or folder is
    refused without blocking on it), and its size."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(
                f"{path} is not a regular file (a pipe, device or folder); a checkpoint is a file written by save"
            )
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb", buffering=0), st.st_size


def _read_exact(f, n: int, path) -> bytes:
    parts, left = [], n
    while left:
        chunk = f.read(min(left, READ_PIECE))
        if not chunk:
            raise CheckpointError(f"{path} is damaged (it ends early); it cannot be restored")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _head(f, size: int, path, max_header: int) -> tuple[dict, bytes, int]:
    """The validated header, the bytes it came in (with the preamble) and the payload size."""
    if size < PREAMBLE + 32:
        raise CheckpointError(f"{path} is not a cera checkpoint (too short)")
    pre = _read_exact(f, PREAMBLE, path)
    if pre[: len(MAGIC)] != MAGIC:
        raise CheckpointError(f"{path} is not a cera checkpoint (bad magic)")
    version, head_len = struct.unpack_from("<IQ", pre, len(MAGIC))
    if version > FORMAT_VERSION:
        raise CheckpointError(f"{path} has checkpoint format {version}; this cera reads up to {FORMAT_VERSION}: upgrade cera")
    if head_len > size - PREAMBLE - 32 or head_len > max_header:
        raise CheckpointError(f"{path} is damaged (its header claims {head_len} bytes); it cannot be restored")
    raw = _read_exact(f, head_len, path)
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError):
        raise CheckpointError(f"{path}: the header is not valid JSON") from None
    payload = size - PREAMBLE - head_len - 32
    return validate(header, path, payload), pre + raw, payload


def read_header(path, max_header: int = MAX_HEADER_BYTES) -> dict:
    """The header of a checkpoint file alone, its schema checked (no checksum check:
    `read` does that). A file that is not regular is refused without blocking."""
    path = Path(path)
    f, size = _open_regular(path)
    with f:
        return _head(f, size, path, max_header)[0]


def read(path, state=None, max_header: int = MAX_HEADER_BYTES) -> tuple[dict, dict[str, np.ndarray]]:
    """Header and arrays of a checkpoint file, checked: a regular file, the magic, the
    version, the header's schema, and with ``state`` the arrays that state holds (before
    the payload is read, so a file cannot make cera read more than the state's size),
    then the checksum over everything, read in pieces."""
    path = Path(path)
    f, size = _open_regular(path)
    with f:
        header, head_bytes, _ = _head(f, size, path, max_header)
        if state is not None:
            check_fit(header, state, path)
        digest = hashlib.sha256(head_bytes)
        arrays = {}
        for e in header["arrays"]:
            a = np.empty(e["shape"], np.dtype(e["dtype"]))
            view = memoryview(a.reshape(-1).view(np.uint8)) if a.size else memoryview(b"")
            done = 0
            while done < len(view):
                n = f.readinto(view[done : done + READ_PIECE])
                if not n:
                    raise CheckpointError(f"{path} is damaged (it ends early); it cannot be restored")
                done += n
            digest.update(view)
            arrays[e["name"]] = a
        tail = _read_exact(f, 32, path)
        if f.read(1):
            raise CheckpointError(f"{path} is damaged (bytes after its checksum); it cannot be restored")
    if digest.digest() != tail:
        raise CheckpointError(f"{path} is damaged (its checksum does not match); it cannot be restored")
    if state is not None:
        check_positions(arrays["positions"], state, path)
    return header, arrays


def check(header: dict, session, path) -> None:
    """Refuse a checkpoint that does not belong to this session's model and state."""
    if header.get("model") != model_fingerprint(session.loaded):
        raise CheckpointError(
            f"{path} was saved from another model ({header.get('model_name')!r}); load it with the model it came from"
        )
    if header.get("adapters", []) != adapters_key(session):
        raise CheckpointError(
            f"{path} was saved with other LoRA adapters or scales; load it in a session with the adapters it was saved with"
        )
    if header.get("kv_type") != session.state.kv_type:
        raise CheckpointError(
            f"{path} holds a {header.get('kv_type')} KV cache; this session's is {session.state.kv_type}: "
            f"create the session with kv_type={header.get('kv_type')!r}"
        )
    if header.get("layout") != state_layout(session.state):
        raise CheckpointError(f"{path}: its state layout does not fit this session (another context or batch size?)")
    check_fit(header, session.state, path)


def _current_rows(header: dict, rows, key: bool, path):
    """Cache rows of a checkpoint in this cera's row format: q8_0 rows of version 1
    (without the Walsh-Hadamard turn, `cera.kv_types`) are decoded and encoded again;
    TurboQuant rows before version 3 (other bits a key) are refused."""
    kv_type = header["kv_type"]
    version = header.get("kv_rows", 1)
    if version >= kv_types.KV_ROWS_VERSION:
        return rows
    if kv_type not in kv_types.BLOCK_TYPES and kv_type not in kv_types.KV_DTYPES:
        raise CheckpointError(f"{path} holds {kv_type} rows of an older layout, which this cera does not read: "
                              f"evaluate the prompt again")  # fmt: skip
    if kv_type not in kv_types.BLOCK_TYPES or version >= 2:
        return rows
    per, nbytes = kv_types.BLOCK_TYPES[kv_type]
    if not kv_types.hadamard_block(kv_type, rows.shape[-1] // nbytes * per, key):
        return rows
    plain = kv_types.decode(rows, kv_type, key, turned=False)
    return kv_types.encode(plain, kv_type, key).astype(rows.dtype, copy=False)


def decode_snapshot(header: dict, arrays: dict, path):
    """The SlotSnapshot and kept output a checkpoint holds."""
    from ..state import SlotSnapshot

    items = []
    for i, lay in enumerate(header["layout"]):
        a, b = arrays.get(f"{i}.a"), arrays.get(f"{i}.b")
        if a is None or (lay[0] in ("kv", "cross") and b is None):
            raise CheckpointError(f"{path}: the arrays of state {i} are missing")
        if lay[0] == "kv":
            a, b = _current_rows(header, a, True, path), _current_rows(header, b, False, path)
        items.append((a, b) if lay[0] in ("kv", "cross") else a)
    offsets = None
    if header["kv_type"] in kv_types.TURBOQUANT_BITS:  # absent (older files): keys kept as they were
        offsets = tuple(arrays.get(f"{i}.key_offset") for i in range(len(header["layout"])))
    snap = SlotSnapshot(owner=0, n_filled=int(header["n_filled"]), positions=arrays["positions"], kv=tuple(items),
                        cross_len=(), kv_type=header["kv_type"], key_offsets=offsets)  # fmt: skip
    last = None
    if "last.logits" in arrays:
        last = {"logits": arrays["last.logits"]}
    elif header.get("last_argmax") is not None:
        last = {"argmax": int(header["last_argmax"])}
    return snap, last


def restore(session, path) -> dict:
    """Restore ``session`` from ``path`` (everything checked first). Returns the header's
    ``extra`` (a chat's messages)."""
    header, snap, last = load_checked(session, path)
    apply(session, header, snap, last)
    return header.get("extra", {})


def load_checked(session, path) -> tuple[dict, object, dict | None]:
    """Everything of ``path`` checked against ``session`` (model, precision, layout,
    arrays, tokens, checksum), nothing applied yet: (header, snapshot, kept output)."""
    path = Path(path)
    f, size = _open_regular(path)
    with f:
        header = _head(f, size, path, MAX_HEADER_BYTES)[0]
    check(header, session, path)  # refused before the payload is read
    header, arrays = read(path, session.state)
    check(header, session, path)  # the file may have been replaced in between
    snap, last = decode_snapshot(header, arrays, path)
    return header, snap, last


def apply(session, header: dict, snap, last) -> None:
    """Put a checked checkpoint (`load_checked`) into ``session``."""
    with session._lock:
        session.state.restore(session.slot, snap)
        session.tokens = [int(t) for t in header["tokens"]]
        session.pending = [int(t) for t in header["pending"]]
        session.last = last
        session._snapshots = []


__all__ = ["CheckpointError", "FORMAT_VERSION", "apply", "load_checked", "model_fingerprint", "read", "remove_stale_tmp",
           "restore", "save", "stale_tmp_files", "write_atomic"]
