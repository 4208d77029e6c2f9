"""A graph as one MLX program: `MetalExecutable`.

At compile time the graph's nodes are fixed into a plan: which state arrays of which
sequence each stateful op reads and replaces, which per-run tables it needs. A run

1. makes the per-run inputs on the host, each one small array: token ids, positions, the
   RoPE tables (cos/sin of every row, in float64 as `cera.graph.ops.rope_thetas` makes them),
   for each cache size the cells each sequence's new keys go to and the positions of the
   cells its queries read (``CELL_BUCKET`` cells at a time, so a step reads the filled part
   of a cache, not the whole context), the rows each cross-attention memory holds;
2. calls the program (`_program`) on those inputs and the state arrays of the slots the
   batch's sequences use: it returns the outputs and the state arrays' successors;
3. replaces the state arrays and evaluates everything once (`mx.eval`): one evaluation,
   one synchronisation per step, and only the declared outputs come back to the host (a
   greedy step: one int32 per sequence, the argmax taken on the device).

Decode steps (every sequence one token) run the program through `mx.compile`, which
traces it once per shape (a cache bucket grows every CELL_BUCKET cells) and fuses its
elementwise work; prompt passes, whose shapes change with every prompt, run it lazily as
is (one evaluation as well).
"""

from __future__ import annotations

import threading

import mlx.core as mx
import numpy as np

from cera.backend import Executable, StepInputs
from cera.errors import ContextFull, ShapeError
from cera.graph.builder import Tensor, WeightRef
from cera.graph.ops import rope_thetas
from cera.kv_types import hadamard_block
from cera.state import StateRef

from . import kernels as K
from . import kv_quant as KQ

CELL_BUCKET = 256  # cells a step's attention reads are a multiple of this (or the whole ring)
STATEFUL = {"attention": ("k", "v"), "conv1d_causal": ("conv_state",), "ssm_scan": ("ssm_state",), "kda": ("ssm_state",),
            "gated_delta_net": ("ssm_state",),
            "store_cross": ("cross_k", "cross_v"), "cross_attention": ("cross_k", "cross_v")}  # fmt: skip


