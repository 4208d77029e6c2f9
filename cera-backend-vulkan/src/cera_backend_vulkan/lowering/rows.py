"""Lowering of the row ops: embeddings (rows of a table in its GGUF blocks), softmax,
argmax/top-k, and the gathers (take, concat, rows) that index the arena through a
constant table; views (reshape, slice) need no dispatch: their placements share
storage."""

from __future__ import annotations

import numpy as np

from cera.errors import UnsupportedOperation

from .. import wgsl

# argmax over rows longer than SELECT_SPLIT: two stages (wgsl.select_partial /
# select_combine), chunks of SELECT_CHUNK values each read by their own workgroup
SELECT_SPLIT = 8192
SELECT_CHUNK = 2048


def embedding(lw, node) -> None:
    table, ids = node.args
    w = lw.weights[table.name]
    K, n_rows = w.shape[0], w.shape[1]
    if K % 8:
        _embedding_dense(lw, node, w)
        return
    n = ids.size
    for r0, rows, boff, bsize in lw.weight_chunks(w, n_rows):
        lw.emit(("embedding", w.ggml_type), lambda t=w.ggml_type: wgsl.embedding(t),
                [lw.off(ids), n, K, lw.off(node.out), w.row_bytes, r0, rows], n,
                binds=[("w", w, boff, bsize)], read_only=(2,), label=f"embedding {w.ggml_type}")  # fmt: skip


def _embedding_dense(lw, node, w) -> None:
    """An embedding whose rows are no multiple of 8 values: the table's f32 values as
    a constant (small tables only: these are per-head inputs, not vocabularies)."""
    table, ids = node.args
    K, n_rows = w.shape[0], w.shape[1]
    if K * n_rows > 1 << 20:
        raise UnsupportedOperation(f"backend 'vulkan': embedding rows of {K} values (a multiple of 8 is needed)")
    count = ids.size * K
    params = [lw.off(ids), count, K, lw.off(node.out), lw.operand(table), n_rows]
    lw.emit(("embedding_dense",), wgsl.embedding_dense, params, -(-count // 64), label="embedding f32")


def softmax(lw, node) -> None:
    x = node.args[0]
    lw.need_contiguous(node, x)
    n = x.shape[-1]
    rows = x.size // n
    lw.emit(("softmax",), wgsl.softmax, [rows, n, lw.off(x), lw.off(node.out)], rows, label="softmax")


def _select(lw, node, k: int, values_off: int = 0) -> None:
    x = node.args[0]
    lw.need_contiguous(node, x)
    n = x.shape[-1]
    rows = x.size // n
    if k == 1 and n > SELECT_SPLIT:
        chunk = max(SELECT_CHUNK, -(-n // 1024))
        chunks = -(-n // chunk)
        scratch = lw.const(np.zeros(2 * rows * chunks, np.uint32), np.uint32)
        lw.emit(("select_partial",), wgsl.select_partial, [rows, n, lw.off(x), scratch, chunk, chunks],
                rows * chunks, label=f"{node.op} (chunks)")  # fmt: skip
        lw.emit(("select_combine",), wgsl.select_combine, [rows, chunks, scratch, lw.off(node.out), 0, values_off],
                rows, label=f"{node.op} (combine)")  # fmt: skip
        return
    params = [rows, n, lw.off(x), lw.off(node.out), k, values_off]
    lw.emit(("select",), wgsl.select_top, params, rows, label=node.op)


def argmax(lw, node) -> None:
    _select(lw, node, 1)


def top_k(lw, node) -> None:
    _select(lw, node, node.attrs["k"])


def _gather(lw, node, table: np.ndarray, src_off: int = 0) -> None:
    t = lw.const(table.astype(np.uint32), np.uint32)
    count = table.size
    lw.emit(("gather",), wgsl.gather, [count, lw.off(node.out), src_off, t, 0], -(-count // 256), label=node.op)


def take(lw, node) -> None:
    x, ids = node.args
    lw.need_contiguous(node, x, ids)
    k = ids.shape[-1]
    count = ids.size
    params = [count, lw.off(node.out), lw.off(x), lw.off(ids), 1, x.shape[-1], k]
    lw.emit(("gather",), wgsl.gather, params, -(-count // 256), label="take")


def concat(lw, node) -> None:
    a, b = node.args
    ax = node.attrs.get("axis", -1) % len(a.shape)
    ia = lw.mem.indices(a).reshape(a.shape)
    ib = lw.mem.indices(b).reshape(b.shape)
    _gather(lw, node, np.concatenate([ia, ib], axis=ax).reshape(-1))


def rows(lw, node) -> None:
    x = node.args[0]
    idx = lw.mem.indices(x).reshape(x.shape[0], -1)[list(node.attrs["index"])]
    _gather(lw, node, idx.reshape(-1))


def seq_mean(lw, node) -> None:
    x = node.args[0]
    lw.need_contiguous(node, x)
    groups = np.asarray(node.attrs["groups"], np.uint32).reshape(-1)
    t = lw.const(groups, np.uint32)
    d = x.shape[-1]
    count = len(node.attrs["groups"]) * d
    lw.emit(("seq_mean",), wgsl.seq_mean, [count, d, lw.off(x), lw.off(node.out), t], -(-count // 256),
            label="seq_mean")  # fmt: skip


def view(lw, node) -> None:  # reshape, slice: placements share storage
    pass


__all__ = ["SELECT_CHUNK", "SELECT_SPLIT", "argmax", "concat", "embedding", "rows", "seq_mean", "softmax", "take",
           "top_k", "view"]  # fmt: skip
