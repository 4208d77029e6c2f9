"""Lowering of the products steps: products of one input (Q/K/V, gate/up) with their
epilogues (bias, residual, glu) and the rms_norm the fusion pass moved into them.

A few rows go through a row kernel (kernels.py says which: the block-wise one, the unit
kernel, the subgroup one, or the workgroup one), each row summed as a one-row product
sums it, so a decode batch and row-exact passes give each row's one-token result bit for
bit; many rows through the tiled wgsl.matmul. Products of one input run as one dispatch
(segments) where the row kernel allows, gate and up with their glu as one.
"""

from __future__ import annotations

from cera.errors import ShapeError, UnsupportedOperation
from cera.graph.planning import Step

from .. import wgsl
from ..kernels import mv_feats, mv_rows, quant_bytes, unit_shared_k
from ..memory import f32_bits
from . import pointwise

# the most workgroups of a product that computes a sandwich norm's add itself (each
# workgroup does): Gemma 3's output, 16384 workgroups, took 200 us fused against 168
# apart on the H200
PRE_ADD_MAX_GROUPS = 4096



class _AsMatrix:
    """A GGML vector ``{n}`` seen as the one-row matrix ``{n, 1}`` it is (a one-output
    projection, as Qwen3.5-MoE's shared-expert gate)."""

    def __init__(self, w):
        self._w = w
        self.shape = (w.shape[0], 1)

    def __getattr__(self, name):
        return getattr(self._w, name)


def _matrix(w):
    return _AsMatrix(w) if len(w.shape) == 1 else w

def lower(lw, step: Step) -> None:
    choice = lw.choice
    first = step.nodes[0]
    x = first.args[0]
    norm = lw.norm_now
    nparams: list = []
    if norm is not None:
        x = norm.args[0]
        w = norm.args[1]
        nparams = [lw.operand(w) + 1 if w is not None else 0, f32_bits(norm.attrs["eps"])]
    K = x.shape[-1]
    M = x.size // K
    xs = lw.stride(x)
    fuse = norm is not None
    if K % 8:
        raise UnsupportedOperation(f"backend 'vulkan': products with rows of {K} values (a multiple of 8 is needed)")
    tiled = choice.tiled(M, K)
    glu = step.glu
    residual = step.residual
    consumers = lw.consumers
    if residual is not None:
        add, k, other = residual
        member = step.nodes[k]
        if consumers.get(member.out.id, 0) > 1 or not lw.contiguous(other) or glu is not None:
            residual = None
    fuse_glu = (
        glu is not None and not tiled and all(n.args[2] is None for n in step.nodes)
        and consumers.get(step.nodes[0].out.id, 0) == 1 and consumers.get(step.nodes[1].out.id, 0) == 1
    )  # fmt: skip
    blk = choice.blk(K)
    wts = [_matrix(lw.weights[n.args[1].name]) for n in step.nodes]
    unit_seg = choice.unit(lw.off(x), xs, K, sum(w.shape[1] for w in wts), tuple(w.ggml_type for w in wts),
                           mv_rows(M), segments=True)  # fmt: skip
    segments = (
        glu is None and not tiled and (blk or not choice.mv_sg) and 1 < len(step.nodes) <= 4
        and (blk or mv_feats(mv_rows(M)) > 1 or unit_seg is not None)
        and all(len(w.shape) == 2 and len(lw.weight_chunks(w, w.shape[1])) == 1 for w in wts)
    )  # fmt: skip
    lw.pre_params = None
    pre = lw.pre_now
    if pre is not None:
        _take_pre_add(lw, pre, x, xs, K, M, wts, unit_seg, segments, fuse_glu, tiled)
    if segments:
        _segments(lw, step, x, K, M, xs, residual, nparams, fuse, unit_seg)
        return
    if fuse_glu:
        g, u = wts
        N = g.shape[1]
        kind = glu.attrs["kind"]
        types = (g.ggml_type, u.ggml_type)
        for (r0, rows, bo, bs), (_, _, uo, us) in zip(lw.weight_chunks(g, N), lw.weight_chunks(u, N), strict=True):
            params = [K, rows, M, lw.off(x), xs, lw.off(glu.out), N, 0, 0, 0, r0, g.row_bytes,
                      u.row_bytes] + nparams  # fmt: skip
            _row_product(lw, types, kind, [("w", g, bo, bs), ("w", u, uo, us)], params, K, M, rows,
                         lw.off(x), xs, fuse, f"matvec+{kind} {types[0]} {K}x{N}")  # fmt: skip
        return
    for i, node in enumerate(step.nodes):
        _, wref, bias = node.args
        w = _matrix(lw.weights[wref.name])
        if len(w.shape) != 2:
            raise ShapeError(f"linear: weight {w.name!r} has shape {w.shape}; a 2-D matrix is needed")
        out, res, res_stride = node.out, 0, 0
        if residual is not None and residual[1] == i:
            out = residual[0].out
            res, res_stride = lw.off(residual[2]) + 1, residual[2].shape[-1]
        b = lw.operand(bias) + 1 if bias is not None else 0
        product(lw, w, w.row_bytes, w.shape[1], K, M, lw.off(x), xs, lw.off(out), b, res, res_stride, nparams, fuse,
                tiled)  # fmt: skip
    if glu is not None:
        pointwise.glu(lw, glu)
    if step.residual is not None and residual is None:
        pointwise.add(lw, step.residual[0])


