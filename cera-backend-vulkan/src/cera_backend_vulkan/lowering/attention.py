"""Lowering of rope, the cache stores and attention over a state's KV cache (and over
the pass's own rows: attention_full).

A rope pair (queries and keys) is one dispatch, with the per-head norms before it and
the queries' scale after (fusion.py); the keys' rotation takes the cache stores
(wgsl.rope_kv) unless the tuning's fold_kv is off; in a decode step the attention may
take the whole pair (wgsl.attention_lanes' rotating form). Which attention kernel takes
a pass, and over how many workgroups a row's cells are split: kernels.py.
"""

from __future__ import annotations

import numpy as np

from cera.errors import ShapeError, UnsupportedOperation

from .. import wgsl
from ..kernels import grid
from ..memory import f32_bits
from ..wgsl.kv_tq import rotations as tq_rotations


def rope(lw, node) -> None:
    x, pos = node.args
    out = node.out
    fusion = lw.fusion
    # a per-head rms_norm before (its input is read) and a scale after (its output
    # written): fusion's rope_norm / rope_scale; P 32/34 the norm weight + 1, 33/35 eps
    # (first/second tensor), 36 the first tensor's output scale (0: none), 37 norm flags
    # (1, 2)
    norm = fusion.rope_norm.get(id(node))
    norm_w = norm_eps = out_scale = 0
    if norm is not None:
        x, w = norm.args[0], norm.args[1]
        norm_w, norm_eps = lw.operand(w) + 1 if w is not None else 0, f32_bits(norm.attrs["eps"])
    scale = fusion.rope_scale.get(id(node))
    if scale is not None:
        out, out_scale = scale.out, f32_bits(scale.attrs["s"])
    lw.need_contiguous(node, x)
    spec = node.attrs["spec"]
    n, heads, dim = x.shape
    ff = 0
    if spec.freq_factors is not None:
        ff = lw.const(np.asarray(spec.freq_factors, np.float32), key=("ff", spec.freq_factors)) + 1
    params = [n * heads, heads, dim, lw.off(x), lw.off(out), lw.off(pos), spec.n_dims, int(spec.neox),
              f32_bits(spec.base), f32_bits(spec.freq_scale), f32_bits(spec.ext_factor), f32_bits(spec.attn_factor),
              f32_bits(spec.beta_fast), f32_bits(spec.beta_slow), spec.n_ctx_orig, ff, n * heads, 1, 0, 0]  # fmt: skip
    params += [0] * 12 + [norm_w, norm_eps, 0, 0, out_scale, int(norm is not None)]
    if id(node) in fusion.rope_pair:
        # the second of a pair: it joins the previous dispatch
        last = lw.dispatches[-1]
        assert last.key[0] == "rope" and last.params[0] == last.params[16]
        last.params[0] += n * heads
        last.params[17:20] = [heads, lw.off(x), lw.off(out)]
        if norm is not None:
            last.params[34:36] = [norm_w, norm_eps]
            last.params[37] |= 2
        last.groups = grid(last.params[0])
        return
    label = ("norm+" if norm is not None else "") + "rope" + ("+scale" if scale is not None else "")
    sg = lw.choice.rope_subgroups
    lw.emit(("rope", sg), lambda: wgsl.rope(sg), params, n * heads, label=label)


