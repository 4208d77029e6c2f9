"""Record-and-replay of decode steps: a model's forward pass as one C call.

A decode step of a small model is a few hundred ops; calling each from Python (argument
checks, an output allocation, a cffi call) costs microseconds apiece, as much as some of
the kernels take. So `CpuBackend.execute` runs the family's plain ``forward`` with a
`Recorder` attached: every op still computes eagerly (the pass returns correct logits),
and also logs itself with its tensors as symbolic references (which op output, at which
byte offset) instead of pointers. From the log, `Plan` lays every intermediate tensor
out in one arena it owns (tensors whose lives do not overlap share memory) and appends
the ops, with arena pointers, to a C plan (csrc/plan.c). Later steps copy their token id
and position into the plan's input buffers and replay it with one call, the GIL released.

What a plan may depend on: a forward's ops and their non-tensor arguments must depend
only on the model, the state's configuration, the number of tokens and the output mode;
per-token values reach the ops only through the token ids and positions handed to
``forward`` (the `cera.backend.Backend.execute` contract). Two guards back this up:

- a recording fails (and that model/state pair stays eager, always correct) when an op
  gets a tensor the recording cannot place: an array made outside the backend's ops
  (numpy math in the family, a reshape that copied), ids or positions other than the
  step's own, or an op that has no plan form (moe, conv1d_causal);
- the plan is built only after two steps recorded the same ops with the same arguments,
  so a forward that branches on the position shows up as a mismatch.

The cells a step writes in the KV cache are the one thing that changes between steps;
the attention ops read them from the run's ``kv_start``, which the state supplies.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from ._native import ffi, lib
from .fusion import Step, plan_steps

ALIGN = 64  # arena offsets: cache-line aligned, as the kernels' loads prefer


class Unrecordable(Exception):
    """This forward pass cannot be replayed from a plan; the message says why."""


class Input:
    """An int32 argument that must be the step's token ids or positions ("tokens" or
    "positions"): eager calls pass the array, plans their own input buffer."""

    __slots__ = ("name", "array")

    def __init__(self, name: str, array: np.ndarray):
        self.name = name
        self.array = array


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _pointer_value(p) -> int:
    return int(ffi.cast("uintptr_t", p))


class Recorder:
    """Logs one forward pass's ops symbolically while they run eagerly.

    Tensor arguments become ``("buf", index, byte_offset)`` for op outputs (buffers are
    numbered in allocation order), ``("const", address)`` for weights and cache memory,
    ``("input", name)`` for token ids and positions. Buffers stay referenced until
    `finish`, so no address is reused while the pass runs."""

    def __init__(self, tokens: np.ndarray, positions: np.ndarray):
        self.inputs = {"tokens": tokens, "positions": positions}
        self.buffers: list[np.ndarray] = []
        self._starts: list[tuple[int, int]] = []  # (address, index), sorted
        self.constants: dict[int, Any] = {}  # address -> object keeping it alive (for the log only)
        self.ops: list[tuple] = []
        self.output: tuple | None = None  # (ref, shape) of the tensor to_numpy read
        self.output_copy: np.ndarray | None = None
        self.failure: str | None = None

    # -- called by the backend's ops --------------------------------------------------------

    def new(self, shape) -> np.ndarray:
        a = np.empty(shape, np.float32)
        if a.nbytes:
            bisect.insort(self._starts, (address(a), len(self.buffers)))
        self.buffers.append(a)
        return a

    def constant(self, a: np.ndarray) -> None:
        """Mark an array as constant for the plan's life (a weight's dense values)."""
        self.constants[address(a)] = a

    def fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason

    def record(self, name: str, args: tuple) -> None:
        if self.failure is not None:
            return
        try:
            self.ops.append((name, tuple(self._arg(a) for a in args)))
        except Unrecordable as e:
            self.fail(f"{name}: {e}")

    def set_output(self, x, copy: np.ndarray) -> None:
        if self.output is not None:
            self.fail("to_numpy was called more than once (a forward may read back only its result)")
            return
        try:
            self.output = (self._tensor(x), tuple(copy.shape))
        except Unrecordable as e:
            self.fail(f"to_numpy: {e}")
        self.output_copy = copy

    # -- symbolic arguments -----------------------------------------------------------------

    def _arg(self, a):
        if isinstance(a, np.ndarray):
            return self._tensor(a)
        if isinstance(a, Input):
            want = self.inputs[a.name]
            if a.array is not want and not np.array_equal(a.array, want):
                raise Unrecordable(f"got {a.name} other than the step's own")
            return ("input", a.name)
        if isinstance(a, ffi.CData):
            return ("const", _pointer_value(a))
        if isinstance(a, (bool, int, float)):
            return ("value", a)
        raise Unrecordable(f"an argument of type {type(a).__name__}")

    def _tensor(self, a: np.ndarray) -> tuple:
        addr = address(a)
        i = bisect.bisect_right(self._starts, (addr, len(self.buffers))) - 1
        if i >= 0:
            start, index = self._starts[i]
            if addr + a.nbytes <= start + self.buffers[index].nbytes:
                return ("buf", index, addr - start)
        if addr in self.constants:
            return ("const", addr)
        raise Unrecordable(
            "a tensor that no op of this pass produced (numpy math or a copying reshape in the forward pass)"
        )

    # -- the result -------------------------------------------------------------------------

    def finish(self, result) -> Recording:
        """The log of the pass; raises Unrecordable if the pass cannot be replayed."""
        if self.failure is None and result is not None and result is not self.output_copy:
            self.failure = "the forward pass returned something other than its to_numpy result"
        if self.failure is None and result is None and self.output is not None:
            self.failure = "the forward pass read a tensor back but returned nothing"
        if self.failure is not None:
            raise Unrecordable(self.failure)
        sizes = tuple(b.nbytes for b in self.buffers)
        return Recording(tuple(self.ops), sizes, self.output)


class Recording:
    """One recorded pass: ops with symbolic arguments, buffer sizes, the output."""

    __slots__ = ("ops", "sizes", "output")

    def __init__(self, ops: tuple, sizes: tuple, output: tuple | None):
        self.ops = ops
        self.sizes = sizes
        self.output = output

    def same_as(self, other: Recording) -> bool:
        return self.ops == other.ops and self.sizes == other.sizes and self.output == other.output


def arena_layout(recording: Recording, steps: list[Step]) -> tuple[list[int | None], int]:
    """Byte offsets of the buffers in one arena, and its size.

    A buffer lives from the first step (C op) that names it to the last (the output to
    the end); buffers whose lives do not overlap share memory, which keeps a step's
    working set small enough to stay in the caches. Within one step all named buffers
    are live at once, so a step (fused or not) never writes over its own inputs."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for s, step in enumerate(steps):
        for i in (
            step.ops + ((step.glu,) if step.glu is not None else ()) + ((step.residual[0],) if step.residual else ())
        ):
            for a in recording.ops[i][1]:
                if a[0] == "buf":
                    first.setdefault(a[1], s)
                    last[a[1]] = s
    if recording.output is not None:
        out = recording.output[0][1]
        first.setdefault(out, len(steps))
        last[out] = len(steps)
    starting: dict[int, list[int]] = {}
    ending: dict[int, list[int]] = {}
    for b, i in first.items():
        starting.setdefault(i, []).append(b)
    for b, i in last.items():
        ending.setdefault(i, []).append(b)
    offsets: list[int | None] = [None] * len(recording.sizes)
    free: list[tuple[int, int]] = []  # (offset, size) holes, sorted by offset
    top = 0
    for i in range(len(steps) + 1):
        for b in sorted(starting.get(i, ())):
            size = -(-recording.sizes[b] // ALIGN) * ALIGN
            for j, (off, hole) in enumerate(free):  # first fit
                if hole >= size:
                    offsets[b] = off
                    free[j : j + 1] = [(off + size, hole - size)] if hole > size else []
                    break
            else:
                offsets[b] = top
                top += size
        for b in ending.get(i, ()):
            size = -(-recording.sizes[b] // ALIGN) * ALIGN
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


class Plan:
    """A recorded pass built into a C plan over one arena; `run` replays it."""

    def __init__(self, backend, recording: Recording, n_tokens: int):
        self.backend = backend  # the C plan points at the backend's context
        steps = plan_steps(recording.ops)
        offsets, size = arena_layout(recording, steps)
        self._arena_raw = np.zeros(size + ALIGN, np.uint8)
        skip = -address(self._arena_raw) % ALIGN
        self.arena = self._arena_raw[skip : skip + size]
        base = address(self.arena)
        self.tokens = np.zeros(n_tokens, np.int32)
        self.positions = np.zeros(n_tokens, np.int32)
        inputs = {
            "tokens": ffi.from_buffer("int32_t[]", self.tokens),
            "positions": ffi.from_buffer("int32_t[]", self.positions),
        }
        plan = lib.cera_plan_new(backend._ctx, inputs["tokens"], inputs["positions"], n_tokens)
        if plan == ffi.NULL:
            raise MemoryError("cannot create an execution plan")
        self._c = ffi.gc(plan, lib.cera_plan_free)
        self._inputs = inputs

        def resolve(a):
            kind = a[0]
            if kind == "buf":
                return ffi.cast("void *", base + offsets[a[1]] + a[2])
            if kind == "const":
                return ffi.cast("void *", a[1])
            if kind == "input":
                return inputs[a[1]]
            return a[1]

        for step in steps:
            if step.is_products:
                name, rc = "products", self._add_products(recording.ops, step, resolve)
            else:
                name, args = recording.ops[step.ops[0]]
                rc = getattr(lib, "cera_plan_" + name)(self._c, *[resolve(a) for a in args])
            if rc != 0:
                raise Unrecordable(f"{name}: the C plan refused the op (error {rc})")
        self.n_ops = lib.cera_plan_size(self._c)
        self.output = None
        if recording.output is not None:
            (_, index, offset), shape = recording.output
            start = offsets[index] + offset
            count = int(np.prod(shape))
            self.output = self.arena[start : start + 4 * count].view(np.float32).reshape(shape)

    def _add_products(self, ops: tuple, step: Step, resolve) -> int:
        """A fused group of products (fusion.py) as one C op."""
        members = ffi.new("cera_product[]", len(step.ops))
        for m, i in zip(members, step.ops, strict=True):
            wtype, w, w_row_bytes, _, N, _, _, _, y, y_stride, bias = ops[i][1]
            m.wtype, m.w, m.w_row_bytes, m.N = wtype[1], resolve(w), w_row_bytes[1], N[1]
            m.y, m.y_stride, m.bias = resolve(y), y_stride[1], resolve(bias)
        if step.residual is not None:
            add, k, other = step.residual
            members[k].residual = resolve(other)
            members[k].out = resolve(ops[add][1][4])
        glu_op, glu_out, glu_stride = -1, ffi.NULL, 0
        if step.glu is not None:
            code, _, _, y, _ = ops[step.glu][1]
            glu_op, glu_out, glu_stride = code[1], resolve(y), members[0].N
        _, _, _, K, _, x, x_stride, M, _, _, _ = ops[step.ops[0]][1]
        return lib.cera_plan_products(
            self._c, resolve(x), x_stride[1], K[1], M[1], members, len(step.ops), glu_op, glu_out, glu_stride
        )

    def run(self, tokens: np.ndarray, positions: np.ndarray, kv_start: int) -> np.ndarray | None:
        tokens = np.ascontiguousarray(tokens, dtype=np.int32)
        positions = np.ascontiguousarray(positions, dtype=np.int32)
        rc = lib.cera_plan_run(
            self._c, ffi.from_buffer("int32_t[]", tokens), ffi.from_buffer("int32_t[]", positions), kv_start
        )
        if rc != 0:
            raise _run_error(rc, tokens)
        return None if self.output is None else self.output.copy()

    def profile(self) -> list[tuple[str, int]]:
        """(op name, accumulated ns) per op since profiling was switched on."""
        n = self.n_ops
        ns = ffi.new("int64_t[]", n)
        names = ffi.new("const char *[]", n)
        lib.cera_plan_profile(self._c, ns, names)
        return [(ffi.string(names[i]).decode(), int(ns[i])) for i in range(n)]

    def set_profiling(self, on: bool) -> None:
        lib.cera_plan_set_profiling(self._c, int(on))


def _run_error(rc: int, tokens: np.ndarray) -> Exception:
    from .backend import ShapeError

    if rc == -1:
        return ShapeError(f"token ids {tokens.tolist()[:8]} include one outside the embedding table")
    if rc == -2:
        return MemoryError("execution plan: out of memory")
    return RuntimeError(f"execution plan failed with error {rc}")


# -- the backend's execute(): choosing between a plan and the eager pass --------------------


class _Pending:
    """The first recording of a (model, state, shape) pass, waiting for a second one."""

    __slots__ = ("recording",)

    def __init__(self, recording: Recording):
        self.recording = recording


def execute(backend, model, state, tokens: np.ndarray, positions: np.ndarray, output: str):
    """One forward pass on ``state``: replayed from its plan when there is one, else run
    eagerly while recording. The first two passes of a kind are recorded; if they agree,
    the plan is built and the next pass replays it. A pass that cannot be recorded, or
    two that disagree, leave that kind eager for the state's life (always correct)."""
    key = (model, len(tokens), output, bool(backend.attention_f16_accumulator))
    entry = state.plans.get(key)
    if isinstance(entry, Plan):
        start, _ = state.batch(len(tokens))
        return entry.run(tokens, positions, start)
    if isinstance(entry, str):  # why this kind of pass stays eager
        return model.forward(state, tokens, positions, output)
    rec = Recorder(np.ascontiguousarray(tokens, dtype=np.int32), np.ascontiguousarray(positions, dtype=np.int32))
    backend._tls.recorder = rec
    try:
        result = model.forward(state, tokens, positions, output)
    finally:
        backend._tls.recorder = None
    try:
        recording = rec.finish(result)
        if entry is None:
            state.plans[key] = _Pending(recording)
        elif recording.same_as(entry.recording):
            state.plans[key] = Plan(backend, recording, len(tokens))
        else:
            state.plans[key] = "two steps recorded different ops (the forward pass depends on more than its inputs)"
    except Unrecordable as e:
        state.plans[key] = str(e)
    return result
