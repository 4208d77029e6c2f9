"""Lowering the encoder ops (conv1d, attention_full, cross_attention, store_cross) to the
C plan (csrc/encoder.c); compile.py hands these nodes here.

What each plan op points at is kept alive by the executable (``exe._keep``): the
transposed convolution weights, the per-sequence row table, the argument structs.
"""

from __future__ import annotations

import numpy as np

from cera.errors import ShapeError

from ._native import ffi, lib


def _rows(exe) -> object:
    groups = exe.graph.layout.groups
    if len(groups) > 64:
        raise ShapeError(f"the CPU backend's encoder ops take at most 64 sequences per pass, got {len(groups)}")
    rows = np.array([x for g in groups for x in g], np.int64)
    exe._keep.append(rows)
    return ffi.from_buffer("int64_t[]", rows)


def lower_encoder_op(exe, plan, node) -> int:
    op = node.op
    out = node.out
    if op == "conv1d":
        x, w, bias = node.args
        dense = exe.weights[w.name].dense()  # numpy [out, in, kernel]
        c_out, c_in, kernel = dense.shape
        # the product wants the weight as [in * kernel][out] (a row per input tap)
        wt = np.ascontiguousarray(dense.reshape(c_out, c_in * kernel).T, np.float32)
        exe._keep.append(wt)
        return lib.cera_plan_conv1d(
            plan, exe.ptr(x), x.shape[0], c_in, ffi.from_buffer("float[]", wt), kernel, c_out, exe.operand(bias),
            node.attrs["stride"], node.attrs["padding"], exe.ptr(out), out.shape[0],
        )  # fmt: skip
    if op == "attention_full":
        q, k, v = node.args
        spec = node.attrs["spec"]
        a = ffi.new("cera_attention_full_args *")
        a.q, a.k, a.v, a.out = exe.ptr(q), exe.ptr(k), exe.ptr(v), exe.ptr(out)
        a.n_heads, a.n_kv_heads, a.k_dim, a.v_dim = q.shape[1], k.shape[1], k.shape[2], v.shape[2]
        a.scale, a.softcap = float(spec.scale), float(spec.softcap or 0.0)
        a.window, a.causal = int(spec.window or 0), int(bool(spec.causal))
        a.pos = exe.ptr(exe.graph.inputs["positions"], "int32_t *")
        a.n_seq = exe.graph.layout.n_seq
        a.rows = _rows(exe)
        exe._keep.append(a)
        return lib.cera_plan_attention_full(plan, a)
    state = exe._template
    if state is None:
        raise ShapeError(f"{op} needs a state to compile against")
    q_or_k = node.args[0]
    ref = node.args[-1]
    ki, vi, li = exe.table_index[ref.index]
    decl = ref.decl
    if op == "cross_attention":
        spec = node.attrs["spec"]
        a = ffi.new("cera_cross_args *")
        a.q, a.out = exe.ptr(q_or_k), exe.ptr(out)
        a.n_heads, a.n_kv_heads, a.k_dim, a.v_dim = q_or_k.shape[1], decl.n_kv_heads, decl.k_dim, decl.v_dim
        a.max_len, a.scale = decl.max_len, float(spec.scale)
        a.shared = int(bool(node.attrs.get("shared", False)))
        fn = lib.cera_plan_cross_attention
    else:  # store_cross
        k, v, _ = node.args
        a = ffi.new("cera_store_cross_args *")
        a.k, a.v = exe.ptr(k), exe.ptr(v)
        a.n_kv_heads, a.k_dim, a.v_dim, a.max_len = decl.n_kv_heads, decl.k_dim, decl.v_dim, decl.max_len
        fn = lib.cera_plan_store_cross
    a.k_index, a.v_index, a.len_index, a.n_slots = ki, vi, li, state.n_slots
    a.n_seq = exe.graph.layout.n_seq
    a.rows = _rows(exe)
    a.slots = exe._slots_p
    exe._keep.append(a)
    return fn(plan, a)
