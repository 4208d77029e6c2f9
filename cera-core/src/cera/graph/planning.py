"""What every backend's compiler needs from a graph: views, steps, and a memory plan.

- `placements`: where each tensor's values live. Views (`reshape`, `slice`, a `rows`
  of consecutive rows) share their source's storage at an offset; everything else owns
  a buffer.
- `plan_steps`: the graph's compute nodes grouped into the steps a backend launches.
  Generic fusion joins what the backends can run as one job: consecutive products of one
  input (Q/K/V, gate/up: the input is prepared once), a glu whose gate and up are the
  two products of such a group, and a residual add of a product's output. Fusion joins
  only nodes that follow each other, so no other op sees a state in between, and each
  element is computed as by the separate ops. With ``adapters``, a product with LoRA
  terms (`cera.graph.builder.AdaptedProduct`) is one member whose output is the terms'
  sum, so an adapted Q/K/V or gate/up keeps its grouping and epilogues; the backend's
  kernel then adds the terms (for backends that compute ``B(A x)`` with the one-row
  arithmetic of the separate products).
- `arena_layout`: byte offsets of the owned buffers in one arena; buffers whose lives do
  not overlap share memory, which keeps a step's working set small enough to stay in the
  caches.
"""

from __future__ import annotations

import attrs

from .builder import AdaptedProduct, Graph, Node, Tensor
from .ops import OPS

ALIGN = 64  # arena offsets: cache-line aligned, as SIMD loads prefer
MAX_PRODUCTS = 8


@attrs.frozen
class Placement:
    """Where a tensor lives: in the storage of tensor ``root`` (itself when it owns a
    buffer), ``offset`` bytes in, with rows of its last dimension ``row_stride``
    elements apart."""

    root: int
    offset: int
    row_stride: int


def is_view(node: Node) -> bool:
    """Whether the node's output is a view of its first argument (the op table says when)."""
    return OPS[node.op].is_view(node.args, node.attrs)


def placements(graph: Graph) -> dict[int, Placement]:
    out: dict[int, Placement] = {}
    for t in graph.inputs.values():
        out[t.id] = Placement(t.id, 0, t.shape[-1] if t.shape else 1)
    for node in graph.nodes:
        t = node.out
        if not is_view(node):
            out[t.id] = Placement(t.id, 0, t.shape[-1] if t.shape else 1)
            continue
        src = node.args[0]
        p = out[src.id]
        if node.op == "reshape":
            out[t.id] = Placement(p.root, p.offset, t.shape[-1] if t.shape else 1)
        elif node.op == "slice":
            out[t.id] = Placement(p.root, p.offset + 4 * node.attrs["start"], p.row_stride)
        else:  # rows: a run of consecutive rows
            row_elems = src.size // src.shape[0] if src.shape[0] else 0
            out[t.id] = Placement(p.root, p.offset + 4 * row_elems * node.attrs["index"][0], p.row_stride)
    return out


@attrs.frozen
class Step:
    """One launch: ``nodes`` (one node, or a group of products of one input), with
    ``glu`` (a glu node run on the group's two outputs) and ``residual`` ((the add node,
    the member whose output it adds to, the add's other operand)) as epilogues;
    ``adapters``: per member, its `AdaptedProduct` (its LoRA terms and bias, added before
    the epilogues) or None, or None for a step without any."""

    nodes: tuple[Node, ...]
    glu: Node | None = None
    residual: tuple[Node, int, Tensor] | None = None
    adapters: tuple[AdaptedProduct | None, ...] | None = None

    @property
    def is_products(self) -> bool:
        return self.nodes[0].op == "linear"

    @property
    def outs(self) -> tuple[Tensor, ...]:
        """Each member's result: its product's output, or with LoRA terms their sum's."""
        if self.adapters is None:
            return tuple(n.out for n in self.nodes)
        return tuple(n.out if a is None else a.out for n, a in zip(self.nodes, self.adapters, strict=True))

    @property
    def all_nodes(self) -> tuple[Node, ...]:
        terms = tuple(n for a in self.adapters or () if a is not None for n in a.nodes)
        extra = tuple(n for n in (self.glu, self.residual[0] if self.residual else None) if n is not None)
        return self.nodes + terms + extra


