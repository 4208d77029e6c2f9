"""The CPU backend's compiler: a graph becomes a C execution plan over one arena.

The core has planned the graph (`cera.graph.planning`): which tensors are views of others,
which nodes run together as one step (products of one input with their glu or residual
epilogue), and where each buffer sits in an arena (buffers whose lives do not overlap
share memory). Here every step becomes one op of a C plan (csrc/plan.c) with resolved
pointers: into the arena, into the input buffers this executable owns, into the weights.
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
from cera.state import KV_CODES, HostState

from ._native import ffi, lib

UNARY_CODES = {"silu": 0, "gelu": 1, "gelu_erf": 2, "relu": 3}
GLU_CODES = {"swiglu": 0, "geglu": 1}
C_OPS = frozenset(
    {"embedding", "linear", "rms_norm", "layer_norm", "rope", "attention", "unary", "glu", "add", "mul", "scale",
     "softcap", "copy", "rows", "argmax", "top_k", "take", "conv1d", "attention_full", "cross_attention", "store_cross",
     "conv1d_causal", "ssm_scan", "moe"}
)  # fmt: skip
MOE_GATING_CODES = {"softmax": 0, "sigmoid": 1}
MOE_ACT_CODES = {"silu": 0, "gelu": 1}


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def state_geometry(state) -> tuple:
    """What a compiled graph bakes in about a state: its shape (fixed when the state is
    made), not its contents. Kept per state: every pass checks it."""
    if state is None:
        return ()
    g = getattr(state, "_cpu_geometry", None)
    if g is None:
        caps = tuple((i, a.shape[2]) for i, a in sorted(state.k.items()))
        g = state._cpu_geometry = (state.n_ctx, state.n_slots, state.kv_type, caps)
    return g


class StateTable:
    """The pointers of a HostState's arrays, in the order compiled plans index them:
    entry 0 the cell positions, then per declaration its arrays (kv: keys, values; conv:
    the carried inputs; ssm: the recurrent state; cross: below)."""

    def __init__(self, state: HostState):
        arrays = [state.pos]
        self.index: dict[int, tuple[int, ...]] = {}
        for i, d in enumerate(state.decls):
            if d.kind == "kv":
                self.index[i] = (len(arrays), len(arrays) + 1)
                arrays += [state.k[i], state.v[i]]
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
        self.geometry = state_geometry(state)
        self.kv_f16 = getattr(state, "kv_type", "f16") == "f16"
        self.kv_code = KV_CODES.get(getattr(state, "kv_type", "f16"), 1)
        self.acc_f16 = bool(backend.attention_f16_accumulator)
        self.per_row = graph.layout.row_mode
        self._lock = threading.Lock()
        self._keep: list = []  # objects the C plan points into

        self.place = placements(graph)
        steps = plan_steps(graph, fuse=not eager)
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
            if not eager and step.nodes[0].op in C_OPS and self._c_ready(step):
                if plan is None:
                    plan = self._new_plan()
                    self.segments.append(("c", plan))
                self._lower(plan, step)
            elif step.nodes[0].op in C_OPS and self._c_ready(step):
                p = self._new_plan()
                self._lower(p, step)
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

    def _c_ready(self, step: Step) -> bool:
        """Whether the C kernels take this step as it is (else it runs on the host)."""
        node = step.nodes[0]
        if node.op in ("add", "mul"):
            a, b = node.args
            if isinstance(b, WeightRef):
                if b.shape[0] == a.shape[-1] and int(np.prod(b.shape)) == a.shape[-1]:
                    return True
                return self._broadcast_weight(a, b) is not None
            return tuple(b.shape) == tuple(a.shape) or (b.size == a.shape[-1] and b.shape[-1] == a.shape[-1])
        if node.op in ("rms_norm", "layer_norm"):
            return all(not isinstance(w, Tensor) or (w.size == node.args[0].shape[-1]) for w in node.args[1:])
        if node.op == "rows":
            return True
        for t in node.tensors:
            if node.op not in ("linear", "copy") and not self._contiguous(t):
                return False
        return True

    def _lower(self, plan, step: Step) -> None:
        node = step.nodes[0]
        op = node.op
        out = node.out
        rc = 0
        if step.is_products:
            rc = self._products(plan, step)
        elif op == "embedding":
            table, ids = node.args
            w = self.weights[table.name]
            dim, n_rows = w.shape
            rc = lib.cera_plan_get_rows(
                plan, w.type_id, w.ptr, w.row_bytes, dim, n_rows, self.ptr(ids, "int32_t *"), ids.size, self.ptr(out)
            )
        elif op in ("rms_norm", "layer_norm"):
            x = node.args[0]
            n = x.shape[-1]
            if op == "rms_norm":
                rc = lib.cera_plan_rms_norm(plan, self.ptr(x), x.size // n, n, self.operand(node.args[1]), node.attrs["eps"], self.ptr(out))
            else:
                rc = lib.cera_plan_layer_norm(
                    plan, self.ptr(x), x.size // n, n, self.operand(node.args[1]), self.operand(node.args[2]),
                    node.attrs["eps"], self.ptr(out),
                )  # fmt: skip
        elif op == "rope":
            x, pos = node.args
            spec = node.attrs["spec"]
            n, heads, head_dim = x.shape
            ff = ffi.NULL
            if spec.freq_factors is not None:
                arr = np.asarray(spec.freq_factors, np.float32)
                self._keep.append(arr)
                ff = ffi.from_buffer("float[]", arr)
            rc = lib.cera_plan_rope(
                plan, self.ptr(x), self.ptr(out), n, heads, head_dim, self.ptr(pos, "int32_t *"), spec.n_dims,
                int(spec.neox), spec.base, spec.freq_scale, ff, spec.ext_factor, spec.attn_factor, spec.beta_fast,
                spec.beta_slow, spec.n_ctx_orig,
            )  # fmt: skip
        elif op == "attention":
            rc = self._attention(plan, node)
        elif op == "unary":
            rc = lib.cera_plan_unary(plan, UNARY_CODES[node.attrs["kind"]], self.ptr(node.args[0]), self.ptr(out), out.size)
        elif op == "glu":
            g, u = node.args
            rc = lib.cera_plan_glu(plan, GLU_CODES[node.attrs["kind"]], self.ptr(g), self.ptr(u), self.ptr(out), out.size)
        elif op in ("add", "mul"):
            a, b = node.args
            code = 0 if op == "add" else 1
            if isinstance(b, Tensor) and tuple(b.shape) == tuple(a.shape):
                rc = lib.cera_plan_binary(plan, code, self.ptr(a), self.ptr(b), 0, self.ptr(out), 1, a.size)
            elif isinstance(b, WeightRef) and int(np.prod(b.shape)) != a.shape[-1]:
                row = self._broadcast_weight(a, b)  # e.g. one value per head over [n, heads, dim]
                self._keep.append(row)
                rc = lib.cera_plan_binary(plan, code, self.ptr(a), ffi.from_buffer("float[]", row), 0, self.ptr(out),
                                          a.shape[0], row.size)  # fmt: skip
            else:
                n = a.shape[-1]
                rc = lib.cera_plan_binary(plan, code, self.ptr(a), self.operand(b), 0, self.ptr(out), a.size // n, n)
        elif op == "scale":
            rc = lib.cera_plan_scale(plan, self.ptr(node.args[0]), node.attrs["s"], self.ptr(out), out.size)
        elif op == "softcap":
            rc = lib.cera_plan_softcap(plan, self.ptr(node.args[0]), node.attrs["cap"], self.ptr(out), out.size)
        elif op == "copy":
            x = node.args[0]
            rows = x.size // x.shape[-1]
            rc = lib.cera_plan_copy_rows(plan, self.ptr(x), self.place[x.id].row_stride, rows, x.shape[-1], self.ptr(out))
        elif op == "rows":
            rc = self._gather(plan, node)
        elif op in ("conv1d", "attention_full", "cross_attention", "store_cross"):
            from .encoder import lower_encoder_op

            rc = lower_encoder_op(self, plan, node)
        elif op == "argmax":
            x = node.args[0]
            rc = lib.cera_plan_argmax(plan, self.ptr(x), x.size // x.shape[-1], x.shape[-1], self.ptr(out, "int32_t *"))
        elif op == "top_k":
            x = node.args[0]
            rc = lib.cera_plan_top_k(plan, self.ptr(x), x.size // x.shape[-1], x.shape[-1], node.attrs["k"],
                                     self.ptr(out, "int32_t *"))  # fmt: skip
        elif op == "take":
            x, ids = node.args
            rc = lib.cera_plan_take(plan, self.ptr(x), x.size // x.shape[-1], x.shape[-1], self.ptr(ids, "int32_t *"),
                                    ids.shape[-1], self.ptr(out))  # fmt: skip
        elif op in ("conv1d_causal", "ssm_scan"):
            rc = self._recurrent(plan, node)
        elif op == "moe":
            rc = self._moe(plan, node)
        else:  # pragma: no cover - C_OPS and this list agree
            raise ShapeError(f"cpu compiler: no lowering for {op}")
        if rc != 0:
            raise ShapeError(f"cpu compiler: the C plan refused {node!r} (error {rc})")

    def _products(self, plan, step: Step) -> int:
        """A step of products of one input (with its epilogue) as one C op."""
        first = step.nodes[0]
        x = first.args[0]
        K = x.shape[-1]
        M = x.size // K
        members = ffi.new("cera_product[]", len(step.nodes))
        for m, node in zip(members, step.nodes, strict=True):
            _, wref, bias = node.args
            w = self.weights[wref.name]
            if len(w.shape) != 2:
                raise ShapeError(f"linear: weight {w.name!r} has shape {w.shape}; a 2-D matrix is needed")
            m.wtype, m.w, m.w_row_bytes, m.N = w.type_id, w.ptr, w.row_bytes, w.shape[1]
            m.y, m.y_stride = self.ptr(node.out), w.shape[1]
            m.bias = self.operand(bias)
        if step.residual is not None:
            add, k, other = step.residual
            members[k].residual = self.ptr(other)
            members[k].out = self.ptr(add.out)
        glu_op, glu_out, glu_stride = -1, ffi.NULL, 0
        if step.glu is not None:
            glu_op = GLU_CODES[step.glu.attrs["kind"]]
            glu_out, glu_stride = self.ptr(step.glu.out), members[0].N
        self._keep.append(members)
        return lib.cera_plan_products(
            plan, self.ptr(x), self.place[x.id].row_stride, K, M, members, len(step.nodes), glu_op, glu_out,
            glu_stride, int(self.per_row),
        )  # fmt: skip

    def _attention(self, plan, node) -> int:
        q, k, v, ref = node.args
        spec = node.attrs["spec"]
        state = self._template
        if state is None:
            raise ShapeError("attention needs a state to compile against")
        ki, vi = self.table_index[ref.index]
        groups = self.graph.layout.groups
        rows = np.array([x for g in groups for x in g], np.int64)
        a = ffi.new("cera_attention_seqs *")
        a.q, a.k, a.v, a.out = self.ptr(q), self.ptr(k), self.ptr(v), self.ptr(node.out)
        a.n_heads, a.n_kv_heads, a.k_dim, a.v_dim = q.shape[1], k.shape[1], k.shape[2], v.shape[2]
        a.capacity, a.n_ctx = state.k[ref.index].shape[2], state.n_ctx
        a.kv_type, a.acc_f16 = self.kv_code, int(self.acc_f16)
        a.k_index, a.v_index, a.pos_index = ki, vi, 0
        a.n_slots = state.n_slots
        a.q_pos = self.ptr(self.graph.inputs["positions"], "int32_t *")
        a.scale, a.softcap, a.window = float(spec.scale), float(spec.softcap or 0.0), int(spec.window or 0)
        a.n_seq = len(groups)
        a.per_row = self.per_row
        a.rows = ffi.from_buffer("int64_t[]", rows)
        a.slots, a.starts = self._slots_p, self._starts_p
        return lib.cera_plan_attention(plan, a)

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

    def _recurrent(self, plan, node) -> int:
        """conv1d_causal / ssm_scan: each sequence reads and advances its slot of the state."""
        ref = node.args[-1]
        state = self._template
        if state is None:
            raise ShapeError(f"{node.op} needs a state to compile against")
        (index,) = self.table_index[ref.index]
        if node.op == "conv1d_causal":
            x, w, _ = node.args
            wt = np.ascontiguousarray(self.weights[w.name].dense().T)  # [kernel, channels]
            self._keep.append(wt)
            a = ffi.new("cera_conv_causal_args *")
            a.x, a.wt, a.y = self.ptr(x), ffi.from_buffer("float[]", wt), self.ptr(node.out)
            a.channels, a.kernel = x.shape[1], wt.shape[0]
            fn = lib.cera_plan_conv_causal
        else:
            x, dt, A, B, C, _ = node.args
            a = ffi.new("cera_ssm_scan_args *")
            a.x, a.dt, a.A, a.B, a.C, a.y = (self.ptr(x), self.ptr(dt), self.operand(A), self.ptr(B), self.ptr(C),
                                             self.ptr(node.out))  # fmt: skip
            a.n_heads, a.head_dim, a.n_groups, a.d_state = x.shape[1], x.shape[2], B.shape[1], B.shape[2]
            fn = lib.cera_plan_ssm_scan
        a.state_index, a.n_slots = index, state.n_slots
        a.n_seq, a.rows, a.slots = self.graph.layout.n_seq, self._seq_rows(), self._slots_p
        self._keep.append(a)
        return fn(plan, a)

    def _moe(self, plan, node) -> int:
        x, router, gate, up, down, bias = node.args
        attrs = node.attrs
        ws = self.weights
        r, g, u, d = ws[router.name], ws[gate.name], ws[up.name], ws[down.name]
        if len(g.shape) != 3 or g.shape != u.shape or d.shape != (g.shape[1], g.shape[0], g.shape[2]):
            raise ShapeError(f"moe: expert tensors {g.shape}, {u.shape}, {d.shape} do not fit together")
        a = ffi.new("cera_moe_args *")
        a.x, a.out = self.ptr(x), self.ptr(node.out)
        a.n_tok, a.dim, a.n_ff, a.n_expert = x.size // x.shape[-1], g.shape[0], g.shape[1], g.shape[2]
        a.router_type, a.router, a.router_row_bytes = r.type_id, r.ptr, r.row_bytes
        a.gate_type, a.gate, a.gate_row_bytes = g.type_id, g.ptr, g.row_bytes
        a.up_type, a.up, a.up_row_bytes = u.type_id, u.ptr, u.row_bytes
        a.down_type, a.down, a.down_row_bytes = d.type_id, d.ptr, d.row_bytes
        a.selection_bias = self.operand(bias)
        a.k, a.gating, a.norm_topk = attrs["k"], MOE_GATING_CODES[attrs["gating"]], int(bool(attrs["norm_topk"]))
        a.act, a.per_row = MOE_ACT_CODES[attrs["activation"]], int(self.per_row)
        a.weight_scale = float(attrs["weight_scale"] or 0.0)
        self._keep.append(a)
        return lib.cera_plan_moe(plan, a)

    def _gather(self, plan, node) -> int:
        """rows with an index that is not one run of rows: a copy per run."""
        x = node.args[0]
        idx = node.attrs["index"]
        row = x.size // x.shape[0] if x.shape[0] else 0
        stride = self.place[x.id].row_stride if x.ndim == 2 else row
        src, dst = self._addr(x), self._addr(node.out)
        i = 0
        while i < len(idx):
            j = i + 1
            while j < len(idx) and idx[j] == idx[j - 1] + 1:
                j += 1
            rc = lib.cera_plan_copy_rows(
                plan, ffi.cast("float *", src + 4 * stride * idx[i]), stride, j - i, row,
                ffi.cast("float *", dst + 4 * row * i),
            )  # fmt: skip
            if rc:
                return rc
            i = j
        return 0

    # -- running ----------------------------------------------------------------------------------

    def run(self, state, inputs: StepInputs) -> dict[str, np.ndarray]:
        g = state_geometry(state)
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


__all__ = ["CpuExecutable", "StateTable", "is_view", "state_geometry"]
