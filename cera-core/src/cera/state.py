"""Typed model state: what a family declares, and the host (numpy) storage of it.

A family declares, per layer, the state its ops carry from one forward pass to the next
(`StateSpec`): attention keys and values (`AttentionKV`, optionally a sliding window that
sizes the cache to the window), the carried inputs of a short convolution (`ShortConv`),
a state-space layer's recurrent state (`SSMState`), or a cross-attention memory
(`CrossKV`, written once per sequence by an encoder). Ops get the declaration's handle
(`StateRef`), never a bare layer number.

A backend stores the state; one store holds several sequences, each in its own slot, so
one forward pass can serve many sessions. Every kind defines what a session needs to edit
its sequence: `truncate` (rewind), `snapshot`/`restore`, and `shift` (drop a span of the
context and renumber the rest, for context shifting). A kind that cannot do one says so
with `StateNotRewindable`; the session then falls back to a snapshot.

`HostState` keeps everything in numpy arrays: the reference backend uses it as is, and
the CPU backend's C kernels read and write the same arrays through pointers.
"""

from __future__ import annotations

import os
from typing import Any

import attrs
import numpy as np

from .errors import ContextFull, ResourceExhausted, SessionError, UnsupportedOperation
from .graph.ops import RopeSpec, rotate

from .kv_types import KV_CODES, KV_TYPE_NAMES, check_dim, kv_dtype, row_bytes, row_size  # noqa: F401 - KV_CODES: re-exported (the CPU backend imports it from here)
from .kv_types import decode as _kv_decode
from .kv_types import encode as _kv_encode

KV_TYPES = {name: kv_dtype(name) for name in KV_TYPE_NAMES}


def kv_row_shape(kv_type: str, dim: int, key: bool = True) -> int:
    """Elements (f16/f32) or bytes (the block and TurboQuant types) of a cached key or
    value row (`cera.kv_types`)."""
    return row_size(kv_type, dim, key)


INT32_MAX = 2**31 - 1


class StateNotRewindable(SessionError):
    """This state cannot be returned to an earlier point cell by cell (recurrent state, or
    a sliding-window cache that no longer holds the cells needed): restore a snapshot."""


# -- declarations ----------------------------------------------------------------------------


@attrs.frozen
class AttentionKV:
    """Keys and values of one attention layer: per cell, ``n_kv_heads`` keys of ``k_dim``
    and values of ``v_dim``. With ``window``, the cache keeps only the cells a sliding
    window can still see (a ring of window + batch cells, not the whole context).
    ``rope`` is how the layer rotated its keys, so a context shift can rotate them again."""

    kind = "kv"
    n_kv_heads: int
    k_dim: int
    v_dim: int
    window: int | None = None
    rope: RopeSpec | None = None


@attrs.frozen
class ShortConv:
    """The last ``kernel - 1`` inputs of a causal depthwise convolution over ``channels``."""

    kind = "conv"
    channels: int
    kernel: int


@attrs.frozen
class SSMState:
    """A recurrent layer's matrix state: ``[n_heads, head_dim, state_dim]`` float32 (Mamba-2's
    SSM state; the gated delta rule's ``[value_heads, dim_v, dim_k]``)."""

    kind = "ssm"
    n_heads: int
    head_dim: int
    state_dim: int


@attrs.frozen
class CrossKV:
    """A cross-attention memory: up to ``max_len`` keys and values, written once per
    sequence (an encoder's output) and read by every decoding step."""

    kind = "cross"
    n_kv_heads: int
    k_dim: int
    v_dim: int
    max_len: int


DECLARATIONS = (AttentionKV, ShortConv, SSMState, CrossKV)


@attrs.frozen
class StateRef:
    """The handle an op gets: which declared state, and its kind."""

    index: int
    kind: str
    decl: Any = attrs.field(eq=False, repr=False)


