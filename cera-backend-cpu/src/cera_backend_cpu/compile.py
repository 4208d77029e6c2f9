"""The CPU backend's compiler: a graph becomes a C execution plan over one arena.

The core has planned the graph (`cera.graph.planning`): which tensors are views of others,
which nodes run together as one step (products of one input with their glu or residual
epilogue), and where each buffer sits in an arena (buffers whose lives do not overlap
share memory). Here every step becomes one op of a C plan (csrc/plan.c), through its op's
lowerer (`cera_backend_cpu.lowering`), with resolved pointers: into the arena, into the input buffers this executable owns, into the weights.
A run copies its inputs into those buffers and makes one C call, the GIL released; the
state's arrays come in a table of pointers per run, so one executable serves every state
of the same shape (all sessions of a loaded model).

Ops without a C kernel here run on the host between C segments ("host ops": the op
table's numpy reference on views of the arena), which is correct but slow; the decode
graphs of the dense families are one C segment. ``eager=True`` runs each step as its own
segment, unfused (CERA_CPU_PLANS=0): the same kernels op by op, for debugging.
"""

from __future__ import annotations

import threading

import numpy as np

from cera.backend import Executable, StepInputs
from cera.errors import CeraError, SessionError, ShapeError
from cera.graph.builder import Graph, Tensor, WeightRef
from cera.graph.ops import OPS, RunContext
from cera.graph.planning import ALIGN, Step, arena_layout, is_view, placements, plan_steps
from cera.state import KV_CODES, HostState, shape_key

from ._native import ffi, lib
from .fusion import fuse_gated_convs
from .lowering import C_OPS, lower, takes
from .turboquant import register_state


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


class StateTable:
    """The pointers of a HostState's arrays, in the order compiled plans index them:
    entry 0 the cell positions, then per declaration its arrays (kv: keys, values; conv:
    the carried inputs; ssm: the recurrent state; cross: below)."""

    def __init__(self, state: HostState):
        arrays = [state.pos]
        self.index: dict[int, tuple[int, ...]] = {}
        for i, d in enumerate(state.decls):
            if d.kind == "kv":  # keys, values (and the keys' offset, kept by TurboQuant caches)
                m = state.key_offset(i) if hasattr(state, "key_offset") else None
                self.index[i] = (len(arrays), len(arrays) + 1) + ((len(arrays) + 2,) if m is not None else ())
                arrays += [state.k[i], state.v[i]] + ([m] if m is not None else [])
            elif d.kind in ("conv", "ssm"):
                self.index[i] = (len(arrays),)
                arrays.append(state.conv_state[i] if d.kind == "conv" else state.ssm_state[i])
            elif d.kind == "cross":  # memory keys, values, rows stored per slot
                self.index[i] = (len(arrays), len(arrays) + 1, len(arrays) + 2)
                arrays += [state.cross_k[i], state.cross_v[i], state.cross_len[i]]
        self.arrays = arrays  # kept alive with the table
        self.c = ffi.new("void *[]", [ffi.cast("void *", address(a)) for a in arrays] or [ffi.NULL])


def state_table(state: HostState) -> StateTable:
    """The state's pointer table, made on first use and kept on the state."""
    table = getattr(state, "_cpu_table", None)
    if table is None:
        table = state._cpu_table = StateTable(state)
    return table