class MetalExecutable(Executable):
    def __init__(self, backend, graph, weights: dict, state):
        self.backend = backend
        self.kv_type = getattr(state, "kv_type", "f16")
        self.graph = graph
        self.weights = weights
        self.layout = graph.layout
        self.n_seq = self.layout.n_seq
        self._lock = threading.Lock()
        self.extra = sorted(n for n in graph.inputs if n not in ("tokens", "positions"))
        # per-run tables, by key -> index in the program's argument list
        self.ropes: list = []  # distinct RopeSpecs
        self.caps: list[int] = []  # distinct cache sizes (cells) of the attention layers
        self.cross_reads: list[tuple[int, int]] = []  # (declaration, sequence) whose rows a memory holds
        self.state_keys: list[tuple[str, int, int]] = []  # (store, declaration, sequence)
        self.cross_stores: list[tuple[int, int, int]] = []  # (declaration, sequence, rows) written
        caps = {}
        for node in graph.nodes:
            if node.op == "rope":
                spec = node.attrs["spec"]
                if spec not in self.ropes:
                    self.ropes.append(spec)
            ref = node.state
            if ref is None:
                continue
            if state is None:
                raise ShapeError(f"op {node.op} needs state, and the graph was compiled without any")
            seqs = range(self.n_seq)
            if node.op == "cross_attention" and node.attrs.get("shared"):
                seqs = [0]
            for store in STATEFUL[node.op]:
                for s in seqs:
                    key = (store, ref.index, s)
                    if key not in self.state_keys:
                        self.state_keys.append(key)
            if node.op == "attention":
                cap = state.k[ref.index].shape[2]
                caps[ref.index] = cap
                if cap not in self.caps:
                    self.caps.append(cap)
            elif node.op == "cross_attention":
                for s in seqs:
                    if (ref.index, s) not in self.cross_reads:
                        self.cross_reads.append((ref.index, s))
            elif node.op == "store_cross":
                max_len = state.spec.items[ref.index].max_len
                for s, (_r0, n) in enumerate(self.layout.groups):
                    if n > max_len:
                        raise ContextFull(f"cross-attention memory of {n} rows exceeds its size of {max_len}")
                    self.cross_stores.append((ref.index, s, n))
        self.decl_cap = caps
        self.compiled = self.layout.n_tokens == self.n_seq  # a decode step: every sequence one token
        self._fn = mx.compile(self._program) if self.compiled else self._program

    # -- the host side of a run ----------------------------------------------------------------

    def _cells(self, state, inputs: StepInputs) -> tuple[list, list]:
        """Per cache size and sequence: where the new keys go, and the positions of the cells
        the queries read (-1: empty), as `cera.graph.ops.attention` sees them."""
        ends = [int(inputs.starts[s]) + n for s, n in enumerate(self.layout.seq_lens)]
        bucket = -(-max(ends) // CELL_BUCKET) * CELL_BUCKET
        writes, reads = [], []
        for cap in self.caps:
            cells = min(cap, bucket)
            for s in range(self.n_seq):
                slot, start, end = int(inputs.slots[s]), int(inputs.starts[s]), ends[s]
                writes.append(mx.array((np.arange(start, end) % cap).astype(np.int32)))
                row = state.pos[slot]
                if end <= cap:
                    cpos = row[:cells]
                else:  # a ring that has wrapped: cell j holds the latest sequence cell c = j (mod cap)
                    j = np.arange(cap)
                    cpos = row[end - 1 - ((end - 1 - j) % cap)]
                reads.append(mx.array(np.ascontiguousarray(cpos, np.int32)))
        return writes, reads

    def _args(self, state, inputs: StepInputs) -> list:
        pos = np.asarray(inputs.positions, np.int32)
        args = [mx.array(np.asarray(inputs.tokens, np.int32)), mx.array(pos)]
        for name in self.extra:
            t = self.graph.inputs[name]
            if name not in inputs.extra:
                raise ShapeError(f"graph input {name!r} was not supplied")
            a = np.asarray(inputs.extra[name], np.int32 if t.dtype == "i32" else np.float32)
            if a.shape != t.shape:
                raise ShapeError(f"graph input {name!r} has shape {a.shape}, the graph was built for {t.shape}")
            args.append(mx.array(a))
        for spec in self.ropes:
            theta, mscale = rope_thetas(pos, spec)
            mag = mscale * spec.attn_factor
            args += [
                mx.array((np.cos(theta) * mag).astype(np.float32)),
                mx.array((np.sin(theta) * mag).astype(np.float32)),
            ]
        if self.caps:
            writes, reads = self._cells(state, inputs)
            args += writes + reads
        for i, s in self.cross_reads:
            args.append(mx.array(np.asarray([state.cross_len[i][int(inputs.slots[s])]], np.int32)))
        for store, i, s in self.state_keys:
            args.append(getattr(state, store)[i].arrays[int(inputs.slots[s])])
        return args

    def run(self, state, inputs: StepInputs) -> dict[str, np.ndarray]:
        with self._lock, self.backend.on_device():
            args = self._args(state, inputs)
            outs, new_state = self._fn(args)
            del args
            for (store, i, s), a in zip(self.state_keys, new_state, strict=True):
                getattr(state, store)[i].arrays[int(inputs.slots[s])] = a
            mx.eval(outs, new_state)
            for i, s, n in self.cross_stores:
                state.cross_len[i][int(inputs.slots[s])] = n
            return {name: np.array(o, copy=True) for name, o in zip(self.graph.outputs, outs, strict=True)}

    # -- the program ---------------------------------------------------------------------------------

    def _attend(self, q, kc, vc, vis, spec, dk: int, dv: int):
        """`kernels.attend` over a cache's visible cells; a q8_0/q4_0 cache's cells widened
        to f32 for the step (`kv_quant`), the query turned as its keys were and the output
        turned back from its values' turn."""
        kind = self.kv_type
        if kind not in KQ.QUANT_KV:
            return K.attend(q, kc, vc, vis, spec)
        kf, vf = KQ.dequantize(kc, kind, dk), KQ.dequantize(vc, kind, dv)
        out = K.attend(KQ.turn(q, hadamard_block(kind, dk, True)), kf, vf, vis, spec)
        n = out.shape[0]
        return KQ.turn(out.reshape(n, -1, dv), hadamard_block(kind, dv, False)).reshape(n, -1)

    def _program(self, args: list):
        """The graph on MLX arrays: ``args`` as `_args` lays them out -> (outputs, the state
        arrays' successors in ``state_keys`` order)."""
        it = iter(args)
        tokens, positions = next(it), next(it)
        vals: dict[int, mx.array] = {
            self.graph.inputs["tokens"].id: tokens,
            self.graph.inputs["positions"].id: positions,
        }
        for name in self.extra:
            vals[self.graph.inputs[name].id] = next(it)
        rope_tabs = {spec: (next(it), next(it)) for spec in self.ropes}
        n_sc = len(self.caps) * self.n_seq
        writes = [next(it) for _ in range(n_sc)]
        reads = [next(it) for _ in range(n_sc)]
        cross_len = {key: next(it) for key in self.cross_reads}
        cur = {key: next(it) for key in self.state_keys}
        groups = self.layout.groups

        def arg(a):
            if isinstance(a, Tensor):
                return vals[a.id]
            if isinstance(a, WeightRef):
                return self.weights[a.name]
            return a

        for node in self.graph.nodes:
            a = [arg(x) for x in node.args]
            at = node.attrs
            op = node.op
            ref: StateRef | None = node.state
            if op == "embedding":
                y = K.embedding(a[0], a[1])
            elif op == "linear":
                y = K.linear(a[0], a[1], a[2], per_row=self.layout.row_exact)
            elif op == "rms_norm":
                y = K.rms_norm(a[0], a[1], at["eps"])
            elif op == "layer_norm":
                y = K.layer_norm(a[0], a[1], a[2], at["eps"])
            elif op == "rope":
                cos, sin = rope_tabs[at["spec"]]
                y = K.rope(a[0], cos, sin, at["spec"])
            elif op == "attention":
                q, kn, vn = a[0], a[1], a[2]
                ci = self.caps.index(self.decl_cap[ref.index])
                outs = []
                for s, (r0, n) in enumerate(groups):
                    kc, vc = cur[("k", ref.index, s)], cur[("v", ref.index, s)]
                    w = writes[ci * self.n_seq + s]
                    kr, vr = kn[r0 : r0 + n], vn[r0 : r0 + n]
                    if self.kv_type in KQ.QUANT_KV:
                        kr, vr = KQ.quantize(kr, self.kv_type, True), KQ.quantize(vr, self.kv_type, False)
                    kc = K.put_cells(kc, w, kr)
                    vc = K.put_cells(vc, w, vr)
                    cur[("k", ref.index, s)], cur[("v", ref.index, s)] = kc, vc
                    cpos = reads[ci * self.n_seq + s]
                    cells = cpos.shape[0]
                    vis = K.visible_cells(positions[r0 : r0 + n], cpos, at["spec"])
                    outs.append(self._attend(q[r0 : r0 + n], kc[:, :cells], vc[:, :cells], vis, at["spec"], kn.shape[-1],
                                             vn.shape[-1]))  # fmt: skip
                y = outs[0] if len(outs) == 1 else mx.concatenate(outs, axis=0)
            elif op == "attention_full":
                q, k, v = a[0], a[1], a[2]
                outs = []
                for r0, n in groups:
                    vis = K.full_visible(positions[r0 : r0 + n], at["spec"])
                    kk, vv = k[r0 : r0 + n].transpose(1, 0, 2), v[r0 : r0 + n].transpose(1, 0, 2)
                    outs.append(K.attend(q[r0 : r0 + n], kk, vv, vis, at["spec"]))
                y = outs[0] if len(outs) == 1 else mx.concatenate(outs, axis=0)
            elif op == "store_cross":
                for s, (r0, n) in enumerate(groups):
                    for store, src in (("cross_k", a[0]), ("cross_v", a[1])):
                        mem = cur[(store, ref.index, s)]
                        rows = src[r0 : r0 + n]
                        cur[(store, ref.index, s)] = (
                            rows if n == mem.shape[0] else mx.concatenate([rows, mem[n:]], axis=0)
                        )
                    cross_len[(ref.index, s)] = mx.array([n], mx.int32)  # what later reads of this pass see
                y = mx.zeros((0,), K.F32)
            elif op == "cross_attention":
                q = a[0]
                shared = at.get("shared", False)
                outs = []
                for s, (r0, n) in enumerate(groups):
                    m = 0 if shared else s
                    kc, vc = cur[("cross_k", ref.index, m)], cur[("cross_v", ref.index, m)]
                    rows = mx.arange(kc.shape[0], dtype=mx.int32)
                    vis = mx.broadcast_to((rows < cross_len[(ref.index, m)])[None, :], (n, kc.shape[0]))
                    outs.append(K.attend(q[r0 : r0 + n], kc.transpose(1, 0, 2), vc.transpose(1, 0, 2), vis, at["spec"]))
                y = outs[0] if len(outs) == 1 else mx.concatenate(outs, axis=0)
            elif op == "unary":
                y = K.activation(at["kind"], a[0])
            elif op == "glu":
                y = K.glu(at["kind"], a[0], a[1])
            elif op == "add":
                y = a[0] + K.operand(a[0], a[1])
            elif op == "mul":
                y = a[0] * K.operand(a[0], a[1])
            elif op == "scale":
                y = a[0] * at["s"]
            elif op == "softcap":
                y = at["cap"] * mx.tanh(a[0] / at["cap"])
            elif op == "softmax":
                y = mx.softmax(a[0], axis=-1, precise=True)
            elif op == "argmax":
                y = mx.argmax(a[0], axis=-1).astype(mx.int32)
            elif op == "top_k":
                y = K.top_k(a[0], at["k"])
            elif op == "take":
                y = mx.take_along_axis(a[0], a[1], axis=-1)
            elif op == "concat":
                y = mx.concatenate([a[0], a[1]], axis=at["axis"])
            elif op == "rows":
                idx = at["index"]
                r0 = idx[0] if idx else 0
                if idx == tuple(range(r0, r0 + len(idx))):
                    y = a[0][r0 : r0 + len(idx)]
                else:
                    y = a[0][mx.array(np.asarray(idx, np.int32))]
            elif op == "seq_mean":
                y = mx.stack([mx.mean(a[0][r0 : r0 + n], axis=0) for r0, n in at["groups"]])
            elif op == "reshape":
                y = a[0].reshape(at["shape"])
            elif op == "slice":
                y = a[0][..., at["start"] : at["start"] + at["length"]]
            elif op == "copy":
                y = a[0]
            elif op == "conv1d_causal":
                w = a[1].values()
                w = w.reshape(-1, w.shape[-1])  # [channels, kernel] (files may add unit axes)
                outs = []
                for s, (r0, n) in enumerate(groups):
                    ys, cur[("conv_state", ref.index, s)] = K.conv1d_causal(
                        a[0][r0 : r0 + n], w, cur[("conv_state", ref.index, s)]
                    )
                    outs.append(ys)
                y = outs[0] if len(outs) == 1 else mx.concatenate(outs, axis=0)
            elif op == "conv1d":
                y = K.conv1d(a[0], a[1], a[2], at["stride"], at["padding"])
            elif op == "ssm_scan":
                x, dt, A, B, C = a[0], a[1], a[2], a[3], a[4]
                A = (A if isinstance(A, mx.array) else A.values()).reshape(-1)
                outs = []
                for s, (r0, n) in enumerate(groups):
                    sl = slice(r0, r0 + n)
                    ys, cur[("ssm_state", ref.index, s)] = K.ssm_scan(
                        x[sl], dt[sl], A, B[sl], C[sl], cur[("ssm_state", ref.index, s)]
                    )
                    outs.append(ys)
                y = outs[0] if len(outs) == 1 else mx.concatenate(outs, axis=0)
            elif op == "kda":
                outs = []
                for s, (r0, n) in enumerate(groups):
                    sl = slice(r0, r0 + n)
                    ys, cur[("ssm_state", ref.index, s)] = K.kda(
                        a[0][sl], a[1][sl], a[2][sl], a[3][sl], a[4][sl], a[5].values().reshape(-1),
                        cur[("ssm_state", ref.index, s)], at["eps"], at["lower_bound"],
                    )  # fmt: skip
                    outs.append(ys)
                y = outs[0] if len(outs) == 1 else mx.concatenate(outs, axis=0)
            elif op == "head_linear":
                y = K.head_linear(a[0], a[1])
            elif op == "sigmoid_gate":
                y = a[0] * mx.sigmoid(a[1])
            elif op == "gated_delta_net":
                outs = []
                for s, (r0, n) in enumerate(groups):
                    sl = slice(r0, r0 + n)
                    ys, cur[("ssm_state", ref.index, s)] = K.gated_delta_net(
                        *(t[sl] for t in a[:5]), cur[("ssm_state", ref.index, s)], grouped=at["grouped"]
                    )
                    outs.append(ys)
                y = outs[0] if len(outs) == 1 else mx.concatenate(outs, axis=0)
            elif op == "moe":
                y = K.moe(a[0], a[1], a[2], a[3], a[4], a[5], k=at["k"], gating=at["gating"], norm_topk=at["norm_topk"],
                          weight_scale=at["weight_scale"], activation_kind=at["activation"],
                          groups=at.get("groups", 1), groups_used=at.get("groups_used", 1))  # fmt: skip
            else:  # the backend's check_ops refuses the graph before this
                raise ShapeError(f"backend 'metal' has no program for op {op!r}")
            vals[node.out.id] = y
        outs = [vals[t.id] for t in self.graph.outputs.values()]
        return outs, [cur[key] for key in self.state_keys]
