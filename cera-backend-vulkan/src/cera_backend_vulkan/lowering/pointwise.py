"""Lowering of the element-wise ops (one kernel, wgsl.elementwise, told the op by a code)
and the norms (wgsl.norm, with a following residual add where the fusion pass joined
it)."""

from __future__ import annotations

import numpy as np

from cera.errors import UnsupportedOperation
from cera.graph.builder import Tensor, WeightRef
from cera.graph.ops import OPS

from .. import wgsl
from ..memory import f32_bits

EW = {"unary": 0, "glu": 1, "add": 2, "mul": 3, "scale": 4, "softcap": 5, "copy": 6, "mul_rows": 7}


def elementwise(lw, node, code: int, count: int, a_off: int, b_off: int = 0, b_len: int = 1, kind: int = 0,
                f: float = 0.0, row: int = 1, a_stride: int = 1) -> None:  # fmt: skip
    params = [code, count, lw.off(node.out), a_off, b_off, max(1, b_len), kind, f32_bits(f), row, a_stride]
    lw.emit(("ew",), wgsl.elementwise, params, -(-count // 256), label=node.op)


def unary(lw, node) -> None:
    x = node.args[0]
    lw.need_contiguous(node, x)
    elementwise(lw, node, EW["unary"], x.size, lw.off(x), kind=OPS["unary"].code("kind", node.attrs["kind"]))


def glu(lw, node) -> None:
    g, u = node.args
    lw.need_contiguous(node, g, u)
    elementwise(lw, node, EW["glu"], g.size, lw.off(g), lw.off(u), g.size, kind=OPS["glu"].code("kind", node.attrs["kind"]))


def _binary(lw, node, code: int) -> None:
    a, b = node.args
    lw.need_contiguous(node, a)
    if isinstance(b, WeightRef):
        wide = _broadcast_weight(lw, a, b)
        if wide is not None:
            elementwise(lw, node, code, a.size, lw.off(a), *wide)
            return
        vals = lw.weights[b.name].dense().reshape(-1)
        elementwise(lw, node, code, a.size, lw.off(a), lw.operand(b), vals.size)
        return
    lw.need_contiguous(node, b)
    rows = a.size // a.shape[-1]
    if code == EW["mul"] and tuple(b.shape) == tuple(a.shape[:-1]) + (1,) and b.size == rows and b.size != a.size:
        # one value per row (a per-token gate, Qwen3.5-MoE's shared expert's)
        elementwise(lw, node, EW["mul_rows"], a.size, lw.off(a), lw.off(b), b.size, row=a.shape[-1])
        return
    if b.size not in (a.size, a.shape[-1]) and tuple(b.shape) != tuple(a.shape):
        # a general broadcast: expand the operand into a constant index table is not
        # needed by any family; refuse rather than guess
        raise UnsupportedOperation(f"backend 'vulkan': {node.op} broadcasting {b.shape} over {a.shape}")
    elementwise(lw, node, code, a.size, lw.off(a), lw.off(b), b.size)


def _broadcast_weight(lw, a: Tensor, b: WeightRef):
    """A weight operand that broadcasts over a's trailing axes other than as a tail of
    them (Mamba-2's D, one value per head of [n, heads, head_dim]): (offset, length)
    of it spelled out as one row of a's trailing size, as a constant; None when its
    values, repeated, already are (the elementwise kernel's ``i % length``)."""
    vals = lw.weights[b.name].dense()
    if a.ndim < 2 or vals.ndim < 2 or vals.shape[-1] == a.shape[-1]:
        return None
    try:
        row = np.broadcast_to(vals.reshape(b.numpy_shape), tuple(a.shape[1:]))
    except ValueError:
        return None
    row = np.ascontiguousarray(row, np.float32).ravel()
    return lw.const(row, key=("bcast", b.name, tuple(a.shape[1:]))), row.size


def add(lw, node) -> None:
    _binary(lw, node, EW["add"])


def mul(lw, node) -> None:
    _binary(lw, node, EW["mul"])


def scale(lw, node) -> None:
    x = node.args[0]
    lw.need_contiguous(node, x)
    elementwise(lw, node, EW["scale"], x.size, lw.off(x), f=node.attrs["s"])


def softcap(lw, node) -> None:
    x = node.args[0]
    lw.need_contiguous(node, x)
    elementwise(lw, node, EW["softcap"], x.size, lw.off(x), f=node.attrs["cap"])


def copy(lw, node) -> None:
    x = node.args[0]
    last = x.shape[-1] if x.shape else 1
    elementwise(lw, node, EW["copy"], x.size, lw.off(x), row=last, a_stride=lw.stride(x))


def rms_norm(lw, node, layer: bool = False) -> None:
    x = node.args[0]
    lw.need_contiguous(node, x)
    n = x.shape[-1]
    rows = x.size // n
    w = node.args[1]
    b = node.args[2] if layer else None
    for p in (w, b):
        if isinstance(p, Tensor) and p.size != n:
            raise UnsupportedOperation(f"backend 'vulkan': {node.op} with a per-row operand of shape {p.shape}")
    out, res, label = node.out, 0, node.op
    if id(node) in lw.fusion.norm_add:  # the residual add that follows, in the same dispatch
        add, other = lw.fusion.norm_add[id(node)]
        out, res, label = add.out, lw.off(other) + 1, f"{node.op}+add"
    params = [int(layer), rows, n, lw.off(x), lw.off(out), lw.operand(w) + 1 if w is not None else 0,
              lw.operand(b) + 1 if b is not None else 0, f32_bits(node.attrs["eps"]), res]  # fmt: skip
    sg = lw.ctx.subgroups
    lw.emit(("norm", sg), lambda: wgsl.norm(sg), params, rows, label=label)


def layer_norm(lw, node) -> None:
    rms_norm(lw, node, layer=True)


__all__ = ["EW", "add", "copy", "elementwise", "glu", "layer_norm", "mul", "rms_norm",
           "scale", "softcap", "unary"]  # fmt: skip