class CpuExecutable(Executable):
    """A graph compiled for the CPU; see the module docstring."""

    def __init__(self, backend, graph: Graph, weights: dict, state, eager: bool = False):
        self.backend = backend
        self.graph = graph
        self.weights = weights
        self.geometry = shape_key(state)
        self.kv_f16 = getattr(state, "kv_type", "f16") == "f16"
        self.kv_code = KV_CODES.get(getattr(state, "kv_type", "f16"), 1)
        if state is not None:
            register_state(state)
        self.acc_f16 = bool(backend.attention_f16_accumulator)
        self.per_row = graph.layout.row_mode
        self._lock = threading.Lock()
        self._keep: list = []  # objects the C plan points into

        self.place = placements(graph)
        # an adapted product is one step where its LoRA terms keep the one-row arithmetic
        # (csrc/matmul.c); prompts keep the separate products, with their many-row kernels
        one_row = self.per_row == 1 or graph.layout.n_tokens == 1
        steps = plan_steps(graph, fuse=not eager, adapters=one_row and backend.lora_steps)
        if not eager:
            steps = fuse_gated_convs(graph, steps, self.place)
        self.offsets, size = arena_layout(graph, steps, self.place)
        raw = np.zeros(size + ALIGN, np.uint8)
        skip = -address(raw) % ALIGN
        self._arena_raw = raw
        self.arena = raw[skip : skip + size]
        self.base = address(self.arena)
        self.input_buffers = {
            name: np.zeros(t.shape, np.int32 if t.dtype == "i32" else np.float32) for name, t in graph.inputs.items()
        }
        self.input_ids = {t.id: name for name, t in graph.inputs.items()}
        n_seq = graph.layout.n_seq
        self.slots = np.zeros(n_seq, np.int32)
        self.starts = np.zeros(n_seq, np.int32)
        self._slots_p = ffi.from_buffer("int32_t[]", self.slots)
        self._starts_p = ffi.from_buffer("int32_t[]", self.starts)
        self._template = state  # its geometry and table layout (StateTable indices are per spec)
        self.table_index = StateTable(state).index if state is not None else {}

        self.segments: list = []  # ("c", plan) or ("host", step)
        plan = None
        for step in steps:
            if not eager and takes(self, step):
                if plan is None:
                    plan = self._new_plan()
                    self.segments.append(("c", plan))
                lower(self, plan, step)
            elif takes(self, step):
                p = self._new_plan()
                lower(self, p, step)
                self.segments.append(("c", p))
            else:
                plan = None
                self.segments.append(("host", step))
        self.outputs = {name: self.view(t) for name, t in graph.outputs.items()}

    # -- memory ------------------------------------------------------------------------------

    def _addr(self, t: Tensor) -> int:
        p = self.place[t.id]
        name = self.input_ids.get(p.root)
        if name is not None:
            return address(self.input_buffers[name]) + p.offset
        return self.base + self.offsets[p.root] + p.offset

    def ptr(self, t: Tensor | None, ctype: str = "float *"):
        if t is None:
            return ffi.NULL
        return ffi.cast(ctype, self._addr(t))

    def view(self, t: Tensor) -> np.ndarray:
        """A numpy view of tensor t's values (strided for a slice view)."""
        dtype = np.int32 if t.dtype == "i32" else np.float32
        p = self.place[t.id]
        shape = t.shape
        if not shape:
            shape = (1,)
        addr = self._addr(t)
        owner = self.input_buffers[self.input_ids[p.root]] if p.root in self.input_ids else self.arena
        start = addr - address(owner)
        last = shape[-1]
        rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
        if rows > 1 and p.row_stride != last:
            flat = np.frombuffer(owner, dtype=dtype, count=(rows - 1) * p.row_stride + last, offset=start)
            v = np.lib.stride_tricks.as_strided(flat, (rows, last), (p.row_stride * 4, 4))
            return v.reshape(shape) if len(shape) == 2 else v
        return np.frombuffer(owner, dtype=dtype, count=int(np.prod(shape)), offset=start).reshape(shape)

    def dense(self, w) -> object:
        """A pointer to a weight's float32 values (small tensors: norms, biases)."""
        d = self.weights[w.name].dense()
        self._keep.append(d)
        return ffi.from_buffer("float[]", d)

    def operand(self, a):
        if a is None:
            return ffi.NULL
        if isinstance(a, WeightRef):
            return self.dense(a)
        return self.ptr(a)

    # -- lowering ------------------------------------------------------------------------------

    def _new_plan(self):
        plan = lib.cera_plan_new(self.backend._ctx)
        if plan == ffi.NULL:
            raise MemoryError("cannot create an execution plan")
        return ffi.gc(plan, lib.cera_plan_free)

    def _contiguous(self, t: Tensor) -> bool:
        p = self.place[t.id]
        return len(t.shape) < 2 or t.shape[-1] == p.row_stride or np.prod(t.shape[:-1]) == 1

    def _broadcast_weight(self, a: Tensor, b: WeightRef):
        """A weight operand that broadcasts over all but the first axis of ``a`` (Mamba-2's
        D per head, its norm weights per group), spelled out as one row of a's trailing
        size; None if it does not broadcast so."""
        if a.ndim < 2 or not self._contiguous(a):
            return None
        try:
            row = np.broadcast_to(self.weights[b.name].dense().reshape(b.numpy_shape), tuple(a.shape[1:]))
        except ValueError:
            return None
        return np.ascontiguousarray(row, np.float32).ravel()

    def _seq_rows(self):
        """The batch's (first row, rows) per sequence, as C wants them (kept alive)."""
        rows = np.array([x for g in self.graph.layout.groups for x in g], np.int64)
        self._keep.append(rows)
        return ffi.from_buffer("int64_t[]", rows)

    # -- running ----------------------------------------------------------------------------------

    def run(self, state, inputs: StepInputs) -> dict[str, np.ndarray]:
        g = shape_key(state)
        if g is not self.geometry and g != self.geometry:
            raise SessionError("this compiled graph was made for a state of another shape (context, slots or cache type)")
        with self._lock:
            self.input_buffers["tokens"][...] = inputs.tokens  # (item assignment: numpy's unsafe casting)
            self.input_buffers["positions"][...] = inputs.positions
            for name, value in inputs.extra.items():
                if name not in self.input_buffers:
                    raise ShapeError(f"the graph has no input {name!r}")
                np.copyto(self.input_buffers[name], value, casting="unsafe")
            self.slots[:] = inputs.slots
            self.starts[:] = inputs.starts
            table = state_table(state).c if state is not None else ffi.NULL
            for kind, seg in self.segments:
                if kind == "c":
                    rc = lib.cera_plan_run(seg, table)
                    if rc != 0:
                        raise _run_error(rc, inputs)
                else:
                    self._host(seg, state, inputs)
            out = {}
            for name, v in self.outputs.items():
                out[name] = v.copy()
            return out

    def _host(self, step: Step, state, inputs: StepInputs) -> None:
        """A step without a C kernel: the op table's reference on views of the arena."""
        ctx = RunContext(
            positions=self.input_buffers["positions"],
            groups=self.graph.layout.groups,
            slots=self.slots,
            starts=self.starts,
            state=state,
            kv_f16=self.kv_f16,
        )
        for node in step.all_nodes:
            if node.op == "moe":  # the backend's own: routing in numpy, expert products in C
                x, router, gate, up, down, bias = node.args
                w = self.weights
                result = self.backend.moe(
                    self.view(x), w[router.name], w[gate.name], w[up.name], w[down.name],
                    selection_bias=None if bias is None else w[bias.name], **node.attrs,
                )  # fmt: skip
                self.view(node.out)[...] = result
                continue
            args = []
            for a in node.args:
                if isinstance(a, Tensor):
                    args.append(self.view(a))
                elif isinstance(a, WeightRef):
                    args.append(self.weights[a.name].dense())
                else:
                    args.append(a)
            result = OPS[node.op].reference(ctx, *args, **node.attrs)
            if node.out.size:
                self.view(node.out)[...] = np.asarray(result).reshape(node.out.shape)

    def profile(self) -> list[tuple[str, int]]:
        """(op name, accumulated ns) per C op since profiling was switched on."""
        out = []
        for kind, seg in self.segments:
            if kind != "c":
                continue
            n = lib.cera_plan_size(seg)
            ns = ffi.new("int64_t[]", n)
            names = ffi.new("const char *[]", n)
            lib.cera_plan_profile(seg, ns, names)
            out += [(ffi.string(names[i]).decode(), int(ns[i])) for i in range(n)]
        return out

    def set_profiling(self, on: bool) -> None:
        for kind, seg in self.segments:
            if kind == "c":
                lib.cera_plan_set_profiling(seg, int(on))

    @property
    def n_c_segments(self) -> int:
        return sum(1 for kind, _ in self.segments if kind == "c")


def _run_error(rc: int, inputs: StepInputs) -> CeraError:
    if rc == -1:
        return ShapeError(
            f"a token id of {np.asarray(inputs.tokens).tolist()[:8]} is outside the embedding table, "
            f"or a sequence slot of {np.asarray(inputs.slots).tolist()} outside the state"
        )
    if rc == -2:
        from cera.errors import ResourceExhausted

        return ResourceExhausted("the CPU backend ran out of memory during a forward pass")
    return CeraError(f"the CPU backend's execution plan failed with error {rc}")


__all__ = ["C_OPS", "CpuExecutable", "StateTable", "is_view"]
