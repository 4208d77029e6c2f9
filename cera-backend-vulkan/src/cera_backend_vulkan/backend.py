"""The Vulkan backend: `cera.backend.Backend` on a GPU through wgpu (Vulkan, Metal, DX12).

- Weights are uploaded once, in their GGUF block layout (no dequantized copies); the WGSL
  kernels decode the blocks as they read them (wgsl/blocks.py).
- The state (`VulkanState`) keeps each layer's KV cache on the device ([slot, kv head,
  cell, dim], f16 or f32) with the cells' positions, and the recurrent state and
  cross-attention memories ([slot, row, kv head, dim], f32) too; the host keeps the
  bookkeeping (filled cells, positions, the rows each memory holds) that
  `cera.state.HostState` defines, so sessions, the scheduler, checkpoints and the prefix
  cache use it unchanged. Snapshots, restores and context shifts copy one slot between
  the device and the host; `copy_cells` copies slots on the device.
- `compile` lowers a graph to a fixed list of dispatches with their parameters and bind
  groups made once (compile.py); a run writes the per-run inputs once, records every
  dispatch into one compute pass, submits once and reads back only the declared outputs
  (a greedy step: one int32 per sequence).

Choosing things: ``VulkanBackend(device_index=0)`` or ``VulkanOptions``; adapters are
ordered discrete GPU first, software ones (lavapipe) last. Under ``--device auto`` a
software adapter is passed over (the CPU backend is faster there); ``--device vulkan``
uses it.
"""

from __future__ import annotations

import itertools
import math

import attrs
import numpy as np

from cera.backend import Backend, BackendOptions, DeviceInfo, Weight
from cera.errors import (
    BackendUnavailable,
    ModelConfigError,
    ResourceExhausted,
    UnsupportedOperation,
    UnsupportedTensorType,
)
from cera.state import HostState, kv_row_shape

from . import device as gpu
from .capabilities import KV_TYPES, OPS, TENSOR_TYPES
from .tuning import VulkanTuning
from .wgsl import BLOCKS


@attrs.frozen
class VulkanOptions(BackendOptions):
    """``device_index``: which adapter (0: the best one, discrete GPUs first);
    ``profile``: time every kernel with timestamp queries (`VulkanExecutable.profile`)."""

    profile: bool = False


class VulkanWeight(Weight):
    """A weight on the device: its GGUF bytes in one buffer (padded to 4 bytes), and the
    host copy of small ones that kernels take as constants (norm weights, biases)."""

    def __init__(self, name: str, ggml_type: str, shape: tuple[int, ...], data: np.ndarray, buffer, nbytes: int):
        self.name = name
        self.ggml_type = ggml_type
        self.shape = tuple(int(d) for d in shape)
        self.buffer = buffer
        self.nbytes = nbytes
        block, size = BLOCKS[ggml_type]
        self.row_bytes = self.shape[0] // block * size
        self._data = data  # a view of the memory-mapped file: costs nothing
        self._dense: np.ndarray | None = None

    @property
    def n_rows(self) -> int:
        return math.prod(self.shape[1:]) if len(self.shape) > 1 else 1

    def dense(self) -> np.ndarray:
        """float32 values in numpy shape: for small operand tensors only."""
        if self._dense is None:
            from gguf.constants import GGMLQuantizationType
            from gguf.quants import dequantize

            if self.ggml_type == "F32":
                d = np.frombuffer(self._data.tobytes(), np.float32)
            else:
                d = dequantize(np.asarray(self._data).reshape(-1), GGMLQuantizationType[self.ggml_type])
            self._dense = np.asarray(d, np.float32).reshape(tuple(reversed(self.shape)))
        return self._dense

    def __repr__(self) -> str:
        return f"VulkanWeight({self.name!r}, {self.ggml_type}, shape={self.shape})"


class DeviceKV:
    """What the host knows of one layer's cache on the device: its shape (as HostState's
    numpy array would have it: [slots, kv heads, cells, row]), dtype and buffer."""

    def __init__(self, ctx, shape: tuple[int, ...], dtype, label: str):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = math.prod(self.shape) * self.dtype.itemsize
        self.buffer = ctx.buffer(self.nbytes, label=label)
        self.slot_bytes = self.nbytes // self.shape[0]


