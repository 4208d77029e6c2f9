"""Which recorded ops of a plan run together as one C op.

A decode step hands each matrix product to the thread pool; each hand-over costs a
wake-up and a wait, and on a busy machine a wait for a worker the OS has not scheduled.
Products of the same input are frequent (Q/K/V, gate/up) and are followed by cheap
elementwise work on their rows (the glu of gate and up, a residual add), so a plan runs:

- consecutive products of one input as one pool job, the input quantized once;
- a glu whose gate and up are the two products of such a job in that job, row chunk by
  row chunk (the rows of gate and up are done together);
- a residual add of a product's output in the job of that product.

Each element is computed by the same code as in the separate ops (csrc/matmul.c), so a
fused plan gives the same bits as the ops one by one. Fusion only joins ops that follow
each other in the recording, so no other op sees a state in between.

Recorded argument tuples (see plan.Recorder and the cera_<op> signatures):
matmul (wtype, w, w_row_bytes, K, N, x, x_stride, M, y, y_stride, bias);
glu (code, gate, up, y, n); binary (code, a, b, b_stride, y, rows, n).
"""

from __future__ import annotations

import attrs

MAX_PRODUCTS = 8  # CERA_MAX_PRODUCTS in csrc/internal.h


@attrs.frozen
class Step:
    """One C op of a plan: recorded ops ``ops`` (indices), fused when there are several.

    ``glu``: index of a glu run as the epilogue of a gate/up pair; ``residual``: (op index
    of the add, member whose output it adds to, the add's other operand)."""

    ops: tuple[int, ...]
    glu: int | None = None
    residual: tuple[int, int, tuple] | None = None

    @property
    def is_products(self) -> bool:
        return len(self.ops) > 1 or self.glu is not None or self.residual is not None


def _shared_input(args) -> tuple:
    _, _, _, K, _, x, x_stride, M, _, _, _ = args
    return (x, x_stride, K, M)


def plan_steps(ops: tuple) -> list[Step]:
    """Group the recorded ops (name, args) into the plan's C ops."""
    steps: list[Step] = []
    i = 0
    while i < len(ops):
        name, args = ops[i]
        if name != "matmul":
            steps.append(Step((i,)))
            i += 1
            continue
        group = [i]
        j = i + 1
        while j < len(ops) and ops[j][0] == "matmul" and len(group) < MAX_PRODUCTS:
            if _shared_input(ops[j][1]) != _shared_input(args):
                break
            group.append(j)
            j += 1
        step = Step(tuple(group))
        if j < len(ops):
            step = _with_epilogue(step, ops, j) or step
            if step.glu is not None or step.residual is not None:
                j += 1
        steps.append(step)
        i = j
    return steps


def _with_epilogue(step: Step, ops: tuple, j: int) -> Step | None:
    """The group ``step`` with op j as its epilogue, if op j can be one. (Recorded scalars
    are ("value", v) pairs, tensors ("buf", index, offset) and the like.)"""
    name, args = ops[j]
    members = [ops[i][1] for i in step.ops]
    M = members[0][7][1]
    sizes = [m[4][1] for m in members]  # N
    outputs = [m[8] for m in members]
    if any(m[9][1] != n for m, n in zip(members, sizes, strict=True)):  # rows of y not contiguous
        return None
    if name == "glu" and len(members) == 2:
        _, gate, up, _, n = args
        if gate == outputs[0] and up == outputs[1] and sizes[0] == sizes[1] and n[1] == M * sizes[0]:
            return attrs.evolve(step, glu=j)
    if name == "binary":
        code, a, b, _, _, rows, n = args
        if code[1] != 0 or rows[1] != 1:  # an add of two tensors of one shape
            return None
        for k, (y, size) in enumerate(zip(outputs, sizes, strict=True)):
            other = b if a == y else a if b == y else None
            if other is not None and other not in outputs and n[1] == M * size:
                return attrs.evolve(step, residual=(j, k, other))
    return None
