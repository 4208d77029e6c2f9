"""The Vulkan backend's state: a family's declared state in device buffers.

`VulkanState` holds the device buffers: each layer's KV cache ([slot, kv head, cell,
dim], f16 or f32; or [slot, kv head, cell, row bytes] of q8_0 or q4_0 blocks or
TurboQuant rows, the CPU backend's rows byte for byte, `wgsl.kv_quant`, `wgsl.kv_tq`)
with the cells' positions beside it (and for TurboQuant the per-head offsets its keys are
kept less, ``key_offsets``), a short convolution's carried
inputs and an SSM's state, and the cross-attention memories ([slot, row, kv head, dim],
f32), every one a `DeviceKV`. What the host knows of the sequences (filled cells,
positions, the passes in progress, the rows each memory holds) is kept by a
`cera.state.HostState` of the same spec, ``cells``, whose rules (begin, commit,
rollback, truncate, snapshot, restore, shift) are the ones every backend's state
follows; its own arrays are a staging area, touched only while a slot is copied through
them (`snapshot`, `restore`, `shift`) and fresh after each copy, so they cost no memory
otherwise. `copy_cells` copies slots on the device.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from cera.errors import ResourceExhausted, SessionError, UnsupportedOperation
from cera.kv_types import TURBOQUANT_BITS, kv_dtype
from cera.state import HostState, check_key_offsets, kv_row_shape, ring_cells

from . import device as gpu
from .capabilities import KV_TYPES


class DeviceKV:
    """One store on the device: its shape (as HostState's numpy array has it: [slots,
    ...]), dtype and buffer."""

    def __init__(self, ctx, shape: tuple[int, ...], dtype, label: str):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = math.prod(self.shape) * self.dtype.itemsize
        self.buffer = ctx.buffer(self.nbytes, label=label)
        self.slot_bytes = self.nbytes // self.shape[0]


_state_ids = itertools.count(1)

# the per-slot stores besides the KV caches: recurrent state and cross-attention memories
RECURRENT_STORES = ("conv_state", "ssm_state")
SLOT_STORES = (*RECURRENT_STORES, "cross_k", "cross_v")


class VulkanState:
    """A `StateSpec`'s storage on the device for ``n_slots`` sequences of up to ``n_ctx``
    cells (module docstring). ``k``/``v``, ``conv_state``/``ssm_state`` and
    ``cross_k``/``cross_v`` map declarations to `DeviceKV`; ``pos_buffer`` holds the
    cells' positions; ``n_filled``, ``pos`` and ``cross_len`` are the host's record
    (``cells``'), which every run that reads a memory writes into its inputs."""

    def __init__(self, ctx, spec, n_ctx, n_slots=1, kv_type="f16", n_batch=512, swa_full=False, key_offsets=None):
        if kv_type not in KV_TYPES:
            names = f"{', '.join(KV_TYPES[:-1])} or {KV_TYPES[-1]}"
            raise UnsupportedOperation(f"backend 'vulkan' keeps KV caches in {names}, not {kv_type!r}")
        if key_offsets is not None and kv_type not in TURBOQUANT_BITS:
            raise UnsupportedOperation(
                f"key offsets are for TurboQuant caches (tq3, tq2), not a {kv_type} cache: pass key_offsets=None"
            )
        self.ctx = ctx
        self.uid = next(_state_ids)
        self.cells = cells = HostState(spec, n_ctx, n_slots=n_slots, kv_type=kv_type, n_batch=n_batch,
                                       swa_full=swa_full)  # fmt: skip
        self.spec, self.decls = cells.spec, cells.decls
        self.n_ctx, self.n_slots, self.n_batch = cells.n_ctx, cells.n_slots, cells.n_batch
        self.kv_type, self.swa_full = cells.kv_type, cells.swa_full
        # the host's record, shared with cells (the same arrays: written in place)
        self.n_filled, self.pos, self.cross_len = cells.n_filled, cells.pos, cells.cross_len
        self.k: dict[int, DeviceKV] = {}
        self.v: dict[int, DeviceKV] = {}
        self.conv_state: dict[int, DeviceKV] = {}
        self.ssm_state: dict[int, DeviceKV] = {}
        self.cross_k: dict[int, DeviceKV] = {}
        self.cross_v: dict[int, DeviceKV] = {}
        self._allocate(n_slots)
        self.key_offsets = self._check_offsets(key_offsets)
        # the host copy keeps the same offsets: its restore converts rows kept less other
        # offsets, and its shift adds them back before turning a key
        cells.key_offsets = check_key_offsets(spec, kv_type, self.key_offsets)
        # each attention layer's offsets on the device (the store kernel's binding 5), f32
        # [kv head, k_dim], zeros where there are none: TurboQuant caches only
        self.koff = {}
        if kv_type in TURBOQUANT_BITS:
            for i in self.k:
                d = self.decls[i]
                m = cells.key_offset(i)
                self.koff[i] = ctx.buffer(d.n_kv_heads * d.k_dim * 4, label=f"key offsets {i}")
                ctx.queue.write_buffer(self.koff[i], 0, m)
        try:
            self.pos_buffer = ctx.buffer(self.pos.nbytes, label="cell positions")
        except gpu.BufferTooLarge as e:
            raise ResourceExhausted(
                f"backend 'vulkan': the cell positions need {e.size} bytes, more than one buffer may hold"
            ) from None
        ctx.queue.write_buffer(self.pos_buffer, 0, self.pos)

    # -- key offsets -----------------------------------------------------------------------------

    def _check_offsets(self, key_offsets):
        """``key_offsets`` (None, or {decl index: float32 [kv heads, k_dim]}) checked and
        kept as read-only float32 copies."""
        if key_offsets is None:
            return None
        if not isinstance(key_offsets, dict):
            raise UnsupportedOperation(
                f"key_offsets is a dict of attention declaration index to an array, not {type(key_offsets).__name__}"
            )
        out = {}
        for i, m in key_offsets.items():
            if not isinstance(i, (int, np.integer)) or int(i) not in self.k:
                raise UnsupportedOperation(
                    f"key_offsets names declaration {i!r}, which is not an attention cache of this state "
                    f"(those are {sorted(self.k)})"
                )
            d = self.decls[int(i)]
            arr = np.array(m, np.float32)
            if arr.shape != (d.n_kv_heads, d.k_dim):
                raise UnsupportedOperation(
                    f"key_offsets[{i}] has shape {arr.shape}; declaration {i} needs (kv heads, k_dim) = "
                    f"{(d.n_kv_heads, d.k_dim)}"
                )
            if not np.all(np.isfinite(arr)):
                raise UnsupportedOperation(f"key_offsets[{i}] holds values that are not finite")
            arr.flags.writeable = False
            out[int(i)] = arr
        return out

    # -- device storage --------------------------------------------------------------------------

    def _allocate(self, n_slots: int) -> None:
        dtype = kv_dtype(self.kv_type)
        for i, d in enumerate(self.decls):
            if d.kind in ("conv", "ssm"):
                self._allocate_recurrent(i, d, n_slots)
                continue
            if d.kind == "cross":
                self._allocate_cross(i, d, n_slots)
                continue
            if d.kind != "kv":
                raise UnsupportedOperation(
                    f"backend 'vulkan' has no device storage for {d.kind!r} state yet (layer state {i})"
                )
            cap = ring_cells(d, self.n_ctx, self.n_batch, self.swa_full)
            if d.k_dim % 2 or d.v_dim % 2:
                raise UnsupportedOperation(f"backend 'vulkan' needs even head dimensions, not {d.k_dim}/{d.v_dim}")
            rows = (kv_row_shape(self.kv_type, d.k_dim, True), kv_row_shape(self.kv_type, d.v_dim, False))
            try:
                self.k[i] = DeviceKV(self.ctx, (n_slots, d.n_kv_heads, cap, rows[0]), dtype, f"k{i}")
                self.v[i] = DeviceKV(self.ctx, (n_slots, d.n_kv_heads, cap, rows[1]), dtype, f"v{i}")
            except gpu.BufferTooLarge as e:
                raise ResourceExhausted(
                    f"backend 'vulkan': a KV cache of {n_slots} x {self.n_ctx} cells needs a {e.size}-byte buffer, "
                    f"more than the adapter's {e.limit}; use a smaller context or fewer sequences"
                ) from None
            for kv in (self.k[i], self.v[i]):
                if kv.nbytes > self.ctx.max_binding:
                    raise ResourceExhausted(
                        f"backend 'vulkan': a KV cache of {kv.nbytes} bytes is larger than one binding may be "
                        f"({self.ctx.max_binding}); use a smaller context or fewer sequences"
                    )

    def _slot_store(self, shape: tuple, label: str, what: str) -> DeviceKV:
        """A zeroed f32 device store of ``shape`` ([slot, ...]) that one binding holds,
        else ResourceExhausted naming ``what`` and the way out."""
        n_slots = shape[0]
        try:
            a = DeviceKV(self.ctx, shape, np.float32, label)
        except gpu.BufferTooLarge as e:
            raise ResourceExhausted(
                f"backend 'vulkan': {what} of {n_slots} sequences take a {e.size}-byte buffer, more than the "
                f"adapter's {e.limit}; use fewer sequences"
            ) from None
        if a.nbytes > self.ctx.max_binding:
            raise ResourceExhausted(
                f"backend 'vulkan': {what} take {a.nbytes} bytes, more than one binding may hold "
                f"({self.ctx.max_binding}); use fewer sequences"
            )
        return a

    def _allocate_recurrent(self, i: int, d, n_slots: int) -> None:
        """A short convolution's carried inputs ([slot, kernel - 1, channels]) or an SSM's
        state ([slot, heads, head_dim, state_dim]), f32 on the device and zeroed (a fresh
        buffer is), as HostState's arrays would be."""
        if d.kind == "conv":
            shape, store, what = (n_slots, d.kernel - 1, d.channels), self.conv_state, "conv"
        else:
            shape, store, what = (n_slots, d.n_heads, d.head_dim, d.state_dim), self.ssm_state, "ssm"
        store[i] = self._slot_store(shape, f"{what}{i}", f"the {what} state")

    def _allocate_cross(self, i: int, d, n_slots: int) -> None:
        """A cross-attention memory: keys and values of up to ``max_len`` rows per slot
        ([slot, row, kv head, dim], f32 as HostState's); the rows each slot holds are the
        host's record (``cross_len``)."""
        if d.k_dim % 2 or d.v_dim % 2:
            raise UnsupportedOperation(f"backend 'vulkan' needs even head dimensions, not {d.k_dim}/{d.v_dim}")
        for store, dim, what in ((self.cross_k, d.k_dim, "keys"), (self.cross_v, d.v_dim, "values")):
            shape = (n_slots, d.max_len, d.n_kv_heads, dim)
            store[i] = self._slot_store(shape, f"cross {what} {i}", f"the cross-attention {what}")

    def _slot_items(self, names=SLOT_STORES):
        """(store name, index, DeviceKV) of every store of these (SLOT_STORES: all)."""
        return [(name, i, a) for name in names for i, a in getattr(self, name).items()]

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.n_slots:
            raise SessionError(f"slot {slot} does not exist: the state has {self.n_slots}")

    # -- the host's record: cells' rules ---------------------------------------------------------

    def acquire(self) -> int:
        slot = self.cells.acquire()
        self._zero_recurrent(slot)
        return slot

    def release(self, slot: int) -> None:
        self.cells.release(slot)

    def clear(self, slot: int) -> None:
        self.cells.clear(slot)
        self._zero_recurrent(slot)

    def begin(self, slot: int, positions) -> int:
        return self.cells.begin(slot, positions)

    def commit(self, slot: int) -> None:
        self.cells.commit(slot)

    def rollback(self, slot: int) -> None:
        self.cells.rollback(slot)

    def positions(self, slot: int) -> np.ndarray:
        return self.cells.positions(slot)

    def can_truncate(self, slot: int, n: int) -> str | None:
        return self.cells.can_truncate(slot, n)

    def truncate(self, slot: int, n: int) -> None:
        self.cells.truncate(slot, n)
        if n == 0:  # truncating to nothing clears the slot
            self._zero_recurrent(slot)

    def _zero_recurrent(self, slot: int) -> None:
        """The slot's recurrent state zeroed on the device, as `HostState.clear` zeroes
        its arrays."""
        with self.ctx.lock:
            for _name, _i, a in self._slot_items(RECURRENT_STORES):
                self.ctx.queue.write_buffer(a.buffer, slot * a.slot_bytes, np.zeros(a.slot_bytes // 4, np.float32))

    # -- one slot through the host ---------------------------------------------------------------

    def _read(self, buffer, offset: int, size: int) -> bytes:
        """``size`` bytes of ``buffer`` from ``offset``: the device copies whole words, so a
        quantized cache's slot (34 or 18 bytes a block) is read through the words around it."""
        lo, hi = offset // 4 * 4, -(-(offset + size) // 4) * 4
        raw = bytes(self.ctx.queue.read_buffer(buffer, lo, hi - lo))
        return raw[offset - lo : offset - lo + size]

    def _write(self, buffer, offset: int, data: np.ndarray) -> None:
        """``data`` into ``buffer`` at ``offset``; where the span is not whole words, the
        words it shares with its neighbours keep their other bytes."""
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        lo, hi = offset // 4 * 4, -(-(offset + raw.size) // 4) * 4
        if lo != offset or hi != offset + raw.size:
            words = np.frombuffer(self._read(buffer, lo, hi - lo), np.uint8).copy()
            words[offset - lo : offset - lo + raw.size] = raw
            raw = words
        self.ctx.queue.write_buffer(buffer, lo, raw)

    def _load(self, slot: int) -> None:
        """The slot's stores into cells' arrays."""
        host = self.cells
        for i, kv in self.k.items():
            for arrays, dkv in ((host.k, kv), (host.v, self.v[i])):
                raw = self._read(dkv.buffer, slot * dkv.slot_bytes, dkv.slot_bytes)
                arrays[i][slot] = np.frombuffer(raw, dkv.dtype).reshape(dkv.shape[1:])
        for name, i, a in self._slot_items():
            raw = self.ctx.queue.read_buffer(a.buffer, slot * a.slot_bytes, a.slot_bytes)
            getattr(host, name)[i][slot] = np.frombuffer(bytes(raw), a.dtype).reshape(a.shape[1:])

    def _store(self, slot: int) -> None:
        """cells' arrays and positions of the slot onto the device."""
        host, queue = self.cells, self.ctx.queue
        for name, i, a in self._slot_items():
            queue.write_buffer(
                a.buffer, slot * a.slot_bytes, np.ascontiguousarray(getattr(host, name)[i][slot], a.dtype)
            )
        for i in self.k:
            for dkv, arr in ((self.k[i], host.k[i][slot]), (self.v[i], host.v[i][slot])):
                self._write(dkv.buffer, slot * dkv.slot_bytes, np.ascontiguousarray(arr, dkv.dtype))
        row = self.pos[slot]
        queue.write_buffer(self.pos_buffer, slot * row.nbytes, np.ascontiguousarray(row))

    def _fresh(self) -> None:
        """cells' staging arrays replaced by fresh zeroed ones (never touched, so they cost
        no memory: no copy of a slot stays on the host)."""
        host = self.cells
        for name in ("k", "v", *SLOT_STORES):
            arrays = getattr(host, name)
            for i, a in arrays.items():
                arrays[i] = np.zeros(a.shape, a.dtype)

    def _through_host(self, slot: int, fn, load: bool, store: bool):
        self._check_slot(slot)
        with self.ctx.lock:
            try:
                if load:
                    self._load(slot)
                result = fn()
                if store:
                    self._store(slot)
                return result
            finally:
                self._fresh()

    def snapshot(self, slot: int):
        return self._through_host(slot, lambda: self.cells.snapshot(slot), load=True, store=False)

    def restore(self, slot: int, snap) -> None:
        self._through_host(slot, lambda: self.cells.restore(slot, snap), load=False, store=True)

    def shift(self, slot: int, keep: int, n_discard: int) -> None:
        self._through_host(slot, lambda: self.cells.shift(slot, keep, n_discard), load=True, store=True)

    # -- on the device ------------------------------------------------------------------------------

    def copy_cells(self, src, dst) -> None:
        """HostState.copy_cells on the device: each slot's caches, recurrent state and
        cell positions go through a scratch buffer (in one command buffer, so a permutation
        of slots works), whole slots (the device copies ranges, not cells); the host's
        positions and filled cells follow. Cross-attention memories stay."""
        src, dst = [int(s) for s in src], [int(d) for d in dst]
        if src == dst:
            return
        for s in (*src, *dst):
            self._check_slot(s)
        stores = [*self.k.values(), *self.v.values(), *(a for _name, _i, a in self._slot_items(RECURRENT_STORES))]
        spans = [(a.buffer, a.slot_bytes) for a in stores] + [(self.pos_buffer, self.pos[0].nbytes)]
        # slots that are not whole words (a quantized cache's odd block counts) through the
        # host: the device copies whole words only
        odd = [(buf, size) for buf, size in spans if size % 4]
        spans = [(buf, size) for buf, size in spans if size % 4 == 0]
        with self.ctx.lock:
            held = [[self._read(buf, s * size, size) for s in src] for buf, size in odd]
            for (buf, size), rows in zip(odd, held, strict=True):
                for d, row in zip(dst, rows, strict=True):
                    self._write(buf, d * size, np.frombuffer(row, np.uint8))
            scratch = self.ctx.buffer(sum(size for _buf, size in spans) * len(src), label="slot copies")
            enc = self.ctx.device.create_command_encoder()
            at = 0
            for buf, size in spans:
                for j, s in enumerate(src):
                    enc.copy_buffer_to_buffer(buf, s * size, scratch, at + j * size, size)
                for j, d in enumerate(dst):
                    enc.copy_buffer_to_buffer(scratch, at + j * size, buf, d * size, size)
                at += size * len(src)
            self.ctx.queue.submit([enc.finish()])
            s_idx, d_idx = np.asarray(src), np.asarray(dst)
            self.pos[d_idx] = self.pos[s_idx]  # whole rows, as the device's
            self.n_filled[d_idx] = self.n_filled[s_idx]

    def nbytes(self) -> int:
        stores = [a for _name, _i, a in self._slot_items()]
        total = self.pos.nbytes * 2 + sum(kv.nbytes for kv in [*self.k.values(), *self.v.values(), *stores])
        return total + sum(int(b.size) for b in self.koff.values())


__all__ = ["DeviceKV", "VulkanState"]
