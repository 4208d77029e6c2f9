"""The CPU backend's per-session state: a KV cache per attention layer, conv states.

Layout: per attention layer, keys ``[n_kv_heads, n_ctx, k_dim]`` and values
``[n_kv_heads, n_ctx, v_dim]``, f16 by default (f32 on request). Head-major so that
attention over one head reads one contiguous block. Cells fill in order; ``pos[c]`` is
the position of the token in cell c (-1 when empty), which is what masks compare, so a
session may place tokens at any positions (after a context shift, for instance).

A forward pass runs between `begin` and `commit` (or `rollback`): `begin` reserves the
cells ``[n_filled, n_filled + n)`` and records their positions; attention writes K/V
there; `commit` keeps them. Conv states (recurrent: each pass overwrites them) are
saved at `begin` so that `rollback` can put them back.
"""

from __future__ import annotations

import attrs
import numpy as np
from cera.backend import KVLayerSpec, State
from cera.errors import ContextFull, SessionError, UnsupportedOperation

from ._native import ffi

KV_TYPES = {"f16": np.float16, "f32": np.float32}
INT32_MAX = 2**31 - 1


@attrs.frozen
class Snapshot:
    """An opaque copy of a `CpuState`: only the filled cells are copied."""

    owner: int
    n_filled: int
    pos: np.ndarray
    k: tuple[np.ndarray, ...]
    v: tuple[np.ndarray, ...]
    conv: dict