def _take_pre_add(lw, pre, x, xs, K, M, wts, unit_seg, segments, fuse_glu, tiled) -> None:
    """Whether the products' unit kernels compute the sandwich add ``pre`` (fusion.pre_add)
    themselves: then ``lw.pre_params`` holds its parameters; else the norm and its add
    get their own dispatch first, as without the fusion."""
    choice = lw.choice
    R = mv_rows(M)

    def takes_pre(plan, N, types, seg=False) -> bool:
        # x in shared memory, and not so many workgroups that each one's norm and add
        # cost more than their dispatch; with the products' 8-bit x in shared memory too
        # where they take it
        if plan is None or plan[3] == 0 or -(-N // plan[2]) > PRE_ADD_MAX_GROUPS:
            return False
        qk = choice.unit_products(plan[0], types, K, seg)[1]
        return not qk or quant_bytes(R, K, plan[3]) <= choice.shared_bytes

    def one_chunk(w) -> bool:
        return len(lw.weight_chunks(w, w.shape[1])) == 1

    if segments:
        ok = takes_pre(unit_seg, sum(w.shape[1] for w in wts), tuple(w.ggml_type for w in wts), True)
    elif fuse_glu:
        types = (wts[0].ggml_type, wts[1].ggml_type)
        N = wts[0].shape[1]
        ok = one_chunk(wts[0]) and takes_pre(choice.unit(lw.off(x), xs, K, N, types, R), N, types)
    else:
        ok = not tiled and all(
            one_chunk(w)
            and takes_pre(choice.unit(lw.off(x), xs, K, w.shape[1], (w.ggml_type,), R), w.shape[1], (w.ggml_type,))
            for w in wts
        )
    if ok:  # P 15..18 of the unit kernel's pre_add
        norm_w = pre[0].args[1]
        lw.pre_params = [lw.off(pre[0].args[0]), lw.off(pre[2]), lw.operand(norm_w) + 1 if norm_w is not None else 0,
                         f32_bits(pre[0].attrs["eps"])]  # fmt: skip
    else:
        pointwise.rms_norm(lw, pre[0])


def product(lw, w, row_bytes: int, N: int, K: int, M: int, x_off: int, xs: int, out_off: int, b: int, res: int,
            res_stride: int, nparams: list, fuse: bool, tiled: bool) -> None:  # fmt: skip
    """y = x W^T (+ bias, + residual) for M rows of K values and the N rows of W, each
    ``row_bytes`` long: a dispatch per bindable chunk of W, through the tiled kernel or
    the row kernel (products steps, and conv1d's product of its columns)."""
    for r0, rows, bo, bs in lw.weight_chunks(w, N, row_bytes):
        params = [K, rows, M, x_off, xs, out_off, N, b, res, res_stride, r0, row_bytes, 0] + nparams
        if tiled:
            fn, tm, splits, skew = lw.choice.matmul_kernel(rows, M, K)
            gx, gy = -(-rows // wgsl.MATMUL_TILES[fn]), -(-M // tm)
            if splits > 1:
                params[12] = lw.mem.split_scratch(splits * M * rows)
            lw.emit(("matmul", w.ggml_type, fn, tm, splits, skew),
                    lambda t=w.ggml_type, fn=fn, tm=tm, s=splits, k=skew: wgsl.matmul(t, fn, tm, s, k), params,
                    (gx * splits, gy), binds=[("w", w, bo, bs)], read_only=(2,), label=f"matmul {w.ggml_type} {K}x{N}")  # fmt: skip
            if splits > 1:
                lw.emit(("matmul_splits", splits), lambda s=splits: wgsl.matmul_splits(s), params,
                        -(-(rows * M) // 64), label="matmul (splits)")  # fmt: skip
            continue
        _row_product(lw, (w.ggml_type,), None, [("w", w, bo, bs)], params, K, M, rows, x_off, xs, fuse,
                     f"matvec {w.ggml_type} {K}x{N}")  # fmt: skip


def _row_product(lw, types: tuple, kind: str | None, binds: list, params: list, K: int, M: int, rows: int,
                 x_off: int, xs: int, fuse: bool, label: str) -> None:  # fmt: skip
    """One dispatch of the row kernel (tuning.ROW_KERNELS) for ``rows`` features of a
    product of M rows of K values: one weight, or gate and up (``kind``: their glu) bound
    in ``binds``. Which kernel: the block-wise one ("subgroup-blk*"), else the unit kernel
    where unit_plan takes the product, else the subgroup kernel ("subgroup*"), else the
    workgroup kernel."""
    choice = lw.choice
    R, sg = mv_rows(M), lw.ctx.subgroups
    ro = tuple(range(2, 2 + len(binds)))
    if choice.blk(K):
        lanes, per = choice.mv_blk
        vec = choice.mv_vec
        binds, ro = choice.vec_binds(binds)
        lw.emit(("matvec_blk", types, kind, R, per, fuse, lanes, vec),
                lambda: wgsl.matvec_blk(types, kind, R, per, fuse, lanes, vec=vec),
                params, -(-rows // per), binds=binds, read_only=ro, label=label)  # fmt: skip
        return
    plan = choice.unit(x_off, xs, K, rows, types, R)
    pre = lw.pre_params is not None
    if pre:
        assert plan and plan[3], "a sandwich add fused where the unit kernel does not take x in shared memory"
        params = params + [0] * (15 - len(params)) + lw.pre_params
    if plan:
        grp, UF, per, sk = plan
        dt, qk = choice.unit_products(grp, types, K)
        sk = unit_shared_k(choice.row_variant, sk, pre, qk)
        lw.emit(("matvec_unit", types, kind, R, per, UF, fuse, grp, sk, pre, dt, qk),
                lambda: wgsl.matvec_unit(types, kind, R, per, UF, fuse, grp, sk, pre_add=pre, dot=dt, quant_k=qk),
                params, -(-rows // per), binds=binds, read_only=ro,
                label=f"rms_norm+add+{label}" if pre else label)  # fmt: skip
        return
    if choice.mv_sg:
        per, span = choice.mv_sg, min(4, choice.mv_span)
        lw.emit(("matvec_sg", types, kind, R, per, fuse, span),
                lambda: wgsl.matvec_sg(types, kind, True, R, per, fuse, span),
                params, -(-rows // per), binds=binds, read_only=ro, label=label)  # fmt: skip
        return
    F, one = mv_feats(R), choice.mv_onepass
    lw.emit(("matvec", types, kind, R, sg, fuse, F, one), lambda: wgsl.matvec(types, kind, sg, R, fuse, F, one),
            params, -(-rows // F), binds=binds, read_only=ro, label=label)  # fmt: skip


def _segments(lw, step, x, K, M, xs, residual, nparams, fuse, unit) -> None:
    """The products of one input (Q, K, V) as one dispatch: wgsl.matvec_segments, or
    wgsl.matvec_blk's segments under the block-wise row kernel, or wgsl.matvec_unit's
    where ``unit`` (the unit kernel's plan for them) is given."""
    choice = lw.choice
    R = mv_rows(M)
    F = mv_feats(R)
    blk = bool(choice.mv_sg) and choice.mv_span == 8
    if blk:
        lanes, F = choice.mv_blk
        unit = None
    if unit:
        F = unit[2]  # each product's features start at a multiple of a workgroup's
    params = [K, 0, M, lw.off(x), xs, 0, 0, 0, 0, 0, 0, 0, 0] + (nparams or [0, 0])
    pre = lw.pre_params is not None
    if pre:
        params += lw.pre_params
    params += [0] * (wgsl.SEG_BASE - len(params))
    binds, types, at, n_all = [], [], 0, 0
    for i, node in enumerate(step.nodes):
        _, wref, bias = node.args
        w = _matrix(lw.weights[wref.name])
        N = w.shape[1]
        n_all += N
        out, res, res_stride = node.out, 0, 0
        if residual is not None and residual[1] == i:
            out = residual[0].out
            res, res_stride = lw.off(residual[2]) + 1, residual[2].shape[-1]
        b = lw.operand(bias) + 1 if bias is not None else 0
        params += [at, N, lw.off(out), N, b, w.row_bytes, res, res_stride]
        binds.append(("w", w, 0, w.buffer.size))
        types.append(w.ggml_type)
        at += -(-N // F) * F
    params[1] = at
    types = tuple(types)
    label = f"matvec x{len(types)} {'/'.join(sorted(set(types)))} {K}x{n_all}"
    if blk:
        vec = choice.mv_vec
        binds, ro = choice.vec_binds(binds)
        lw.emit(("matvec_blk_seg", types, R, F, fuse, lanes, vec),
                lambda: wgsl.matvec_blk(types, None, R, F, fuse, lanes, True, vec),
                params, at // F, binds=binds, read_only=ro, label=label)  # fmt: skip
    elif unit:
        grp, UF, per, sk = unit
        dt, qk = choice.unit_products(grp, types, K, segments=True)
        sk = unit_shared_k(choice.row_variant, sk, pre, qk)
        lw.emit(("matvec_unit_seg", types, R, per, UF, fuse, grp, sk, pre, dt, qk),
                lambda: wgsl.matvec_unit(types, None, R, per, UF, fuse, grp, sk, segments=True, pre_add=pre,
                                         dot=dt, quant_k=qk),
                params, at // per, binds=binds, read_only=tuple(range(2, 2 + len(binds))),
                label=f"rms_norm+add+{label}" if pre else label)  # fmt: skip
    else:
        sg, one = lw.ctx.subgroups, choice.mv_onepass
        lw.emit(("matvec_seg", types, R, sg, fuse, F, one), lambda: wgsl.matvec_segments(types, sg, R, fuse, F, one),
                params, at // F, binds=binds, read_only=tuple(range(2, 2 + len(binds))), label=label)  # fmt: skip
    if residual is None and step.residual is not None:
        pointwise.add(lw, step.residual[0])


__all__ = ["PRE_ADD_MAX_GROUPS", "lower", "product"]