def plan_steps(graph: Graph, fuse: bool = True, max_products: int = MAX_PRODUCTS, adapters: bool = False) -> list[Step]:
    """The compute nodes of ``graph`` (views excluded) as steps, fused when ``fuse``; with
    ``adapters`` too, each adapted product is one member (see the module docstring)."""
    compute = [n for n in graph.nodes if not is_view(n)]
    adapted: dict[int, AdaptedProduct] = {}
    if fuse and adapters and graph.adapted:
        inner = set()
        for a in graph.adapted:
            adapted[id(a.base)] = a
            inner.update(id(n) for n in a.nodes)
        compute = [n for n in compute if id(n) not in inner]
    steps: list[Step] = []
    i = 0
    while i < len(compute):
        node = compute[i]
        if not fuse or node.op != "linear":
            steps.append(Step((node,)))
            i += 1
            continue
        group = [node]
        j = i + 1
        while j < len(compute) and compute[j].op == "linear" and len(group) < max_products:
            if compute[j].args[0] is not node.args[0]:
                break
            group.append(compute[j])
            j += 1
        step = Step(tuple(group))
        if adapted and any(id(m) in adapted for m in group):
            step = attrs.evolve(step, adapters=tuple(adapted.get(id(m)) for m in group))
        if j < len(compute):
            fused = _with_epilogue(step, compute[j])
            if fused is not None:
                step = fused
                j += 1
        steps.append(step)
        i = j
    return steps


def _with_epilogue(step: Step, node: Node) -> Step | None:
    outs = list(step.outs)
    if node.op == "glu" and len(outs) == 2:
        gate, up = node.args
        if gate is outs[0] and up is outs[1] and gate.shape == up.shape:
            return attrs.evolve(step, glu=node)
    if node.op == "add":
        a, b = node.args
        if not isinstance(b, Tensor) or a.shape != b.shape or not a.contiguous or not b.contiguous:
            return None
        for k, y in enumerate(outs):
            other = b if a is y else a if b is y else None
            if other is not None and other not in outs:
                return attrs.evolve(step, residual=(node, k, other))
    return None


def arena_layout(graph: Graph, steps: list[Step], place: dict[int, Placement]) -> tuple[dict[int, int], int]:
    """Byte offsets of the owned buffers (by root tensor id) and the arena's size.

    A buffer lives from the first step that names it (or a view of it) to the last; the
    graph's outputs to the end. Within one step all named buffers are live at once, so a
    step (fused or not) never writes over its own inputs."""
    inputs = {t.id for t in graph.inputs.values()}
    sizes: dict[int, int] = {}
    for node in graph.nodes:
        if not is_view(node):
            sizes[node.out.id] = node.out.nbytes
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for s, step in enumerate(steps):
        for node in step.all_nodes:
            for t in [*node.tensors, node.out]:
                root = place[t.id].root
                if root in inputs:
                    continue
                first.setdefault(root, s)
                last[root] = s
    for t in graph.outputs.values():
        root = place[t.id].root
        if root in inputs:
            continue
        first.setdefault(root, len(steps))
        last[root] = len(steps)
    starting: dict[int, list[int]] = {}
    ending: dict[int, list[int]] = {}
    for b, i in first.items():
        starting.setdefault(i, []).append(b)
    for b, i in last.items():
        ending.setdefault(i, []).append(b)
    offsets: dict[int, int] = {}
    free: list[tuple[int, int]] = []  # (offset, size) holes, sorted by offset
    top = 0
    for i in range(len(steps) + 1):
        for b in sorted(starting.get(i, ())):
            size = max(ALIGN, -(-sizes[b] // ALIGN) * ALIGN)
            for j, (off, hole) in enumerate(free):  # first fit
                if hole >= size:
                    offsets[b] = off
                    free[j : j + 1] = [(off + size, hole - size)] if hole > size else []
                    break
            else:
                offsets[b] = top
                top += size
        for b in ending.get(i, ()):
            size = max(ALIGN, -(-sizes[b] // ALIGN) * ALIGN)
            free.append((offsets[b], size))
            free.sort()
            merged: list[tuple[int, int]] = []
            for off, hole in free:  # coalesce neighbours
                if merged and merged[-1][0] + merged[-1][1] == off:
                    merged[-1] = (merged[-1][0], merged[-1][1] + hole)
                else:
                    merged.append((off, hole))
            free = merged
    return offsets, max(top, ALIGN)


__all__ = ["ALIGN", "Placement", "Step", "arena_layout", "is_view", "placements", "plan_steps"]
