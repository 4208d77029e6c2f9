"""The prefix cache: a prompt's evaluated state, kept so the next prompt that starts the same
way evaluates only the rest.

Two tiers, both keyed by the exact token prefix:

- **warm**, in memory, shared by the sessions of a loaded model: state snapshots up to a
  byte budget, the least recently used evicted first;
- **cold**, optional, on disk: one checkpoint file per prefix (`cera.formats.checkpoint`'s format:
  checksummed, written atomically) under ``directory/<model fingerprint>/``, named by the
  prefix's length and hash, up to a size cap (the least recently used files go first).
  Several processes may share the directory: files appear by rename, a file removed under
  a reader is a miss, a damaged file is reported on stderr and ignored (and removed).

A session stores its state at the end of each prompt it evaluates (`Session.evaluate`,
`generate`) and, before evaluating, looks for the cached entry that shares the longest
prefix with what it holds plus what is queued: on a hit it restores that state, cuts it
back to the shared prefix (for state that can be cut: KV caches; recurrent state must
match an entry whole) and evaluates only the rest. Since restoring gives the state the
evaluation would have produced, a hit gives the same tokens as a miss.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import threading
from collections import OrderedDict
from pathlib import Path

import attrs

from ..vision.image_tokens import holds_images
from ..errors import CeraError

# A cold entry's header lists its tokens (a few bytes each in JSON): one of a context of a
# million tokens fits in 16 MiB; a larger header is not an entry cera wrote.
MAX_ENTRY_HEADER = 16 * 2**20


def _scan(folder: Path) -> list:
    try:
        return list(os.scandir(folder))
    except OSError:
        return []


def _common(a: tuple, b: tuple) -> int:
    """Length of the common prefix of two token tuples."""
    n = min(len(a), len(b))
    if not n:
        return 0
    import numpy as np

    diff = np.nonzero(np.asarray(a[:n], np.int64) != np.asarray(b[:n], np.int64))[0]
    return int(diff[0]) if len(diff) else n


def prefix_key(tokens) -> str:
    h = hashlib.sha256()
    for t in tokens:
        h.update(int(t).to_bytes(4, "little"))
    return h.hexdigest()[:40]


@attrs.define
class Entry:
    tokens: tuple[int, ...]
    snapshot: object
    last: dict | None
    nbytes: int
    adapters: tuple = ()  # the LoRA adapters' key (`cera.adapters.ActiveAdapters.key`) it was computed with


def _adapters(session) -> tuple:
    active = getattr(session, "adapters", None)
    return active.key if active else ()


def _snapshot_bytes(snap) -> int:
    total = snap.positions.nbytes
    for item in snap.kv:
        if isinstance(item, tuple):
            total += sum(a.nbytes for a in item)
        else:
            total += item.nbytes
    return total


class PrefixCache:
    def __init__(self, loaded, max_bytes: int = 512 * 2**20, directory=None, max_disk_bytes: int = 4 * 2**30,
                 min_tokens: int = 64):  # fmt: skip
        self.loaded = loaded
        self.max_bytes = int(max_bytes)
        self.max_disk_bytes = int(max_disk_bytes)
        # Shorter prompts are not kept: they are cheap, and a prompt of at least this many
        # tokens is evaluated with the prompt kernels throughout (Session.PROMPT_ROWS), which
        # is what makes a hit compute exactly what a miss computes.
        self.min_tokens = max(int(min_tokens), 64)
        self._warm: OrderedDict[str, Entry] = OrderedDict()
        self._bytes = 0
        self._lengths: dict[int, int] = {}  # warm entry lengths -> count
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        self.directory = None
        if directory is not None:
            from ..formats.checkpoint import model_fingerprint

            self.directory = Path(directory).expanduser() / model_fingerprint(loaded)[:24]
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise CeraError(f"cannot use prompt cache directory {directory}: {e.strerror or e}") from None

    # -- storing -----------------------------------------------------------------------------

    def store(self, session) -> None:
        """Keep the session's state (its evaluated tokens) as a cached prefix."""
        tokens = tuple(session.tokens)
        if len(tokens) < self.min_tokens:
            return
        adapters = _adapters(session)
        key = f"{session.state.kv_type}:{prefix_key(tokens)}"  # one entry per cache type
        if adapters:
            key += repr(adapters)
        with self._lock:
            if key in self._warm:
                self._warm.move_to_end(key)
                return
        snap = session.state.snapshot(session.slot)
        from .session import _copy

        entry = Entry(tokens, snap, _copy(session.last), _snapshot_bytes(snap), adapters)
        with self._lock:
            self._warm[key] = entry
            self._bytes += entry.nbytes
            self._lengths[len(tokens)] = self._lengths.get(len(tokens), 0) + 1
            while self._bytes > self.max_bytes and len(self._warm) > 1:
                _, old = self._warm.popitem(last=False)
                self._drop(old)
            if self._bytes > self.max_bytes:  # one entry larger than the whole budget
                _, old = self._warm.popitem(last=False)
                self._drop(old)
        if self.directory is not None and not adapters and not holds_images(tokens):  # the disk tier holds the base model's prefixes; image ids mean nothing in another process
            self._store_cold(session, tokens, snap, entry.last)

    def _drop(self, entry: Entry) -> None:
        self._bytes -= entry.nbytes
        n = len(entry.tokens)
        self._lengths[n] -= 1
        if not self._lengths[n]:
            del self._lengths[n]

    def _path(self, tokens) -> Path:
        return self.directory / f"{len(tokens):08d}-{prefix_key(tokens)}.ckpt"

    def _store_cold(self, session, tokens, snap, last) -> None:
        from ..formats.checkpoint import encode_snapshot, write_atomic

        path = self._path(tokens)
        if path.is_file() and not path.is_symlink():
            os.utime(path)
            return
        try:
            write_atomic(path, encode_snapshot(self.loaded, session.state, snap, tokens, (), last))
        except OSError as e:
            print(f"cera: prompt cache: cannot write {path.name}: {e.strerror or e}", file=sys.stderr)
            return
        self._evict_cold()

    def _evict_cold(self) -> None:
        """Keep the folder under its cap: the least recently used entries go first. The
        temporary files of writes that were killed count too, and go once stale."""
        from ..formats.checkpoint import remove_stale_tmp

        remove_stale_tmp(self.directory)
        files, total = [], 0
        for e in _scan(self.directory):
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            total += st.st_size
            if e.name.endswith(".ckpt"):
                files.append((st.st_mtime, st.st_size, Path(e.path)))
        for _, size, p in sorted(files):
            if total <= self.max_disk_bytes:
                break
            try:
                p.unlink()
                total -= size
            except OSError:
                pass

    def disk_usage(self) -> tuple[int, int]:
        """(bytes, files) the cold tier's folder holds, temporary files of writes included."""
        n = size = 0
        for e in _scan(self.directory) if self.directory is not None else ():
            try:
                size += e.stat(follow_symlinks=False).st_size
                n += 1
            except OSError:
                pass
        return size, n

    def _discard(self, path: Path, why: str) -> None:
        """Report an entry that cannot be used, and remove it (a miss for everyone after)."""
        print(f"cera: prompt cache: ignoring {path.name} ({why}); removing it", file=sys.stderr)
        try:
            path.unlink()
        except OSError:
            pass

    # -- looking up ------------------------------------------------------------------------------

    def lookup(self, tokens, cut: bool = True, state=None, adapters: tuple = ()) -> tuple[Entry, int] | None:
        """The entry sharing the longest prefix with ``tokens`` and that prefix's length,
        or None. Without ``cut`` (state that cannot be cut back) only whole entries count.
        ``state``: the state the entry is for (disk entries must fit it); ``adapters``: the
        key of the LoRA adapters the entry must have been computed with."""
        tokens = tuple(int(t) for t in tokens)
        best: tuple[Entry, int] | None = None
        with self._lock:
            for key, entry in self._warm.items():
                if entry.adapters != adapters:
                    continue
                if state is not None and getattr(entry.snapshot, "kv_type", state.kv_type) != state.kv_type:
                    continue  # another cache type's rows: of no use to this state
                n = _common(entry.tokens, tokens)
                if self._usable(entry, n, cut) and (best is None or n > best[1]):
                    best = (entry, n, key)
            if best is not None:
                self._warm.move_to_end(best[2])
                best = best[:2]
        if self.directory is not None and not adapters:
            cold = self._lookup_cold(tokens, cut, best[1] if best else 0, state)
            if cold is not None:
                best = cold
        if best is None:
            self.misses += 1
        else:
            self.hits += 1
        return best

    def _usable(self, entry: Entry, n: int, cut: bool) -> bool:
        return n == len(entry.tokens) or (cut and n >= self.min_tokens)

    def _lookup_cold(self, tokens, cut: bool, beat: int, state=None) -> tuple[Entry, int] | None:
        """The best entry on disk. Every entry is checked before it counts: a regular file
        (a FIFO, device or link is never opened), a header of the checkpoint schema, this
        model; one that fails is reported and removed. With ``state``, an entry of another
        KV precision or layout is a miss (it may serve another session), and the arrays are
        checked against the state before the payload is read, in bounded pieces."""
        from ..formats.checkpoint import CheckpointError, decode_snapshot, model_fingerprint, read, read_header, state_layout

        candidates = []
        for e in _scan(self.directory):
            if not e.name.endswith(".ckpt"):
                continue
            path = Path(e.path)
            try:
                st = e.stat(follow_symlinks=False)
                n_file = int(e.name.split("-", 1)[0])
            except OSError:
                continue
            except ValueError:
                self._discard(path, "not named as entries are")
                continue
            if not stat.S_ISREG(st.st_mode):
                self._discard(path, "not a regular file")
                continue
            candidates.append((st.st_mtime, n_file, path))
        fingerprint = model_fingerprint(self.loaded)
        layout = state_layout(state) if state is not None else None
        best = None
        for _, _, path in sorted(candidates, reverse=True)[:64]:  # the most recently used
            try:
                header = read_header(path, max_header=MAX_ENTRY_HEADER)
            except FileNotFoundError:
                continue
            except CheckpointError as e:
                if path.exists():
                    self._discard(path, str(e))
                continue
            if header["model"] != fingerprint:
                self._discard(path, "from another model")
                continue
            if state is not None and (header["kv_type"] != state.kv_type or header["layout"] != layout):
                continue  # another session's shape: not this one's to use, nor to remove
            entry_tokens = tuple(header["tokens"])
            n = _common(entry_tokens, tokens)
            if n > beat and (n == len(entry_tokens) or (cut and n >= self.min_tokens)) and (best is None or n > best[1]):
                best = (path, n)
        if best is None:
            return None
        path, n = best
        try:
            header, arrays = read(path, state)
            if header["model"] != fingerprint:
                raise CheckpointError(f"{path.name} is from another model")
            if state is not None and (header["kv_type"] != state.kv_type or header["layout"] != layout):
                return None  # replaced in between by an entry of another shape
            snap, last = decode_snapshot(header, arrays, path)
        except CheckpointError as e:
            if path.exists():
                self._discard(path, str(e))
            return None
        try:
            os.utime(path)
        except OSError:
            pass
        return Entry(tuple(header["tokens"]), snap, last, 0), n

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._warm)


__all__ = ["PrefixCache", "prefix_key"]
