"""Lowering: each step of a fused graph becomes one or a few dispatches.

A module per kind of kernel, as wgsl/ has them: products (the products steps, with
their fused norms and epilogues), pointwise (element-wise ops, norms), rows
(embeddings, softmax, selection, gathers), attention (rope, cache stores, attention),
hybrid (short convolutions, the SSM scan, experts), encdec (Whisper's convolution and
cross-attention). Each lowers an op with a function ``(lw, node)`` (`LOWERERS`), where
``lw`` is the `Lowering` of the graph: its memory (``lw.mem``, memory.py), the kernel
rules (``lw.choice``, kernels.py), the joins found by the fusion pass (``lw.fusion``)
and the dispatches made so far (``lw.dispatches``).
"""

from __future__ import annotations

import numpy as np

from cera.errors import ShapeError, UnsupportedOperation
from cera.graph.builder import Tensor, WeightRef
from cera.graph.planning import Step

from ..kernels import grid
from ..memory import weight_chunks
from . import attention, encdec, hybrid, pointwise, products, rows


class Dispatch:
    """One kernel launch: pipeline, parameters, bindings after the arena (("w", weight,
    byte offset, size) or ("k"/"v", decl index) or ("pos",) or ("conv"/"ssm", decl index)
    or ("xk"/"xv", decl index): a cross-attention memory's keys or values), workgroups,
    and a label for the profile."""

    __slots__ = ("key", "pipe", "layout", "params", "binds", "groups", "label")

    def __init__(self, key, pipe, layout, params, binds, groups, label):
        self.key, self.pipe, self.layout = key, pipe, layout
        self.params, self.binds, self.groups, self.label = params, binds, groups, label


LOWERERS = {
    "embedding": rows.embedding,
    "softmax": rows.softmax,
    "argmax": rows.argmax,
    "top_k": rows.top_k,
    "take": rows.take,
    "concat": rows.concat,
    "rows": rows.rows,
    "seq_mean": rows.seq_mean,
    "reshape": rows.view,
    "slice": rows.view,
    "unary": pointwise.unary,
    "glu": pointwise.glu,
    "add": pointwise.add,
    "mul": pointwise.mul,
    "scale": pointwise.scale,
    "softcap": pointwise.softcap,
    "copy": pointwise.copy,
    "rms_norm": pointwise.rms_norm,
    "layer_norm": pointwise.layer_norm,
    "rope": attention.rope,
    "attention": attention.attention,
    "attention_full": attention.attention_full,
    "conv1d_causal": hybrid.conv1d_causal,
    "ssm_scan": hybrid.ssm_scan,
    "gated_delta_net": hybrid.gated_delta_net,
    "moe": hybrid.moe,
    "kda": hybrid.kda,
    "head_linear": hybrid.head_linear,
    "sigmoid_gate": hybrid.sigmoid_gate,
    "conv1d": encdec.conv1d,
    "store_cross": encdec.store_cross,
    "cross_attention": encdec.cross_attention,
}


class Lowering:
    """The dispatches of one graph, made step by step (`run`)."""

    def __init__(self, ctx, graph, weights: dict, state, arena, choice, fusion, consumers: dict):
        self.ctx = ctx
        self.graph = graph
        self.weights = weights
        self.template = state  # the state compiled against (its caches' shapes)
        self.kv_type = getattr(state, "kv_type", "f16")
        self.mem = arena
        self.choice = choice
        self.fusion = fusion
        self.consumers = consumers
        self.dispatches: list[Dispatch] = []
        self.wrote_pos = False  # whether a cache store already writes the cells' positions
        self.cross_stores: list[int] = []  # memories store_cross writes (decl indices)
        self.cross_reads: list[tuple[int, bool]] = []  # memories cross_attention reads, shared or not
        # the step being lowered: the rms_norm fused into its products, the sandwich add
        # they compute (fusion.pre_add), and that add's parameters once products.lower
        # has taken it into its kernels
        self.norm_now = self.pre_now = self.pre_params = None

    def run(self, steps: list[Step]) -> None:
        absorbed = self.fusion.absorbed
        for i, step in enumerate(steps):
            if id(step.nodes[0]) in absorbed:
                continue
            self.norm_now = self.fusion.fused_norm.get(i)
            self.pre_now = self.fusion.pre_add.get(i)
            self.pre_params = None
            self.lower(step)

    def lower(self, step: Step) -> None:
        if step.is_products:
            products.lower(self, step)
            return
        node = step.nodes[0]
        fn = LOWERERS.get(node.op)
        if fn is None:
            raise UnsupportedOperation(f"backend 'vulkan' has no kernel for op {node.op!r}")
        fn(self, node)

    def emit(self, key, source, params, groups, binds=(), read_only=(), label="?") -> None:
        """A dispatch of kernel variant ``key`` (``source()``: its WGSL) with these
        parameters over ``groups`` workgroups (a count, or an (x, y) grid)."""
        n_bindings = 2 + len(binds)
        pipe, layout = self.ctx.pipeline(key, source, n_bindings, read_only)
        if len(params) > 64:
            raise ShapeError("too many kernel parameters")
        gx, gy = groups if isinstance(groups, tuple) else grid(groups)
        self.dispatches.append(Dispatch(key, pipe, layout, list(params), list(binds), (gx, gy), label))

    # -- memory ----------------------------------------------------------------------------------

    def off(self, t: Tensor) -> int:
        return self.mem.off(t)

    def stride(self, t: Tensor) -> int:
        return self.mem.stride(t)

    def contiguous(self, t: Tensor) -> bool:
        return self.mem.contiguous(t)

    def const(self, values, dtype=np.float32, key=None) -> int:
        return self.mem.const(values, dtype, key)

    def scratch(self, words: int) -> int:
        return self.mem.scratch(words)

    def operand(self, a) -> int:
        """Element offset of an operand: a tensor's, or a weight's values as a constant."""
        if isinstance(a, WeightRef):
            return self.const(self.weights[a.name].dense(), key=("w", a.name))
        return self.off(a)

    def weight_chunks(self, w, n_rows: int, row_bytes: int | None = None):
        return weight_chunks(w, n_rows, self.ctx.max_binding, self.ctx.storage_align, row_bytes)

    def need_contiguous(self, node, *tensors) -> None:
        for t in tensors:
            if t is not None and isinstance(t, Tensor) and not self.contiguous(t):
                raise ShapeError(f"backend 'vulkan': {node.op} got a row-strided view {t!r}")


__all__ = ["LOWERERS", "Dispatch", "Lowering"]
