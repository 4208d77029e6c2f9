"""The memory layout of a compiled pass: one device buffer, the *arena*.

In element (32-bit word) offsets, from 0:

- the io region: every graph input (token ids, positions, ...), each at a multiple of
  16 words; the table of sequences (slots, starts, first rows, lengths: ``seq_off``);
  per cross-attention memory the graph reads, the rows each slot holds (``cross_off``);
  all of it written by each run in one `write_buffer`;
- the activations, at the offsets `cera.graph.planning.arena_layout` plans (tensors whose
  lifetimes do not overlap share memory; views share their base's);
- the constants a kernel reads (norm weights, biases, index tables), written once when
  the graph is compiled, then per-run scratch (a kernel writes it before another reads
  it in the same run: nothing is uploaded).

Weights live in buffers of their own; `weight_chunks` cuts one into ranges of rows that
a binding can hold.
"""

from __future__ import annotations

import math

import numpy as np

from cera.errors import ShapeError, UnsupportedOperation
from cera.graph.builder import Tensor
from cera.graph.planning import arena_layout


def _pad16(n: int) -> int:
    return -(-max(1, n) // 16) * 16


class Arena:
    """Where each tensor, input and constant of one pass lives. Views (``stride``,
    ``contiguous``) are known from the placements alone; offsets once `plan` has laid
    out the fused steps."""

    def __init__(self, graph, place):
        self.graph = graph
        self.place = place

    # -- views -----------------------------------------------------------------------------------

    def stride(self, t: Tensor) -> int:
        return self.place[t.id].row_stride

    def contiguous(self, t: Tensor) -> bool:
        return len(t.shape) < 2 or t.shape[-1] == self.stride(t) or math.prod(t.shape[:-1]) == 1

    # -- the layout --------------------------------------------------------------------------------

    def plan(self, steps, n_slots: int) -> None:
        """Lay out the io region and the activations of these (fused) steps; constants
        and scratch follow, as lowering asks for them."""
        graph = self.graph
        self.offsets, act_bytes = arena_layout(graph, steps, self.place)
        self.n_seq = graph.layout.n_seq
        self.io: dict[str, tuple[int, int]] = {}  # input name -> (element offset, count)
        at = 0
        for name, t in graph.inputs.items():
            self.io[name] = (at, t.size)
            at += _pad16(t.size)
        self.seq_off = at
        at += _pad16(4 * self.n_seq)
        # per cross-attention memory the graph reads: the rows each slot holds, as they
        # will be after this pass's stores (the host keeps the record, the state's
        # cross_len, and writes it here every run: the kernels read lengths, not positions)
        self.cross_off: dict[int, int] = {}
        for node in graph.nodes:
            if node.op == "cross_attention" and node.args[1].index not in self.cross_off:
                self.cross_off[node.args[1].index] = at
                at += _pad16(n_slots)
        self.io_words = at
        self.act_base = at
        self.const_base = at + act_bytes // 4
        self.consts: list[tuple[int, np.ndarray]] = []
        self.end = self.const_base  # the first word after everything placed so far
        self._const_cache: dict = {}
        self._split_at, self._split_words = 0, 0

    def off(self, t: Tensor) -> int:
        """Element offset of tensor t in the arena."""
        p = self.place[t.id]
        for name, it in self.graph.inputs.items():
            if it.id == p.root:
                return self.io[name][0] + p.offset // 4
        return self.act_base + (self.offsets[p.root] + p.offset) // 4

    def span(self, t: Tensor):
        """(first element, elements from the first to the last, shape, (row stride, row))."""
        shape = t.shape or (1,)
        last = shape[-1]
        rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
        s = self.stride(t) if len(shape) > 1 else last
        count = (rows - 1) * s + last if rows else 0
        return self.off(t), max(1, count), shape, (s, last)

    def indices(self, t: Tensor) -> np.ndarray:
        """Arena element index of every value of t, row-major."""
        shape = t.shape or (1,)
        last = shape[-1]
        rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
        base = self.off(t) + np.arange(rows)[:, None] * (self.stride(t) if len(shape) > 1 else last)
        return (base + np.arange(last)[None, :]).reshape(-1)

    def const(self, values, dtype=np.float32, key=None) -> int:
        """Element offset of constant values placed after the activations (once per
        ``key`` where one is given)."""
        if key is not None and key in self._const_cache:
            return self._const_cache[key]
        arr = np.ascontiguousarray(np.asarray(values, dtype).reshape(-1))
        if arr.dtype.itemsize != 4:
            raise ShapeError("arena constants are 32-bit values")
        at = self.end
        self.consts.append((at, arr))
        self.end += _pad16(arr.size)
        if key is not None:
            self._const_cache[key] = at
        return at

    def scratch(self, words: int) -> int:
        """Element offset of ``words`` of per-run working memory after the constants."""
        at = self.end
        self.end += _pad16(words)
        return at

    def split_scratch(self, words: int) -> int:
        """Scratch for a split product's partial sums, shared by all of them (the dispatches
        of a pass run one after another): grown when a product needs more."""
        if words > self._split_words:
            self._split_at, self._split_words = self.scratch(words), words
        return self._split_at


def f32_bits(x: float) -> int:
    """A float's bits, as a parameter word."""
    return int(np.array([x], np.float32).view(np.uint32)[0])


def weight_chunks(w, n_rows: int, max_binding: int, align: int, row_bytes: int | None = None):
    """Row ranges of weight ``w`` (rows of ``row_bytes``, by default the file's rows),
    each bindable at once (at most ``max_binding`` bytes, starting at a multiple of
    ``align``): [(first row, rows, byte offset, byte size)]."""
    row_bytes = row_bytes or w.row_bytes
    total = row_bytes * n_rows
    buf_size = w.buffer.size
    if total + 4 <= max_binding:
        return [(0, n_rows, 0, buf_size)]
    step = align // math.gcd(row_bytes, align)
    per = (max_binding - 8) // row_bytes // step * step
    if per < 1:
        raise UnsupportedOperation(f"backend 'vulkan': a row of weight {w.name!r} exceeds one binding")
    out = []
    for r0 in range(0, n_rows, per):
        n = min(per, n_rows - r0)
        start = r0 * row_bytes
        size = min(buf_size - start, -(-(n * row_bytes + 4) // 4) * 4)
        out.append((r0, n, start, size))
    return out


__all__ = ["Arena", "f32_bits", "weight_chunks"]