class StateSpec:
    """A family's state declaration: add one entry per layer that carries state and keep
    the handle it returns for that layer's ops."""

    def __init__(self):
        self.items: list[Any] = []

    def add(self, decl) -> StateRef:
        if not isinstance(decl, DECLARATIONS):
            raise TypeError(f"state declarations are {', '.join(d.__name__ for d in DECLARATIONS)}, not {decl!r}")
        self.items.append(decl)
        return StateRef(len(self.items) - 1, decl.kind, decl)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def kinds(self) -> set[str]:
        return {d.kind for d in self.items}

    @property
    def rewindable(self) -> bool:
        """True when every kind can be truncated cell by cell (no recurrent state)."""
        return not self.kinds() & {"conv", "ssm"}


def ring_cells(decl: AttentionKV, n_ctx: int, n_batch: int, swa_full: bool = False) -> int:
    """Cells a layer's cache holds: the whole context, or for a sliding window the window
    plus one batch (the oldest query row of a batch still sees window - 1 cells back).
    ``swa_full`` keeps whole-context caches for sliding-window layers too (llama.cpp's
    option of that name), which computes the same but costs the memory."""
    if decl.window is None or swa_full:
        return n_ctx
    return min(n_ctx, decl.window + n_batch)


# -- host storage -------------------------------------------------------------------------------


def _encode(x: np.ndarray, kv_type: str, dtype, key: bool = True) -> np.ndarray:
    return _kv_encode(x, kv_type, key).astype(dtype, copy=False)


def _decode(x: np.ndarray, kv_type: str, key: bool = True) -> np.ndarray:
    return _kv_decode(x, kv_type, key)


