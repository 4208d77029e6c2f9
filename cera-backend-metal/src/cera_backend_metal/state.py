"""The state of the Metal backend: `cera.state.HostState` whose caches are MLX arrays.

Each declaration's storage is one MLX array per slot (`SlotStore`): a layer's keys and
values ``[kv heads, cells, dim]`` (f16 or f32; q8_0 and q4_0: ``[kv heads, cells, row
bytes]`` of ggml's blocks, uint8, `kv_quant`), a short convolution's carried inputs
``[kernel - 1, channels]``, an SSM's state ``[heads, head_dim, state_dim]``, a
cross-attention memory ``[rows, kv heads, dim]`` (f32). A compiled step takes the arrays of
the slots its sequences use and returns their successors, which replace them (MLX reuses
the buffer of an array nobody else holds). The host keeps what `HostState` defines for
bookkeeping (filled cells, cell positions, the rows each memory holds), so sessions, the
scheduler, checkpoints and the prefix cache use it unchanged; snapshots, restores and
context shifts copy one slot between the device and the host and run HostState's code on
the copy.
"""

from __future__ import annotations

import math

import numpy as np

from cera.errors import UnsupportedOperation
from cera.kv_types import check_dim
from cera.state import HostState, kv_row_shape, ring_cells

from .capabilities import KV_TYPES


class SlotStore:
    """One declaration's arrays, one per slot; ``shape`` is HostState's [slot, ...]."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype):
        import mlx.core as mx

        self.shape = tuple(int(d) for d in shape)
        self.np_dtype = np.dtype(dtype)
        self.mx_dtype = {np.dtype(np.float16): mx.float16, np.dtype(np.float32): mx.float32,
                         np.dtype(np.uint8): mx.uint8}[self.np_dtype]  # fmt: skip
        self.arrays = [mx.zeros(self.shape[1:], self.mx_dtype) for _ in range(self.shape[0])]
        mx.eval(self.arrays)

    @property
    def dtype(self) -> np.dtype:
        """The host dtype, as a numpy array of the same shape has it (checkpoints check it)."""
        return self.np_dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.np_dtype.itemsize

    def host(self, slot: int) -> np.ndarray:
        return np.array(self.arrays[slot], copy=True)

    def put(self, slot: int, values: np.ndarray) -> None:
        import mlx.core as mx

        self.arrays[slot] = mx.array(np.ascontiguousarray(values, self.np_dtype))

    def zero(self, slot: int) -> None:
        import mlx.core as mx

        self.arrays[slot] = mx.zeros(self.shape[1:], self.mx_dtype)


class _OneSlot:
    """A host copy of one slot, indexable as HostState indexes its arrays (``a[slot]``,
    ``a[slot, rows]``), so HostState's snapshot/restore/shift run unchanged on it."""

    def __init__(self, shape, slot: int, values: np.ndarray):
        self.shape = shape
        self._slot = slot
        self.values = values

    def _check(self, slot):
        if int(slot) != self._slot:
            raise IndexError(f"only slot {self._slot} is on the host")

    def __getitem__(self, key):
        if isinstance(key, tuple):
            self._check(key[0])
            return self.values[key[1:]]
        self._check(key)
        return self.values

    def __setitem__(self, key, value):
        if isinstance(key, tuple):
            self._check(key[0])
            self.values[key[1:]] = value
        else:
            self._check(key)
            self.values[...] = value