class CpuState(State):
    def __init__(self, layers: list[KVLayerSpec], n_ctx: int, kv_type: str = "f16"):
        if kv_type not in KV_TYPES:
            raise UnsupportedOperation(f"backend 'cpu' has no KV cache type {kv_type!r}; use one of {sorted(KV_TYPES)}")
        if not isinstance(n_ctx, int) or n_ctx < 1:
            raise SessionError(f"n_ctx must be a positive integer, got {n_ctx!r}")
        dtype = KV_TYPES[kv_type]
        self.kv_type = kv_type
        self.layers = list(layers)
        self.n_ctx = n_ctx
        self.n_filled = 0
        # np.zeros maps fresh pages lazily: a large n_ctx costs memory only as cells fill.
        self.k = [np.zeros((spec.n_kv_heads, n_ctx, spec.k_dim), dtype) for spec in self.layers]
        self.v = [np.zeros((spec.n_kv_heads, n_ctx, spec.v_dim), dtype) for spec in self.layers]
        self.pos = np.full(n_ctx, -1, dtype=np.int32)
        self.conv: dict[int, np.ndarray] = {}
        self._batch: tuple[int, int] | None = None
        self._conv_saved: dict[int, np.ndarray] | None = None
        self._pointers: tuple | None = None
        # Execution plans of the backend (plan.py), by (model, n_tokens, output, options):
        # they point into this state's cache arrays, which live as long as the state.
        self.plans: dict = {}

    # -- the forward-pass protocol --------------------------------------------------------

    def begin(self, positions: np.ndarray) -> None:
        if self._batch is not None:
            raise SessionError("state.begin called again before commit() or rollback() of the previous pass")
        positions = np.asarray(positions)
        if positions.ndim != 1 or positions.dtype.kind not in "iu":
            raise SessionError(f"positions must be a 1-D integer array, got {positions.dtype} {positions.shape}")
        n = len(positions)
        if self.n_filled + n > self.n_ctx:
            raise ContextFull(
                f"{n} tokens do not fit in the KV cache: {self.n_filled} of its {self.n_ctx} cells are used; "
                f"truncate the session or create it with a larger context"
            )
        if n and (positions.min() < 0 or positions.max() > INT32_MAX):
            raise SessionError("positions must be non-negative int32 values")
        start = self.n_filled
        self.pos[start : start + n] = positions
        self._batch = (start, n)
        self._conv_saved = {layer: s.copy() for layer, s in self.conv.items()}

    def commit(self) -> None:
        if self._batch is None:
            raise SessionError("state.commit called without a pass in progress (call begin first)")
        self.n_filled += self._batch[1]
        self._batch = None
        self._conv_saved = None

    def rollback(self) -> None:
        if self._batch is None:
            return
        start, n = self._batch
        self.pos[start : start + n] = -1
        if self._conv_saved is not None:
            self.conv = self._conv_saved
        self._batch = None
        self._conv_saved = None

    def batch(self, n: int) -> tuple[int, int]:
        """The cells of the pass in progress, checked against a batch of n tokens."""
        if self._batch is None:
            raise SessionError("call state.begin(positions) before running a forward pass")
        if self._batch[1] != n:
            raise SessionError(f"the pass in progress reserved {self._batch[1]} cells but an op got {n} tokens")
        return self._batch

    # -- editing -----------------------------------------------------------------------------

    def truncate(self, n: int) -> None:
        if self._batch is not None:
            raise SessionError("cannot truncate the state while a pass is in progress")
        if not 0 <= n <= self.n_filled:
            raise SessionError(f"cannot truncate to {n} cells: the state holds {self.n_filled}")
        if n < self.n_filled and self.conv:
            raise SessionError(
                "this model carries recurrent conv state, which cannot be rewound cell by cell; "
                "restore a snapshot taken at the point to return to instead"
            )
        self.pos[n : self.n_filled] = -1
        self.n_filled = n
        if n == 0:
            self.conv = {}

    def snapshot(self) -> Snapshot:
        if self._batch is not None:
            raise SessionError("cannot snapshot the state while a pass is in progress")
        n = self.n_filled
        return Snapshot(
            owner=id(self),
            n_filled=n,
            pos=self.pos[:n].copy(),
            k=tuple(k[:, :n].copy() for k in self.k),
            v=tuple(v[:, :n].copy() for v in self.v),
            conv={layer: s.copy() for layer, s in self.conv.items()},
        )

    def restore(self, snap: Snapshot) -> None:
        # (restore copies into the existing arrays, so pointers the backend keeps stay valid)
        if not isinstance(snap, Snapshot) or snap.owner != id(self):
            raise SessionError("this snapshot was not taken from this state")
        if self._batch is not None:
            raise SessionError("cannot restore the state while a pass is in progress")
        n = snap.n_filled
        for dst, src in zip(self.k, snap.k, strict=True):
            dst[:, :n] = src
        for dst, src in zip(self.v, snap.v, strict=True):
            dst[:, :n] = src
        self.pos[:n] = snap.pos
        self.pos[n:] = -1
        self.n_filled = n
        self.conv = {layer: s.copy() for layer, s in snap.conv.items()}

    # -- used by the ops -----------------------------------------------------------------------

    def check_kv(self, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[int, int]:
        """Check this pass's keys ``[n, n_kv_heads, k_dim]`` and values against the layer's
        cache and return its cells (start, n); the attention kernel writes them (rounding
        to f16 to nearest even, like ggml's conversion)."""
        if not 0 <= layer < len(self.layers):
            raise SessionError(f"attention layer {layer} does not exist: the state has {len(self.layers)}")
        spec = self.layers[layer]
        n = k.shape[0]
        start, _ = self.batch(n)
        if k.shape[1:] != (spec.n_kv_heads, spec.k_dim) or v.shape != (n, spec.n_kv_heads, spec.v_dim):
            raise SessionError(
                f"layer {layer} caches K {(spec.n_kv_heads, spec.k_dim)} and V {(spec.n_kv_heads, spec.v_dim)} "
                f"per token, got K {k.shape[1:]} and V {v.shape[1:]}"
            )
        return start, n

    def cache_pointers(self, layer: int) -> tuple:
        """cffi pointers to layer's K and V cache and to the cell positions; made once,
        since the arrays live as long as the state (restore copies into them)."""
        if self._pointers is None:
            self._pointers = (
                [ffi.from_buffer(a) for a in self.k],
                [ffi.from_buffer(a) for a in self.v],
                ffi.from_buffer("int32_t[]", self.pos),
            )
        ks, vs, pos = self._pointers
        return ks[layer], vs[layer], pos

    def conv_state(self, layer: int, shape: tuple[int, int]) -> np.ndarray:
        """The carried inputs of conv layer ``layer`` (zeros at the start of a sequence)."""
        s = self.conv.get(layer)
        if s is None or s.shape != shape:
            s = self.conv[layer] = np.zeros(shape, np.float32)
        return s