def attention(lw, node) -> None:
    q, k, v, ref = node.args
    lw.need_contiguous(node, q, k, v)
    st = lw.template
    if st is None:
        raise ShapeError("attention needs a state to compile against")
    choice = lw.choice
    n, heads, dk = q.shape
    nkv, dv = k.shape[1], v.shape[2]
    cap = st.k[ref.index].shape[2]
    f16 = lw.kv_type == "f16"
    kvb = [("k", ref.index), ("v", ref.index), ("pos",)]
    first = not lw.wrote_pos
    lw.wrote_pos = True
    mem = lw.mem
    if id(node) in lw.fusion.rotating:
        # the rope pair's dispatch (the last one) joins the attention: its norms,
        # rotations and scale, and the cache stores (wgsl.attention_lanes' rotating form)
        rot = lw.dispatches.pop()
        assert rot.key[0] == "rope" and rot.params[4] == lw.off(q) and rot.params[19] == lw.off(k)
        assert rot.params[16] == n * heads and rot.params[0] == n * (heads + nkv) and rot.params[2] == dk
        params = _attention_params(lw, node, cap, rot.params[3]) + [rot.params[18], lw.off(v)]
        params += rot.params[6:16] + rot.params[32:38] + [int(first)]
        rotate = 2 if choice.rope_subgroups else 1
        _attention_lanes(lw, node, params, kvb, cap, rotate, f"{rot.label}+kv_store+attention", ())
        return
    params = [n, nkv, dk, dv, lw.off(k), lw.off(v), cap, mem.seq_off, mem.n_seq,
              lw.off(lw.graph.inputs["positions"]), st.n_ctx, int(first)]  # fmt: skip
    last = lw.dispatches[-1] if lw.dispatches else None
    quant = lw.kv_type in wgsl.QUANT_KV
    tq = lw.kv_type in wgsl.TQ_KV
    if tq:
        if max(dk, dv) > wgsl.KV_TQ_MAX_DIM:
            raise UnsupportedOperation(
                f"backend 'vulkan': a {lw.kv_type} KV cache holds heads of at most {wgsl.KV_TQ_MAX_DIM} values, "
                f"not {dk}/{dv}; use --kv-type f16 or --device cpu"
            )
        # a TurboQuant row is turned and quantized a workgroup per row (wgsl.kv_store_tq),
        # its key less the layer's offsets (binding 5)
        kind = lw.kv_type
        rot_k, rot_v = tq_rotations(lw, dk, dv)
        lw.emit(("kv_store_tq", kind, dk, dv), lambda: wgsl.kv_store_tq(kind, dk, dv), params + [rot_k, rot_v],
                n * nkv, binds=kvb + [("koff", ref.index)], label="kv_store")  # fmt: skip
    elif quant:
        if max(dk, dv) > wgsl.KV_QUANT_MAX_DIM:
            raise UnsupportedOperation(
                f"backend 'vulkan': a {lw.kv_type} KV cache holds heads of at most {wgsl.KV_QUANT_MAX_DIM} values, "
                f"not {dk}/{dv}; use --kv-type f16"
            )
        # a quantized cache's rows are turned and quantized a workgroup per row
        # (wgsl.kv_store_q): after the rotations, not inside them
        kind = lw.kv_type
        lw.emit(("kv_store_q", kind, dk, dv), lambda: wgsl.kv_store_q(kind, dk, dv), params, n * nkv, binds=kvb,
                label="kv_store")  # fmt: skip
    elif (
        choice.tuning.fold_kv
        and last is not None
        and last.key[0] == "rope"
        and last.params[0] != last.params[16]
        and last.params[19] == lw.off(k)
        and last.params[17] == nkv
        and last.params[2] == dk
        and last.params[16] + n * nkv == last.params[0]
    ):
        # the keys' rotation is the previous dispatch (the second of a rope pair):
        # the cache stores join it (wgsl.rope_kv)
        lw.dispatches.pop()
        sg = choice.rope_subgroups
        lw.emit(("rope_kv", f16, sg), lambda: wgsl.rope_kv(f16, sg), last.params[:20] + params + last.params[32:],
                last.params[0] + n * nkv, binds=kvb, label=f"{last.label}+kv_store")  # fmt: skip
    else:
        lw.emit(("kv_store", f16), lambda: wgsl.kv_store(f16), params, n * nkv, binds=kvb, label="kv_store")
    if dk > 512:
        raise UnsupportedOperation(f"backend 'vulkan': attention heads of {dk} values (at most 512)")
    params = _attention_params(lw, node, cap, lw.off(q))
    kind = lw.kv_type
    if tq:
        params[16:18] = tq_rotations(lw, dk, dv)
    if choice.attention_kernel != "chunked" and choice.lanes_fit(dk, dv):
        if choice.attention_tiles(n):
            tiles = -(-n // wgsl.ATT_TILE_ROWS)
            lw.emit(("attention_tiles", dv, dk), lambda: wgsl.attention_tiles(dv, dk), params,
                    mem.n_seq * tiles * heads, binds=kvb, read_only=(2, 3, 4), label="attention (tiles)")  # fmt: skip
            return
        _attention_lanes(lw, node, params, kvb, cap, 0, "attention", (2, 3, 4))
        return
    lw.emit(("attention", kind, dv, dk), lambda: wgsl.attention(kind, dv, dk), params, n * heads, binds=kvb,
            label="attention")  # fmt: skip


def _attention_params(lw, node, cap: int, q_off: int) -> list[int]:
    """wgsl.attention's parameters (0..17) for this attention node, its queries at q_off."""
    spec = node.attrs["spec"]
    q, k, v = node.args[:3]
    n, heads, dk = q.shape
    mem = lw.mem
    return [n, heads, k.shape[1], dk, v.shape[2], q_off, lw.off(node.out), cap, mem.seq_off, mem.n_seq,
            lw.off(lw.graph.inputs["positions"]), lw.template.n_ctx, f32_bits(spec.scale),
            f32_bits(spec.softcap or 0.0), int(spec.window or 0), 1, 0, 0]  # fmt: skip


def _attention_lanes(lw, node, params: list[int], kvb: list, cap: int, rotate: int, label: str,
                     read_only: tuple[int, ...]) -> None:  # fmt: skip
    """wgsl.attention_lanes for this attention node (``rotate``: its rotating form), and
    where its cells are split (kernels' attention_split) the join of the parts."""
    n, heads, dk = node.args[0].shape
    dv = node.args[2].shape[2]
    sg = lw.ctx.subgroups
    S = lw.choice.attention_split(n, cap)
    if S > 1:
        params[16] = lw.const(np.zeros(n * heads * S * (dv + 2), np.uint32), np.uint32)
    lw.emit(("attention_lanes", dv, dk, sg, S, rotate), lambda: wgsl.attention_lanes(dv, dk, sg, S, rotate),
            params, n * heads * S, binds=kvb, read_only=read_only, label=label + (" (split)" if S > 1 else ""))  # fmt: skip
    if S > 1:
        lw.emit(("attention_combine", dv, S), lambda: wgsl.attention_combine(dv, S),
                [n * heads, params[16], lw.off(node.out)], n * heads, label="attention (combine)")  # fmt: skip


def attention_full(lw, node) -> None:
    q, k, v = node.args
    lw.need_contiguous(node, q, k, v)
    spec = node.attrs["spec"]
    n, heads, dk = q.shape
    nkv, dv = k.shape[1], v.shape[2]
    if dk > 512:
        raise UnsupportedOperation(f"backend 'vulkan': attention heads of {dk} values (at most 512)")
    mem = lw.mem
    params = [n, heads, nkv, dk, dv, lw.off(q), lw.off(node.out), 0, mem.seq_off, mem.n_seq,
              lw.off(lw.graph.inputs["positions"]), 0, f32_bits(spec.scale), f32_bits(spec.softcap or 0.0),
              int(spec.window or 0), int(spec.causal), lw.off(k), lw.off(v)]  # fmt: skip
    lw.emit(("attention", "act", dv, dk), lambda: wgsl.attention("act", dv, dk), params, n * heads,
            label="attention_full")  # fmt: skip


__all__ = ["attention", "attention_full", "rope"]
