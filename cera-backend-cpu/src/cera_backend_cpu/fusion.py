"""Fusions of the CPU backend's own, on top of the generic ones of `cera.graph.planning`.

The gated short convolution (LFM2, `cera.blocks.layers.short_conv`) is built as

    b, c, h = split(in_proj x)          views of the projection's rows
    y = c * conv1d_causal(b * h)        (each operand of a mul first copied when it is a
                                         row-strided view, i.e. for more than one row)

which, op by op, is up to three copies, two elementwise passes and the convolution. Here
the run of steps that makes y (the copies, ``b * h``, the convolution, ``c * conv``)
becomes ONE step that csrc/recurrent.c runs in one pass over the projection's rows: it
reads b, h and c where in_proj wrote them, carries b * h as the state and writes y. Every
element is computed with the same float operations in the same order as by the separate
ops (b * h, the taps summed in order from 0, times c), so the logits do not change.

A fused step is a `Step` whose nodes are (the b * h node, the convolution, the c * conv
node), the two products' arguments replaced by the views they read; `gated_conv` tells
such a step apart and gives its parts.
"""

from __future__ import annotations

import attrs

from cera.graph.builder import Graph, Node, Tensor
from cera.graph.planning import Step


@attrs.frozen
class GatedConv:
    b: Tensor
    h: Tensor
    c: Tensor
    conv: Node
    out: Tensor


def gated_conv(step: Step) -> GatedConv | None:
    """The parts of a fused gated-convolution step; None for any other step."""
    if len(step.nodes) != 3 or step.nodes[1].op != "conv1d_causal" or step.glu or step.residual:
        return None
    m1, conv, m2 = step.nodes
    c = m2.args[0] if m2.args[1] is conv.out else m2.args[1]
    return GatedConv(m1.args[0], m1.args[1], c, conv, m2.out)


def _uses(graph: Graph) -> dict[int, list[Node]]:
    uses: dict[int, list[Node]] = {}
    for node in graph.nodes:
        for t in node.tensors:
            uses.setdefault(t.id, []).append(node)
    for t in graph.outputs.values():
        uses.setdefault(t.id, []).append(None)  # read by the caller
    return uses


def _operand(t: Tensor, uses, place) -> tuple[Tensor, Node | None]:
    """The row view a mul operand stands for: itself, or the source of a copy made only for
    this mul (returned too, to be dropped)."""
    node = t.node
    if node is not None and node.op == "copy" and len(uses.get(t.id, ())) == 1:
        return node.args[0], node
    return t, None


def _row_stride(t: Tensor, place) -> int | None:
    if t.ndim != 2:
        return None
    return place[t.id].row_stride


def fuse_gated_convs(graph: Graph, steps: list[Step], place) -> list[Step]:
    """``steps`` with every gated short convolution made one step (see the module docstring)."""
    uses = _uses(graph)
    index = {id(s.nodes[0]): k for k, s in enumerate(steps) if len(s.nodes) == 1}
    drop: set[int] = set()
    replace: dict[int, Step] = {}
    for k, step in enumerate(steps):
        if len(step.nodes) != 1 or step.nodes[0].op != "conv1d_causal":
            continue
        conv = step.nodes[0]
        x = conv.args[0]
        m1 = x.node
        if m1 is None or m1.op != "mul" or len(uses.get(x.id, ())) != 1:
            continue
        users = uses.get(conv.out.id, ())
        if len(users) != 1 or users[0] is None or users[0].op != "mul":
            continue
        m2 = users[0]
        gate = m2.args[0] if m2.args[1] is conv.out else m2.args[1]
        if not all(isinstance(a, Tensor) and tuple(a.shape) == tuple(x.shape) for a in (*m1.args, gate)):
            continue
        (b, cb), (h, ch), (c, cc) = (_operand(a, uses, place) for a in (*m1.args, gate))
        strides = {_row_stride(a, place) for a in (b, h, c)}
        if len(strides) != 1 or None in strides or next(iter(strides)) < x.shape[-1]:
            continue
        parts = [n for n in (cb, ch, m1, conv, cc, m2) if n is not None]
        ks = [index.get(id(n)) for n in parts]
        if None in ks or sorted(ks) != list(range(min(ks), max(ks) + 1)):
            continue  # only steps that follow each other, so nothing else runs in between
        fused = Step((attrs.evolve(m1, args=(b, h)), conv, attrs.evolve(m2, args=(c, conv.out))))
        replace[max(ks)] = fused
        drop.update(q for q in ks if q != max(ks))
    if not replace:
        return steps
    return [replace.get(k, s) for k, s in enumerate(steps) if k not in drop]
