"""Lowering of the encoder-decoder families' ops (Whisper's): the full convolution, and
the cross-attention memory a slot stores once and every decoding step reads."""

from __future__ import annotations

from cera.errors import ContextFull, ShapeError, UnsupportedOperation

from .. import wgsl
from ..memory import f32_bits
from .products import product


def conv1d(lw, node) -> None:
    """The convolution's columns into scratch memory (wgsl.im2col), then their product
    with the weight as the file holds it: ``out`` rows of in * kernel values (GGML
    shape [kernel, in, out]), read in its own blocks by the products' kernels."""
    x, wref, bias = node.args
    w = lw.weights[wref.name]
    kernel, c_in, c_out = w.shape
    n_out = node.out.shape[0]
    K = c_in * kernel
    if K % 8:
        raise UnsupportedOperation(
            f"backend 'vulkan': conv1d with {c_in} channels x a kernel of {kernel} ({K} values per output; "
            f"a multiple of 8 is needed)"
        )
    cols = lw.scratch(n_out * K)
    count = n_out * K
    params = [count, K, kernel, node.attrs["stride"], node.attrs["padding"], x.shape[0], lw.off(x),
              lw.stride(x), cols]  # fmt: skip
    lw.emit(("im2col",), wgsl.im2col, params, -(-count // 256), label="conv1d columns")
    b = lw.operand(bias) + 1 if bias is not None else 0
    product(lw, w, c_in * w.row_bytes, c_out, K, n_out, cols, K, lw.off(node.out), b, 0, 0, [], False,
            lw.choice.tiled(n_out, K))  # fmt: skip


def _cross_memory(lw, node, ref):
    st = lw.template
    if st is None or ref.index not in getattr(st, "cross_k", {}):
        raise ShapeError(f"{node.op} needs a state holding its cross-attention memory to compile against")
    return st.cross_k[ref.index]


def store_cross(lw, node) -> None:
    """A thread per (row, element) copies each sequence's keys and values into its
    slot's memory (wgsl.store_cross); the rows stored are recorded by the host after
    the run (`VulkanExecutable.run`), as the host state's cross views record them."""
    k, v, ref = node.args
    lw.need_contiguous(node, k, v)
    mem = _cross_memory(lw, node, ref)
    decl = ref.decl
    max_len = mem.shape[1]
    if tuple(k.shape[1:]) != (decl.n_kv_heads, decl.k_dim) or tuple(v.shape[1:]) != (decl.n_kv_heads, decl.v_dim):
        raise ShapeError(f"store_cross: k {k.shape} and v {v.shape} for a memory of {decl.n_kv_heads} heads x "
                         f"{decl.k_dim}/{decl.v_dim}")  # fmt: skip
    for _r0, n in lw.graph.layout.groups:
        if n > max_len:
            raise ContextFull(f"cross-attention memory of {n} rows exceeds its size of {max_len}")
    kw, vw = decl.n_kv_heads * decl.k_dim, decl.n_kv_heads * decl.v_dim
    count = k.shape[0] * max(kw, vw)
    params = [count, kw, vw, lw.off(k), lw.off(v), max_len, lw.mem.seq_off, lw.mem.n_seq]
    lw.emit(("store_cross",), wgsl.store_cross, params, -(-count // 64),
            binds=[("xk", ref.index), ("xv", ref.index)], label="store_cross")  # fmt: skip
    lw.cross_stores.append(ref.index)


def cross_attention(lw, node) -> None:
    """wgsl.attention over the slot's memory (kv "cross"): a workgroup per (query row,
    head), every stored row visible; the rows stored per slot come from the io region
    (the arena's ``cross_off``)."""
    q, ref = node.args
    lw.need_contiguous(node, q)
    mem = _cross_memory(lw, node, ref)
    spec = node.attrs["spec"]
    shared = bool(node.attrs.get("shared", False))
    decl = ref.decl
    n, heads, dk = q.shape
    nkv, dv = decl.n_kv_heads, decl.v_dim
    if dk > 512:
        raise UnsupportedOperation(f"backend 'vulkan': cross_attention heads of {dk} values (at most 512)")
    params = [n, heads, nkv, dk, dv, lw.off(q), lw.off(node.out), mem.shape[1], lw.mem.seq_off, lw.mem.n_seq,
              0, 0, f32_bits(spec.scale), f32_bits(spec.softcap or 0.0), 0, int(shared),
              lw.mem.cross_off[ref.index], 0]  # fmt: skip
    lw.emit(("attention", "cross", dv, dk), lambda: wgsl.attention("cross", dv, dk), params, n * heads,
            binds=[("xk", ref.index), ("xv", ref.index)], label="cross_attention")  # fmt: skip
    lw.cross_reads.append((ref.index, shared))


__all__ = ["conv1d", "cross_attention", "store_cross"]