class MetalState(HostState):
    """See the module docstring. ``k``/``v``/``conv_state``/``ssm_state``/``cross_k``/
    ``cross_v`` map declaration indices to `SlotStore`s."""

    STORES = ("k", "v", "conv_state", "ssm_state", "cross_k", "cross_v")

    def __init__(self, spec, n_ctx, n_slots=1, kv_type="f16", n_batch=512, swa_full=False):
        if kv_type not in KV_TYPES:
            names = f"{', '.join(KV_TYPES[:-1])} or {KV_TYPES[-1]}"
            raise UnsupportedOperation(
                f"backend 'metal' keeps KV caches in {names}, not {kv_type!r}; use --kv-type f16 (or q8_0, q4_0), "
                f"or --device cpu for a {kv_type} cache"
            )
        super().__init__(spec, n_ctx, n_slots=n_slots, kv_type=kv_type, n_batch=n_batch, swa_full=swa_full)

    def _allocate(self, n_slots, dtype) -> None:
        for i, d in enumerate(self.decls):
            if d.kind == "kv":
                cap = ring_cells(d, self.n_ctx, self.n_batch, self.swa_full)
                why = check_dim(self.kv_type, d.k_dim) or check_dim(self.kv_type, d.v_dim)
                if why:
                    raise UnsupportedOperation(
                        f"{why}; this model's are {d.k_dim} (keys) and {d.v_dim} (values): use kv_type f16 or f32"
                    )
                self.k[i] = SlotStore((n_slots, d.n_kv_heads, cap, kv_row_shape(self.kv_type, d.k_dim, True)), dtype)
                self.v[i] = SlotStore((n_slots, d.n_kv_heads, cap, kv_row_shape(self.kv_type, d.v_dim, False)), dtype)
            elif d.kind == "conv":
                self.conv_state[i] = SlotStore((n_slots, d.kernel - 1, d.channels), np.float32)
            elif d.kind == "ssm":
                self.ssm_state[i] = SlotStore((n_slots, d.n_heads, d.head_dim, d.state_dim), np.float32)
            elif d.kind == "cross":
                self.cross_k[i] = SlotStore((n_slots, d.max_len, d.n_kv_heads, d.k_dim), np.float32)
                self.cross_v[i] = SlotStore((n_slots, d.max_len, d.n_kv_heads, d.v_dim), np.float32)
                self.cross_len[i] = np.zeros(n_slots, np.int64)
            else:  # pragma: no cover - cera.state has no other kind
                raise UnsupportedOperation(f"backend 'metal' has no storage for {d.kind!r} state (layer state {i})")

    def clear(self, slot: int) -> None:
        dev = self.conv_state, self.ssm_state
        self.conv_state, self.ssm_state = {}, {}
        try:
            HostState.clear(self, slot)
        finally:
            self.conv_state, self.ssm_state = dev
        for store in (*self.conv_state.values(), *self.ssm_state.values()):
            store.zero(slot)

    def _on_host(self, slot: int, fn, write: bool, read: bool = True):
        """Run a HostState method on host copies of ``slot``'s arrays (written back when
        ``write``)."""
        self._check_slot(slot)
        dev = {name: getattr(self, name) for name in self.STORES}
        copies = {}
        for name, stores in dev.items():
            copies[name] = {}
            for i, st in stores.items():
                values = st.host(slot) if read else np.zeros(st.shape[1:], st.np_dtype)
                copies[name][i] = _OneSlot(st.shape, slot, values)
            setattr(self, name, copies[name])
        try:
            result = fn()
        finally:
            for name, stores in dev.items():
                setattr(self, name, stores)
        if write:
            for name, stores in dev.items():
                for i, st in stores.items():
                    st.put(slot, copies[name][i].values)
        return result

    def snapshot(self, slot: int):
        return self._on_host(slot, lambda: HostState.snapshot(self, slot), write=False)

    def restore(self, slot: int, snap) -> None:
        self._on_host(slot, lambda: HostState.restore(self, slot, snap), write=True, read=False)

    def shift(self, slot: int, keep: int, n_discard: int) -> None:
        self._on_host(slot, lambda: HostState.shift(self, slot, keep, n_discard), write=True)

    def copy_cells(self, src, dst) -> None:
        """Slots ``dst[i]`` become copies of ``src[i]`` (whole arrays: MLX arrays are values,
        so this copies nothing until one of them is written); cross-attention memories stay."""
        src, dst = [int(s) for s in src], [int(d) for d in dst]
        if src == dst:
            return
        for s in (*src, *dst):
            self._check_slot(s)
        for name in ("k", "v", "conv_state", "ssm_state"):
            for st in getattr(self, name).values():
                taken = [st.arrays[s] for s in src]
                for d, a in zip(dst, taken, strict=True):
                    st.arrays[d] = a
        s_idx, d_idx = np.asarray(src), np.asarray(dst)
        self.pos[d_idx] = self.pos[s_idx]
        self.n_filled[d_idx] = self.n_filled[s_idx]

    def nbytes(self) -> int:
        return self.pos.nbytes + sum(st.nbytes for name in self.STORES for st in getattr(self, name).values())