class _SlotArrays:
    """One slot's cache as host arrays, indexable like HostState's (``a[slot]``, or
    ``a[slot, rows]`` as a cross-attention memory is), so the host's
    snapshot/restore/shift code runs unchanged on a copy of that slot."""

    def __init__(self, shape, arrays: dict):
        self.shape = shape
        self._arrays = arrays

    def __getitem__(self, key):
        if isinstance(key, tuple):
            return self._arrays[key[0]][key[1:]]
        return self._arrays[key]

    def __setitem__(self, key, value):  # HostState.restore assigns recurrent state whole, memories by rows
        if isinstance(key, tuple):
            self._arrays[key[0]][key[1:]] = value
        else:
            self._arrays[key][...] = value


_state_ids = itertools.count(1)


class VulkanState(HostState):
    """`HostState` whose KV caches and cell positions live on the device (see the module
    docstring). ``k``/``v`` map declarations to `DeviceKV` (shapes, for the runtime's
    geometry and checkpoints), as do ``conv_state``/``ssm_state`` and
    ``cross_k``/``cross_v``; the cell positions are mirrored in ``pos_buffer``; the rows
    each cross-attention memory holds (``cross_len``) stay on the host, which writes them
    into every run that reads a memory."""

    def __init__(self, ctx, spec, n_ctx, n_slots=1, kv_type="f16", n_batch=512, swa_full=False):
        if kv_type not in KV_TYPES:
            raise UnsupportedOperation(
                f"backend 'vulkan' keeps KV caches in {' or '.join(KV_TYPES)}, not {kv_type!r}; use --kv-type f16"
            )
        self.ctx = ctx
        self.uid = next(_state_ids)
        super().__init__(spec, n_ctx, n_slots=n_slots, kv_type=kv_type, n_batch=n_batch, swa_full=swa_full)
        try:
            self.pos_buffer = ctx.buffer(self.pos.nbytes, label="cell positions")
        except gpu.BufferTooLarge as e:
            raise ResourceExhausted(
                f"backend 'vulkan': the cell positions need {e.size} bytes, more than one buffer may hold"
            ) from None
        ctx.queue.write_buffer(self.pos_buffer, 0, self.pos)

    def _allocate(self, n_slots, dtype) -> None:
        from cera.state import ring_cells

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
            rows = (kv_row_shape(self.kv_type, d.k_dim), kv_row_shape(self.kv_type, d.v_dim))
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
        ([slot, row, kv head, dim], f32 as HostState's), and the host's record of the rows
        each slot holds (none yet)."""
        if d.k_dim % 2 or d.v_dim % 2:
            raise UnsupportedOperation(f"backend 'vulkan' needs even head dimensions, not {d.k_dim}/{d.v_dim}")
        for store, dim, what in ((self.cross_k, d.k_dim, "keys"), (self.cross_v, d.v_dim, "values")):
            shape = (n_slots, d.max_len, d.n_kv_heads, dim)
            store[i] = self._slot_store(shape, f"cross {what} {i}", f"the cross-attention {what}")
        self.cross_len[i] = np.zeros(n_slots, np.int64)

    # the per-slot stores besides the KV caches: recurrent state and cross-attention memories
    RECURRENT_STORES = ("conv_state", "ssm_state")
    SLOT_STORES = (*RECURRENT_STORES, "cross_k", "cross_v")

    def _slot_items(self, names=SLOT_STORES):
        """(store name, index, DeviceKV) of every store of these (SLOT_STORES: all)."""
        return [(name, i, a) for name in names for i, a in getattr(self, name).items()]

    def clear(self, slot: int) -> None:
        # HostState.clear zeroes the recurrent state's host arrays; here they are on the
        # device: zero the slot there, and let HostState clear the rest
        dev = self.conv_state, self.ssm_state
        self.conv_state, self.ssm_state = {}, {}
        try:
            HostState.clear(self, slot)
        finally:
            self.conv_state, self.ssm_state = dev
        with self.ctx.lock:
            for _name, _i, a in self._slot_items(self.RECURRENT_STORES):
                self.ctx.queue.write_buffer(a.buffer, slot * a.slot_bytes, np.zeros(a.slot_bytes // 4, np.float32))

    # -- moving one slot between device and host ---------------------------------------------

    def _read_slot(self, slot: int) -> tuple[dict, dict]:
        ks, vs = {}, {}
        for i, kv in self.k.items():
            for store, dkv in ((ks, kv), (vs, self.v[i])):
                raw = self.ctx.queue.read_buffer(dkv.buffer, slot * dkv.slot_bytes, dkv.slot_bytes)
                store[i] = np.frombuffer(bytes(raw), dkv.dtype).reshape(dkv.shape[1:]).copy()
        for name, i, a in self._slot_items():
            raw = self.ctx.queue.read_buffer(a.buffer, slot * a.slot_bytes, a.slot_bytes)
            ks[(name, i)] = np.frombuffer(bytes(raw), a.dtype).reshape(a.shape[1:]).copy()
        return ks, vs

    def _write_slot(self, slot: int, ks: dict, vs: dict) -> None:
        for name, i, a in self._slot_items():
            self.ctx.queue.write_buffer(a.buffer, slot * a.slot_bytes, np.ascontiguousarray(ks[(name, i)], a.dtype))
        for i in self.k:
            for dkv, arr in ((self.k[i], ks[i]), (self.v[i], vs[i])):
                self.ctx.queue.write_buffer(dkv.buffer, slot * dkv.slot_bytes, np.ascontiguousarray(arr, dkv.dtype))
        row = self.pos[slot]
        self.ctx.queue.write_buffer(self.pos_buffer, slot * row.nbytes, np.ascontiguousarray(row))

    def _on_host(self, slot: int, fn, write: bool, read: bool = True):
        """Run a HostState method on host copies of ``slot``'s caches (written back after
        when ``write``)."""
        with self.ctx.lock:
            if read:
                ks, vs = self._read_slot(slot)
            else:
                ks = {i: np.zeros(kv.shape[1:], kv.dtype) for i, kv in self.k.items()}
                vs = {i: np.zeros(kv.shape[1:], kv.dtype) for i, kv in self.v.items()}
                ks.update({(name, i): np.zeros(a.shape[1:], a.dtype) for name, i, a in self._slot_items()})
            dev_k, dev_v = self.k, self.v
            dev = {name: getattr(self, name) for name in self.SLOT_STORES}
            self.k = {i: _SlotArrays(dev_k[i].shape, {slot: ks[i]}) for i in dev_k}
            self.v = {i: _SlotArrays(dev_v[i].shape, {slot: vs[i]}) for i in dev_v}
            for name, stores in dev.items():
                setattr(self, name, {i: _SlotArrays(a.shape, {slot: ks[(name, i)]}) for i, a in stores.items()})
            try:
                result = fn()
            finally:
                self.k, self.v = dev_k, dev_v
                for name, stores in dev.items():
                    setattr(self, name, stores)
            if write:
                self._write_slot(slot, ks, vs)
            return result

    def snapshot(self, slot: int):
        return self._on_host(slot, lambda: HostState.snapshot(self, slot), write=False)

    def restore(self, slot: int, snap) -> None:
        self._on_host(slot, lambda: HostState.restore(self, slot, snap), write=True, read=False)

    def shift(self, slot: int, keep: int, n_discard: int) -> None:
        self._on_host(slot, lambda: HostState.shift(self, slot, keep, n_discard), write=True)

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
        stores = [*self.k.values(), *self.v.values(), *(a for _name, _i, a in self._slot_items(self.RECURRENT_STORES))]
        spans = [(a.buffer, a.slot_bytes) for a in stores] + [(self.pos_buffer, self.pos[0].nbytes)]
        with self.ctx.lock:
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
        return self.pos.nbytes * 2 + sum(kv.nbytes for kv in [*self.k.values(), *self.v.values(), *stores])


class VulkanBackend(Backend):
    """The Vulkan backend. See the module docstring."""

    name = "vulkan"
    tensor_types = frozenset(TENSOR_TYPES)
    ops = frozenset(OPS)
    options_type = VulkanOptions

    def __init__(self, device_index: int = 0, memory_limit: int | None = None, profile: bool = False):
        if not isinstance(device_index, int) or device_index < 0:
            raise BackendUnavailable(
                f"backend 'vulkan': device_index must be a non-negative integer, got {device_index!r}"
            )
        self.device_index = device_index
        self.memory_limit = memory_limit
        self.profile = bool(profile)
        # products of many rows: None chooses (tiled on GPUs, row kernels on software
        # adapters); True/False forces it (tests run the tiled kernel on lavapipe)
        self.tiled: bool | None = None
        # products of a few rows: one of tuning.ROW_KERNELS, over the tuning's; None
        # chooses (CERA_VULKAN_ROW_KERNEL, else by the adapter: "unit-auto" on GPUs,
        # "subgroup" on software adapters)
        self.row_kernel: str | None = None
        self._ctx = None
        found = gpu.adapters()
        if not found:
            raise BackendUnavailable(
                "backend 'vulkan': no GPU adapter found (no Vulkan driver? on Debian `apt-get install "
                "mesa-vulkan-drivers` gives a software one, lavapipe)"
            )
        if device_index >= len(found):
            raise BackendUnavailable(
                f"backend 'vulkan' has {len(found)} adapter(s); device_index {device_index} does not exist"
            )
        self.adapter = found[device_index]

    @property
    def ctx(self) -> gpu.GpuContext:
        """The device, opened on first use (probing does not open it)."""
        if self._ctx is None:
            self._ctx = gpu.context(self.device_index)
        return self._ctx

    # -- device --------------------------------------------------------------------------------

    def probe(self) -> DeviceInfo:
        lim = self.adapter.limits
        memory = int(lim["max-buffer-size"])
        # wgpu reports no memory size; the largest buffer bounds one tensor, not the total,
        # so report the memory limit the user gave, if any, else nothing
        memory = self.memory_limit
        feats = [f for f in gpu.WANTED_FEATURES if f in set(self.adapter.features)]
        checks = ", ".join(gpu.shader_checks()) or "none"
        desc = (
            f"{gpu.describe(self.adapter)}; features: {', '.join(feats) or 'none'}; "
            f"largest binding {int(lim['max-storage-buffer-binding-size']) >> 20} MiB; shader checks: {checks}"
        )
        return DeviceInfo(usable=True, device=desc, memory_bytes=memory, software=gpu.is_software(self.adapter))

    # -- weights and state --------------------------------------------------------------------

    def upload(self, gguf, name: str) -> VulkanWeight:
        try:
            info = gguf.tensors[name]
        except KeyError:
            raise ModelConfigError(f"{getattr(gguf, 'path', 'the model file')}: has no tensor {name!r}") from None
        type_name = info.type_name
        reason = self.cannot_serve(type_name)
        if reason:
            raise UnsupportedTensorType(name, type_name, self.name, reason)
        data = gguf.tensor_data(name)
        raw = np.asarray(data).reshape(-1).view(np.uint8)
        nbytes = raw.nbytes
        ctx = self.ctx
        try:
            buf = ctx.buffer(nbytes + 4, label=name)
        except gpu.BufferTooLarge as e:
            raise ResourceExhausted(
                f"backend 'vulkan': tensor {name!r} ({e.size} bytes) exceeds the adapter's largest buffer ({e.limit})"
            ) from None
        pad = (-nbytes) % 4
        ctx.queue.write_buffer(buf, 0, raw if not pad else np.concatenate([raw, np.zeros(pad, np.uint8)]))
        return VulkanWeight(name, type_name, tuple(info.shape), data, buf, nbytes)

    def new_state(self, spec, n_ctx, n_slots=1, kv_type="f16", n_batch=512, swa_full=False):
        return VulkanState(self.ctx, spec, n_ctx, n_slots=n_slots, kv_type=kv_type, n_batch=n_batch, swa_full=swa_full)

    # -- compiling -----------------------------------------------------------------------------

    def tuning(self) -> VulkanTuning:
        """The kernel variants a compile takes now: the ``CERA_VULKAN_*`` switches
        (`VulkanTuning.from_env`), with ``row_kernel`` where one is set on the backend."""
        t = VulkanTuning.from_env()
        if self.row_kernel is not None and self.row_kernel != t.row_kernel:
            t = attrs.evolve(t, row_kernel=self.row_kernel)
        return t

    def compile_key(self) -> tuple:
        # ``profile`` is read by each run: no recompiling
        return (self.device_index, self.tiled, self.tuning())

    def compile(self, graph, weights, state):
        from .compile import compile_graph

        self.check_ops(graph)
        bound = {}
        for name in graph.weights_used():
            w = weights.get(name)
            if w is None:
                raise ModelConfigError(f"the graph uses weight {name!r}, which was not uploaded")
            bound[name] = w
        if state is not None and not isinstance(state, VulkanState):
            raise UnsupportedOperation("backend 'vulkan' runs graphs on its own state (VulkanBackend.new_state)")
        return compile_graph(self, graph, bound, state, self.tuning())

    def close(self) -> None:
        pass