class KVView:
    """One layer's cache in one slot: ``capacity`` physical cells, a ring when smaller than
    the context. Cell c of the sequence (counted from its start) lives at c % capacity."""

    def __init__(self, k: np.ndarray, v: np.ndarray, kv_type: str = "f16"):
        self.k = k  # [n_kv_heads, capacity, row]
        self.v = v
        self.kv_type = kv_type
        self.capacity = k.shape[1]

    def write(self, start: int, k: np.ndarray, v: np.ndarray) -> None:
        n = k.shape[0]
        idx = (start + np.arange(n)) % self.capacity
        self.k[:, idx] = _encode(np.swapaxes(k, 0, 1), self.kv_type, self.k.dtype, True)
        self.v[:, idx] = _encode(np.swapaxes(v, 0, 1), self.kv_type, self.v.dtype, False)

    def read(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cells (sequence order) as float64 [cells, heads, dim]."""
        idx = np.asarray(cells) % self.capacity
        return (
            np.swapaxes(_decode(self.k[:, idx], self.kv_type, True), 0, 1),
            np.swapaxes(_decode(self.v[:, idx], self.kv_type, False), 0, 1),
        )


class CrossView:
    def __init__(self, store: HostState, index: int, slot: int):
        self.s, self.index, self.slot = store, index, slot

    def store(self, k, v) -> None:
        kc, vc = self.s.cross_k[self.index], self.s.cross_v[self.index]
        n = k.shape[0]
        if n > kc.shape[1]:
            raise ContextFull(f"cross-attention memory of {n} rows exceeds its size of {kc.shape[1]}")
        kc[self.slot, :n] = k
        vc[self.slot, :n] = v
        self.s.cross_len[self.index][self.slot] = n

    def read(self):
        n = int(self.s.cross_len[self.index][self.slot])
        return (
            self.s.cross_k[self.index][self.slot, :n].astype(np.float64),
            self.s.cross_v[self.index][self.slot, :n].astype(np.float64),
        )


@attrs.frozen
class SlotSnapshot:
    """A copy of one slot: the filled cells (in sequence order) and the recurrent state."""

    owner: int
    n_filled: int
    positions: np.ndarray
    kv: tuple  # per declaration: (k, v) in sequence order for kv, arrays for the rest, None
    cross_len: tuple
    kv_type: str = "f16"  # the rows' type (`cera.kv_types`): restored only into a state of that type
    # TurboQuant key rows stored less a per-head offset: per declaration a float32 array
    # [kv heads, k_dim] or None (no offset); None: none anywhere
    key_offsets: tuple | None = None


def shape_key(state) -> tuple:
    """What a compiled graph depends on about a state: its shape (context, slots, cache
    type, batch, and each KV declaration's cells), fixed when the state is made. The one
    key the runner's cache and every backend's executables compare (kept on the state, as
    every pass looks it up); () for no state."""
    if state is None:
        return ()
    key = getattr(state, "_shape_key", None)
    if key is None:
        caps = tuple(sorted((i, a.shape[2]) for i, a in getattr(state, "k", {}).items()))
        key = (state.n_ctx, state.n_slots, state.kv_type, state.n_batch, caps)
        try:
            state._shape_key = key
        except AttributeError:  # a state with __slots__: computed each time
            pass
    return key


class HostState:
    """Storage of a `StateSpec` for ``n_slots`` sequences of up to ``n_ctx`` cells, in
    numpy arrays that backends may hand to kernels as pointers (they never move).

    Per slot the state records how many cells are filled (``n_filled``) and the position
    of the token in each cell (``pos``, -1 when empty), which is what masks compare, so a
    sequence may hold tokens at any positions. A forward pass runs between `begin` and
    `commit` (or `rollback`): `begin` checks the new cells fit and records their positions.
    """

    def __init__(self, spec: StateSpec, n_ctx: int, n_slots: int = 1, kv_type: str = "f16", n_batch: int = 512,
                 swa_full: bool = False):  # fmt: skip
        if kv_type not in KV_TYPES:
            raise UnsupportedOperation(f"KV cache type {kv_type!r} does not exist; use one of {', '.join(KV_TYPE_NAMES)}")
        for what, v in (("n_ctx", n_ctx), ("n_slots", n_slots), ("n_batch", n_batch)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise SessionError(f"{what} must be a positive integer, got {v!r}")
        self.spec = spec
        self.decls = list(spec)
        self.n_ctx = int(n_ctx)
        self.n_slots = int(n_slots)
        self.n_batch = int(min(n_batch, n_ctx))
        self.kv_type = kv_type
        self.swa_full = bool(swa_full)
        dtype = KV_TYPES[kv_type]
        # Pages are mapped lazily, so an absurd context would only fail once filled, after
        # eating the machine's memory (and the position table is written at once): refuse a
        # state that could never fit before touching anything.
        need = estimate_bytes(spec, self.n_ctx, n_slots, kv_type, self.n_batch)
        ceiling = memory_ceiling()
        if ceiling is not None and need > ceiling:
            raise ResourceExhausted(
                f"the state for {n_slots} sequence(s) of {self.n_ctx} tokens needs {need / 2**30:.1f} GiB of memory, "
                f"more than this machine has ({ceiling / 2**30:.1f} GiB with swap); use a smaller context"
            )
        if self.n_ctx > MAX_N_CTX:
            # Positions are int32 in the state and the kernels: a larger context would wrap.
            raise SessionError(f"n_ctx must be at most {MAX_N_CTX} (positions are 32-bit), got {n_ctx}")
        self.n_filled = np.zeros(n_slots, np.int64)
        try:
            self.pos = np.full((n_slots, self.n_ctx), -1, np.int32)
        except (MemoryError, ValueError):
            raise ResourceExhausted(f"a context of {self.n_ctx} tokens x {n_slots} sequence(s) does not fit in memory; use a smaller context") from None
        self.k: dict[int, np.ndarray] = {}
        self.v: dict[int, np.ndarray] = {}
        self.conv_state: dict[int, np.ndarray] = {}
        self.ssm_state: dict[int, np.ndarray] = {}
        self.cross_k: dict[int, np.ndarray] = {}
        self.cross_v: dict[int, np.ndarray] = {}
        self.cross_len: dict[int, np.ndarray] = {}
        # np.zeros maps pages lazily: a large n_ctx costs memory only as cells fill.
        try:
            self._allocate(n_slots, dtype)
        except (MemoryError, ValueError) as e:
            need = estimate_bytes(spec, self.n_ctx, n_slots, kv_type, self.n_batch)
            raise ResourceExhausted(
                f"the state for {n_slots} sequence(s) of {self.n_ctx} tokens needs {need / 2**30:.1f} GiB of memory, "
                f"which cannot be allocated ({type(e).__name__}: {e}); use a smaller context"
            ) from None
        self._free = list(range(n_slots))
        self._pending: dict[int, int] = {}  # slot -> cells reserved by the pass in progress
        self._poisoned: set[int] = set()

    def _allocate(self, n_slots: int, dtype) -> None:
        for i, d in enumerate(self.decls):
            if d.kind == "kv":
                cap = ring_cells(d, self.n_ctx, self.n_batch, self.swa_full)
                why = check_dim(self.kv_type, d.k_dim) or check_dim(self.kv_type, d.v_dim)
                if why:
                    raise UnsupportedOperation(
                        f"{why}; this model's are {d.k_dim} (keys) and {d.v_dim} (values): use kv_type f16 or f32"
                    )
                k_row, v_row = kv_row_shape(self.kv_type, d.k_dim, True), kv_row_shape(self.kv_type, d.v_dim, False)
                self.k[i] = np.zeros((n_slots, d.n_kv_heads, cap, k_row), dtype)
                self.v[i] = np.zeros((n_slots, d.n_kv_heads, cap, v_row), dtype)
            elif d.kind == "conv":
                self.conv_state[i] = np.zeros((n_slots, d.kernel - 1, d.channels), np.float32)
            elif d.kind == "ssm":
                self.ssm_state[i] = np.zeros((n_slots, d.n_heads, d.head_dim, d.state_dim), np.float32)
            elif d.kind == "cross":
                self.cross_k[i] = np.zeros((n_slots, d.max_len, d.n_kv_heads, d.k_dim), np.float32)
                self.cross_v[i] = np.zeros((n_slots, d.max_len, d.n_kv_heads, d.v_dim), np.float32)
                self.cross_len[i] = np.zeros(n_slots, np.int64)

    # -- slots ---------------------------------------------------------------------------------

    def acquire(self) -> int:
        """A free slot (cleared), or SessionError when all are taken."""
        if not self._free:
            raise SessionError(f"all {self.n_slots} sequence slots of this state are in use; release one first")
        slot = self._free.pop(0)
        self.clear(slot)
        return slot

    def release(self, slot: int) -> None:
        self._check_slot(slot)
        if slot not in self._free:
            self._free.append(slot)
            self._free.sort()

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.n_slots:
            raise SessionError(f"slot {slot} does not exist: the state has {self.n_slots}")

    def clear(self, slot: int) -> None:
        self._check_slot(slot)
        self.pos[slot, : self.n_filled[slot]] = -1
        self.n_filled[slot] = 0
        for a in self.conv_state.values():
            a[slot] = 0
        for a in self.ssm_state.values():
            a[slot] = 0
        for a in self.cross_len.values():
            a[slot] = 0
        self._poisoned.discard(slot)

    # -- the forward-pass protocol ----------------------------------------------------------

    def begin(self, slot: int, positions) -> int:
        """Reserve cells for ``positions`` (a 1-D integer array, or a tuple or list of ints)
        in ``slot``; returns the first cell (the number of cells the slot held)."""
        if not 0 <= slot < self.n_slots:
            self._check_slot(slot)  # raises
        if slot in self._pending:
            raise SessionError("state.begin called again before commit() or rollback() of the previous pass")
        if slot in self._poisoned:
            raise SessionError(
                "an earlier evaluation of this sequence failed part-way through its recurrent state; "
                "reset the session (or restore a snapshot) before evaluating again"
            )
        if isinstance(positions, (tuple, list)) and all(type(p) is int for p in positions):
            # the runner's own steps (a decode step every token): checked without numpy
            lo, hi = (min(positions), max(positions)) if positions else (0, 0)
        else:
            positions = np.asarray(positions)
            if positions.ndim != 1 or positions.dtype.kind not in "iu":
                raise SessionError(f"positions must be a 1-D integer array, got {positions.dtype} {positions.shape}")
            lo, hi = (int(positions.min()), int(positions.max())) if len(positions) else (0, 0)
        n = len(positions)
        start = int(self.n_filled[slot])
        if start + n > self.n_ctx:
            raise ContextFull(
                f"{n} tokens do not fit in the context: {start} of its {self.n_ctx} cells are used; "
                f"truncate the session or create it with a larger context"
            )
        if n > self.n_batch:
            raise SessionError(f"a pass of {n} tokens is larger than this state's batch of {self.n_batch}")
        if lo < 0 or hi > INT32_MAX:
            raise SessionError("positions must be non-negative int32 values")
        self.pos[slot, start : start + n] = positions
        self._pending[slot] = n
        return start

    def commit(self, slot: int) -> None:
        n = self._pending.pop(slot, None)
        if n is None:
            raise SessionError("state.commit called without a pass in progress (call begin first)")
        self.n_filled[slot] += n

    def rollback(self, slot: int) -> None:
        """Forget a pass that failed or was cancelled. KV cells beyond n_filled are unused,
        so they need nothing; recurrent state may have been updated part-way, so a slot
        that has any is marked unusable until cleared or restored."""
        n = self._pending.pop(slot, None)
        if n is None:
            return
        start = int(self.n_filled[slot])
        self.pos[slot, start : start + n] = -1
        if self.conv_state or self.ssm_state:
            self._poisoned.add(slot)

    # -- views for ops ---------------------------------------------------------------------------

    def kv(self, ref, slot: int) -> KVView:
        i = _index(ref)
        return KVView(self.k[i][slot], self.v[i][slot], self.kv_type)

    def positions(self, slot: int) -> np.ndarray:
        return self.pos[slot]

    def conv(self, ref, slot: int) -> np.ndarray:
        return self.conv_state[_index(ref)][slot]

    def ssm(self, ref, slot: int) -> np.ndarray:
        return self.ssm_state[_index(ref)][slot]

    def cross(self, ref, slot: int) -> CrossView:
        return CrossView(self, _index(ref), slot)

    # -- editing ---------------------------------------------------------------------------------

    def copy_cells(self, src, dst) -> None:
        """Slots ``dst[i]`` become copies of slots ``src[i]``: their cells, positions and
        recurrent state, in one go (a permutation of slots works). Cross-attention
        memories stay: the hypotheses of a search over one source (beams, samples) start
        from one prompt's cache and read one memory."""
        src, dst = [int(s) for s in src], [int(d) for d in dst]
        if src == dst:
            return
        for s in (*src, *dst):
            self._check_slot(s)
        n = int(max(self.n_filled[s] for s in src))
        s_idx, d_idx = np.asarray(src), np.asarray(dst)
        for i in self.k:
            self.k[i][d_idx, :, :n] = self.k[i][s_idx, :, :n]
            self.v[i][d_idx, :, :n] = self.v[i][s_idx, :, :n]
        for a in (*self.conv_state.values(), *self.ssm_state.values()):
            a[d_idx] = a[s_idx]
        self.pos[d_idx, :n] = self.pos[s_idx, :n]
        self.n_filled[d_idx] = self.n_filled[s_idx]

    def can_truncate(self, slot: int, n: int) -> str | None:
        """None if the slot can be cut back to its first n cells, else why not."""
        filled = int(self.n_filled[slot])
        if n == filled:
            return None
        if self.conv_state or self.ssm_state:
            return "this model carries recurrent state, which cannot be rewound cell by cell"
        for i, d in enumerate(self.decls):
            if d.kind == "kv" and d.window is not None:
                cap = self.k[i].shape[2]
                # the cells a query at the new end still sees must still be in the ring
                if n - (d.window - 1) < filled - cap:
                    return (
                        f"the sliding-window cache of {cap} cells no longer holds the cells needed to "
                        f"continue from {n} tokens"
                    )
        return None

    def truncate(self, slot: int, n: int) -> None:
        self._check_slot(slot)
        if slot in self._pending:
            raise SessionError("cannot truncate the state while a pass is in progress")
        filled = int(self.n_filled[slot])
        if not 0 <= n <= filled:
            raise SessionError(f"cannot truncate to {n} cells: the sequence holds {filled}")
        if n == 0:
            self.clear(slot)
            return
        why = self.can_truncate(slot, n)
        if why:
            raise StateNotRewindable(f"{why}; restore a snapshot taken at the point to return to instead")
        self.pos[slot, n:filled] = -1
        self.n_filled[slot] = n

    def snapshot(self, slot: int) -> SlotSnapshot:
        self._check_slot(slot)
        if slot in self._pending:
            raise SessionError("cannot snapshot the state while a pass is in progress")
        n = int(self.n_filled[slot])
        items = []
        for i, d in enumerate(self.decls):
            if d.kind == "kv":
                cap = self.k[i].shape[2]
                cells = np.arange(max(0, n - cap), n) % cap
                items.append((self.k[i][slot][:, cells].copy(), self.v[i][slot][:, cells].copy()))
            elif d.kind == "conv":
                items.append(self.conv_state[i][slot].copy())
            elif d.kind == "ssm":
                items.append(self.ssm_state[i][slot].copy())
            else:
                ln = int(self.cross_len[i][slot])
                items.append((self.cross_k[i][slot, :ln].copy(), self.cross_v[i][slot, :ln].copy()))
        return SlotSnapshot(
            owner=id(self),
            n_filled=n,
            positions=self.pos[slot, :n].copy(),
            kv=tuple(items),
            cross_len=tuple(int(a[slot]) for a in self.cross_len.values()),
            kv_type=self.kv_type,
        )

    def restore(self, slot: int, snap: SlotSnapshot) -> None:
        """Copy a snapshot back into a slot (arrays are written in place: kernels keep
        pointers to them). A snapshot of another state of the same spec is accepted."""
        self._check_slot(slot)
        if not isinstance(snap, SlotSnapshot) or len(snap.kv) != len(self.decls):
            raise SessionError("this snapshot was not taken from a state of this model")
        if slot in self._pending:
            raise SessionError("cannot restore the state while a pass is in progress")
        if snap.kv_type != self.kv_type and any(d.kind == "kv" for d in self.decls):
            raise SessionError(
                f"the snapshot holds a {snap.kv_type} KV cache and this state keeps {self.kv_type}: restore it into a "
                f"state (a session) of kv_type {snap.kv_type!r}"
            )
        n = snap.n_filled
        if n > self.n_ctx:
            raise ContextFull(f"the snapshot holds {n} cells; this state has room for {self.n_ctx}")
        self.pos[slot] = -1
        self.pos[slot, :n] = snap.positions
        for i, d in enumerate(self.decls):
            item = snap.kv[i]
            if d.kind == "kv":
                cap = self.k[i].shape[2]
                k, v = item
                if k.shape[1] > cap or k.shape[0] != d.n_kv_heads:
                    raise SessionError("the snapshot's cache does not fit this state")
                cells = np.arange(n - k.shape[1], n) % cap
                self.k[i][slot][:, cells] = k
                self.v[i][slot][:, cells] = v
            elif d.kind == "conv":
                self.conv_state[i][slot] = item
            elif d.kind == "ssm":
                self.ssm_state[i][slot] = item
            else:
                k, v = item
                self.cross_k[i][slot, : len(k)] = k
                self.cross_v[i][slot, : len(v)] = v
                self.cross_len[i][slot] = len(k)
        self.n_filled[slot] = n
        self._poisoned.discard(slot)

    def shift(self, slot: int, keep: int, n_discard: int) -> None:
        """Drop cells [keep, keep + n_discard) and move the later ones down, their positions
        lowered by n_discard and their keys rotated back by as much (llama.cpp's context
        shift). Recurrent state cannot forget a span: that is StateNotRewindable."""
        self._check_slot(slot)
        filled = int(self.n_filled[slot])
        if n_discard <= 0 or keep < 0 or keep + n_discard > filled:
            raise SessionError(f"cannot shift out cells [{keep}, {keep + n_discard}) of {filled}")
        if self.conv_state or self.ssm_state:
            raise StateNotRewindable("recurrent state cannot forget part of the context; start a new sequence instead")
        moved = filled - keep - n_discard
        for i, d in enumerate(self.decls):
            if d.kind != "kv":
                continue
            cap = self.k[i].shape[2]
            if cap < self.n_ctx:
                raise StateNotRewindable("a context shift of a sliding-window cache is not supported; start a new sequence")
            k, v = self.k[i][slot], self.v[i][slot]
            src = slice(keep + n_discard, filled)
            dst = slice(keep, keep + moved)
            kk = _decode(k[:, src], self.kv_type, True)
            if d.rope is not None and moved:
                # rotate by -n_discard: RoPE composes additively in the position
                delta = np.full(moved, -n_discard, np.int64)
                kk = rotate(np.swapaxes(kk, 0, 1), delta, d.rope, unit=True).swapaxes(0, 1)
            k[:, dst] = _encode(kk, self.kv_type, k.dtype, True)
            v[:, dst] = v[:, src]
        p = self.pos[slot]
        p[keep : keep + moved] = p[keep + n_discard : filled] - n_discard
        p[keep + moved : filled] = -1
        self.n_filled[slot] = keep + moved

    def nbytes(self) -> int:
        arrays = [self.pos, *self.k.values(), *self.v.values(), *self.conv_state.values(), *self.ssm_state.values()]
        arrays += [*self.cross_k.values(), *self.cross_v.values()]
        return sum(a.nbytes for a in arrays)


def _index(ref) -> int:
    return ref.index if isinstance(ref, StateRef) else int(ref)


MAX_N_CTX = 2**31 - 1


def memory_ceiling() -> int | None:
    """The most memory this process could ever have: physical memory plus swap, or the
    cgroup's limit when lower; None where it cannot be told."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("SwapTotal:"):
                    total += int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass
    return total if total > 0 else None


def convert_snapshot(snap: SlotSnapshot, spec: StateSpec, kv_type: str) -> SlotSnapshot:
    """``snap`` with its attention caches turned into ``kv_type`` rows (decoded, then encoded
    as a pass would store them: a lossy step into a compressed type), for a state of the
    same spec keeping that type; the rest as it is."""
    if kv_type not in KV_TYPES:
        raise UnsupportedOperation(f"KV cache type {kv_type!r} does not exist; use one of {', '.join(KV_TYPE_NAMES)}")
    decls = list(spec)
    if len(decls) != len(snap.kv):
        raise SessionError("this snapshot was not taken from a state of this spec")
    items = []
    dtype = KV_TYPES[kv_type]
    for d, item in zip(decls, snap.kv, strict=True):
        if d.kind == "kv" and snap.kv_type != kv_type:
            why = check_dim(kv_type, d.k_dim) or check_dim(kv_type, d.v_dim)
            if why:
                raise UnsupportedOperation(f"{why}; this model's are {d.k_dim} (keys) and {d.v_dim} (values)")
            k, v = item
            item = (_encode(_decode(k, snap.kv_type, True), kv_type, dtype, True),
                    _encode(_decode(v, snap.kv_type, False), kv_type, dtype, False))  # fmt: skip
        items.append(item)
    return attrs.evolve(snap, kv=tuple(items), kv_type=kv_type)


def kv_cell_bytes(spec: StateSpec, kv_type: str) -> int:
    """Bytes one token takes in the attention caches of every layer, in ``kv_type``."""
    return sum(
        d.n_kv_heads * (row_bytes(kv_type, d.k_dim, True) + row_bytes(kv_type, d.v_dim, False))
        for d in spec if d.kind == "kv"
    )  # fmt: skip


def estimate_bytes(spec: StateSpec, n_ctx: int, n_slots: int = 1, kv_type: str = "f16", n_batch: int = 512) -> int:
    """Bytes a HostState of this spec would take (for admission's memory estimate)."""
    total = n_slots * n_ctx * 4
    for d in spec:
        if d.kind == "kv":
            cap = ring_cells(d, n_ctx, min(n_batch, n_ctx))
            total += n_slots * cap * d.n_kv_heads * (row_bytes(kv_type, d.k_dim, True) + row_bytes(kv_type, d.v_dim, False))
        elif d.kind == "conv":
            total += n_slots * (d.kernel - 1) * d.channels * 4
        elif d.kind == "ssm":
            total += n_slots * d.n_heads * d.head_dim * d.state_dim * 4
        elif d.kind == "cross":
            total += n_slots * d.max_len * d.n_kv_heads * (d.k_dim + d.v_dim) * 4
    return total
