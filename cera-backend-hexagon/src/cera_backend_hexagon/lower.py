"""cera's graph as an ONNX graph that onnxruntime's QNN execution provider compiles for
the HTP, whole (CPU fallback off).

Everything inside is float16 (what the HTP computes in); token ids and the returned ids
are int32. Shapes are fixed: one ONNX graph per cera graph, that is per shape class
(a prompt of n tokens, a decode step, a batch of steps).

What the graph cannot hold, the host feeds in every run (`Lowered.feeds`), computed from
the positions and the state the runtime keeps (`cera.state.HostState`):

- RoPE's cos/sin tables per rotation spec (``rope{k}_cos``/``_sin``), from
  `cera.graph.ops.rope_thetas` in float64, so the graph only multiplies;
- per KV state, the cache as it was before the pass (``past_k{i}``, ``past_v{i}``:
  [sequences, kv heads, cells, dim], float16) and, per (cells, window), an additive mask
  over those cells and this pass's rows (``mask...``: 0 where visible, -30000 elsewhere),
  which encodes causality, the window, each sequence's own cells and ring-buffer
  overwrites; the graph concatenates the new keys after the cached ones and returns them
  (``new_k{i}``/``new_v{i}``), and the host writes them into the cache;
- per short-convolution state, the carried inputs (``conv{i}``); the graph returns the
  carried inputs after the pass (``conv_out{i}``).

So the KV cache and recurrent state are graph inputs and outputs, not resident on the HTP:
a decode step moves the whole cache in (see the README's bytes per token).

Ops are lowered one cera node at a time; every ONNX node is named ``n{id}_{op}/...`` so that
a node QNN refuses names the cera op it came from (`cera_op_of`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import attrs
import numpy as np

from cera.errors import UnsupportedOperation
from cera.graph.builder import Graph, Tensor, WeightRef
from cera.graph.ops import rope_thetas
from cera.state import StateRef

NEG = -30000.0  # masked logits: exp() is 0 in float16, and adding a score cannot overflow
OPSET = 21

# ops this lowering knows; others are refused by name before anything is built
LOWERED_OPS = frozenset({
    "embedding", "linear", "rms_norm", "layer_norm", "rope", "attention", "attention_full", "unary", "glu",
    "add", "mul", "scale", "softcap", "softmax", "argmax", "top_k", "take", "concat", "rows", "seq_mean",
    "reshape", "slice", "copy", "conv1d_causal",
})  # fmt: skip


@attrs.define
class Feed:
    """A graph input the host fills every run."""

    name: str
    kind: str  # tokens | positions | extra | rope_cos | rope_sin | past_k | past_v | mask | mask_full | conv
    shape: tuple[int, ...]
    dtype: str = "f16"  # f16 | i32
    info: dict = attrs.field(factory=dict)


@attrs.define
class Writeback:
    """A graph output that goes back into the state."""

    name: str
    kind: str  # new_k | new_v | conv
    state: int


@attrs.define
class Lowered:
    feeds: list[Feed]
    writebacks: list[Writeback]
    outputs: dict[str, tuple[str, str]]  # cera output name -> (onnx name, "f32" | "i32")
    nodes: list
    value_infos: dict  # onnx output name -> (elem type, shape)
    weight_names: list[str]  # initializers, in order
    weight_layout: dict[str, str]  # initializer -> "as_is" | "transposed"
    consts: list  # small initializers made here (numpy arrays with names)

    def model(self, weight_values: Callable[[str, str], np.ndarray]):
        """The ONNX ModelProto; ``weight_values(name, layout)`` gives each weight's float16 array."""
        from onnx import TensorProto, helper, numpy_helper

        elem = {"f16": TensorProto.FLOAT16, "i32": TensorProto.INT32}
        inputs = [helper.make_tensor_value_info(f.name, elem[f.dtype], list(f.shape)) for f in self.feeds]
        outputs = [helper.make_tensor_value_info(n, elem[t], list(s)) for n, (t, s) in self.value_infos.items()]
        inits = [numpy_helper.from_array(a, n) for n, a in self.consts]
        for name in self.weight_names:
            inits.append(numpy_helper.from_array(weight_values(name.split("|")[0], self.weight_layout[name]), name))
        graph = helper.make_graph(self.nodes, "cera", inputs, outputs, inits)
        m = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="cera-backend-hexagon"
        )
        m.ir_version = 10
        return m


def cera_op_of(onnx_node_name: str) -> str:
    """``n12_rms_norm/ReduceMean`` -> ``rms_norm (node 12)``."""
    head = onnx_node_name.split("/")[0]
    if head.startswith("n") and "_" in head:
        num, op = head[1:].split("_", 1)
        if num.isdigit():
            return f"{op} (node {num})"
    return onnx_node_name


class _Lowering:
    def __init__(self, graph: Graph, kv_cells: dict[int, int], n_slots_in_pass: int):
        from onnx import TensorProto

        self.T = TensorProto
        self.g = graph
        self.kv_cells = kv_cells  # state index -> cells per slot
        self.S = n_slots_in_pass
        self.nodes: list = []
        self.values: dict[int, str] = {}
        self.feeds: list[Feed] = []
        self.feed_names: set[str] = set()
        self.writebacks: list[Writeback] = []
        self.consts: list = []
        self.weights: list[str] = []
        self.weight_layout: dict[str, str] = {}
        self.value_infos: dict = {}
        self.rope_specs: dict = {}
        self._n = 0
        self.tag = "in"

    # -- helpers -------------------------------------------------------------------------------

    def fresh(self, what: str = "v") -> str:
        self._n += 1
        return f"{self.tag}/{what}{self._n}"

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attributes):
        from onnx import helper

        outs = [self.fresh(op_type) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=f"{self.tag}/{op_type}{self._n}", **attributes))
        return outs[0] if n_out == 1 else outs

    def const(self, value, dtype=np.float16) -> str:
        name = f"c{len(self.consts)}"
        self.consts.append((name, np.asarray(value, dtype)))
        return name

    def ints(self, values) -> str:
        return self.const(np.asarray(values, np.int64), np.int64)

    def feed(self, name: str, kind: str, shape, dtype: str = "f16", **info) -> str:
        if name not in self.feed_names:
            self.feed_names.add(name)
            self.feeds.append(Feed(name, kind, tuple(int(d) for d in shape), dtype, info))
        return name

    def weight(self, w: WeightRef, layout: str = "as_is") -> str:
        key = w.name if layout == "as_is" else f"{w.name}|T"
        if key not in self.weight_layout:
            self.weights.append(key)
            self.weight_layout[key] = layout
        return key

    def operand(self, a, like: Tensor) -> str:
        """A tensor or a weight as an elementwise operand of ``like`` (a weight is one row
        broadcast over the rows, as the reference reads it)."""
        if isinstance(a, Tensor):
            return self.val(a)
        name = self.weight(a)
        nshape = tuple(reversed(a.shape))
        try:
            fits = len(nshape) <= len(like.shape) and np.broadcast_shapes(like.shape, nshape) == tuple(like.shape)
        except ValueError:
            fits = False
        if not fits:
            return self.reshape(name, (1,) * (len(like.shape) - 1) + (math.prod(a.shape),))
        return name

    def val(self, t: Tensor) -> str:
        return self.values[t.id]

    def reshape(self, x: str, shape) -> str:
        return self.op("Reshape", [x, self.ints(shape)])

    def slice(self, x: str, start: int, end: int, axis: int) -> str:
        return self.op("Slice", [x, self.ints([start]), self.ints([end]), self.ints([axis])])

    def output(self, name: str, value: str, dtype: str, shape) -> None:
        self.value_infos[name] = (dtype, tuple(int(d) for d in shape))
        self.nodes.append(self._identity(value, name))

    def _identity(self, value: str, name: str):
        from onnx import helper

        # a graph output gets its own name through a Reshape to its own shape (QNN's HTP has
        # no Identity op; a Reshape to the same shape is free)
        shape = self.value_infos[name][1]
        return helper.make_node("Reshape", [value, self.ints(shape)], [name], name=f"out/{name}")

    # -- the walk ------------------------------------------------------------------------------

    def run(self) -> Lowered:
        g = self.g
        unknown = sorted({n.op for n in g.nodes} - LOWERED_OPS)
        if unknown:
            raise UnsupportedOperation(
                f"backend 'hexagon' cannot lower op{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} to the HTP"
            )
        for name, t in g.inputs.items():
            if name == "positions" and not any(a is t for n in g.nodes if n.op != "rope" for a in n.args):
                continue  # RoPE takes its tables instead (fed by the host)
            if name in ("tokens", "positions"):
                self.values[t.id] = self.feed(name, name, t.shape, "i32")
            else:
                self.values[t.id] = self.feed(
                    f"x_{name}", "extra", t.shape, "i32" if t.dtype == "i32" else "f16", input=name
                )
        for node in g.nodes:
            self.tag = f"n{node.id}_{node.op}"
            fn = getattr(self, f"_{node.op}")
            self.values[node.out.id] = fn(node, *node.args, **node.attrs)
        outputs = {}
        for name, t in g.outputs.items():
            dtype = "i32" if t.dtype == "i32" else "f16"
            self.tag = f"out_{name}"
            self.output(f"out_{name}", self.val(t), dtype, t.shape)
            outputs[name] = (f"out_{name}", "i32" if t.dtype == "i32" else "f32")
        return Lowered(self.feeds, self.writebacks, outputs, self.nodes, self.value_infos, self.weights,
                       self.weight_layout, self.consts)  # fmt: skip

    # -- ops ---------------------------------------------------------------------------------

    def _embedding(self, node, table, ids):
        return self.op("Gather", [self.weight(table), self.val(ids)], axis=0)

    def _linear(self, node, x, w, bias=None):
        y = self.op("MatMul", [self.val(x), self.weight(w, "transposed")])
        if bias is not None:
            y = self.op("Add", [y, self.reshape(self.weight(bias), (math.prod(bias.shape),))])
        return y

    def _norm_param(self, p, dim: int, default: float) -> str:
        if p is None:
            return self.const(np.full(dim, default))
        if isinstance(p, Tensor):
            return self.reshape(self.val(p), (dim,))
        return self.reshape(self.weight(p), (dim,))

    def _rms_norm(self, node, x, w=None, *, eps):
        dim = x.shape[-1]
        return self.op(
            "SimplifiedLayerNormalization", [self.val(x), self._norm_param(w, dim, 1.0)], axis=-1, epsilon=eps
        )

    def _layer_norm(self, node, x, w=None, b=None, *, eps):
        dim = x.shape[-1]
        return self.op("LayerNormalization", [self.val(x), self._norm_param(w, dim, 1.0), self._norm_param(b, dim, 0.0)],
                       axis=-1, epsilon=eps)  # fmt: skip

    def _rope(self, node, x, positions, *, spec):
        n, H, D = x.shape
        nd = spec.n_dims
        k = self.rope_specs.setdefault(spec, len(self.rope_specs))
        cos = self.feed(f"rope{k}_cos", "rope_cos", (n, 1, nd // 2), spec=spec)
        sin = self.feed(f"rope{k}_sin", "rope_sin", (n, 1, nd // 2), spec=spec)
        xv = self.val(x)
        rot = self.slice(xv, 0, nd, 2) if nd < D else xv
        if spec.neox:
            a, b = self.slice(rot, 0, nd // 2, 2), self.slice(rot, nd // 2, nd, 2)
            c, s = cos, sin
        else:
            pairs = self.reshape(rot, (n, H, nd // 2, 2))
            a, b = self.op("Split", [pairs, self.ints([1, 1])], n_out=2, axis=3)
            c, s = self.reshape(cos, (n, 1, nd // 2, 1)), self.reshape(sin, (n, 1, nd // 2, 1))
        y0 = self.op("Sub", [self.op("Mul", [a, c]), self.op("Mul", [b, s])])
        y1 = self.op("Add", [self.op("Mul", [a, s]), self.op("Mul", [b, c])])
        y = self.op("Concat", [y0, y1], axis=-1)
        if not spec.neox:
            y = self.reshape(y, (n, H, nd))
        if nd < D:
            y = self.op("Concat", [y, self.slice(xv, nd, D, 2)], axis=-1)
        return y

    def _attend(
        self, q: str, keys: str, values: str, mask: str, n: int, H: int, Hkv: int, dk: int, dv: int, M: int, spec
    ):
        """q [n, H, dk]; keys [Hkv, M, dk]; values [Hkv, M, dv]; mask [n, M] -> [n, H * dv]."""
        G = H // Hkv
        qh = self.op("Transpose", [self.reshape(q, (n, Hkv, G, dk))], perm=[1, 2, 0, 3])  # [Hkv, G, n, dk]
        qh = self.reshape(qh, (Hkv, G * n, dk))
        kt = self.op("Transpose", [keys], perm=[0, 2, 1])  # [Hkv, dk, M]
        scores = self.op("MatMul", [qh, kt])  # [Hkv, G*n, M]
        scores = self.op("Mul", [scores, self.const(spec.scale)])
        if spec.softcap:
            scores = self.op(
                "Mul",
                [self.op("Tanh", [self.op("Mul", [scores, self.const(1.0 / spec.softcap)])]), self.const(spec.softcap)],
            )
        scores = self.op("Add", [self.reshape(scores, (Hkv, G, n, M)), mask])
        p = self.reshape(self.op("Softmax", [scores], axis=-1), (Hkv, G * n, M))
        o = self.reshape(self.op("MatMul", [p, values]), (Hkv, G, n, dv))
        o = self.op("Transpose", [o], perm=[2, 0, 1, 3])  # [n, Hkv, G, dv]
        return self.reshape(o, (n, H * dv))

    def _attention(self, node, q, k, v, state: StateRef, *, spec):
        i = state.index
        n, H, dk = q.shape
        Hkv, dv = k.shape[1], v.shape[2]
        cap = self.kv_cells[i]
        S = self.S
        pk = self.feed(f"past_k{i}", "past_k", (S, Hkv, cap, dk), state=i)
        pv = self.feed(f"past_v{i}", "past_v", (S, Hkv, cap, dv), state=i)
        mask = self.feed(f"mask_c{cap}_w{spec.window or 0}", "mask", (n, S * cap + n), cells=cap, window=spec.window)
        if S > 1:
            pk = self.op("Transpose", [pk], perm=[1, 0, 2, 3])
            pv = self.op("Transpose", [pv], perm=[1, 0, 2, 3])
        pk, pv = self.reshape(pk, (Hkv, S * cap, dk)), self.reshape(pv, (Hkv, S * cap, dv))
        kn = self.op("Transpose", [self.val(k)], perm=[1, 0, 2])  # [Hkv, n, dk]
        vn = self.op("Transpose", [self.val(v)], perm=[1, 0, 2])
        keys = self.op("Concat", [pk, kn], axis=1)
        values = self.op("Concat", [pv, vn], axis=1)
        for what, t in (("k", k), ("v", v)):
            out = f"new_{what}{i}"
            self.value_infos[out] = ("f16", tuple(t.shape))
            self.nodes.append(self._identity(self.val(t), out))
            self.writebacks.append(Writeback(out, f"new_{what}", i))
        return self._attend(self.val(q), keys, values, mask, n, H, Hkv, dk, dv, S * cap + n, spec)

    def _attention_full(self, node, q, k, v, *, spec):
        n, H, dk = q.shape
        Hkv, dv = k.shape[1], v.shape[2]
        mask = self.feed(
            f"fmask_c{int(spec.causal)}_w{spec.window or 0}",
            "mask_full",
            (n, n),
            causal=spec.causal,
            window=spec.window,
        )
        keys = self.op("Transpose", [self.val(k)], perm=[1, 0, 2])
        values = self.op("Transpose", [self.val(v)], perm=[1, 0, 2])
        return self._attend(self.val(q), keys, values, mask, n, H, Hkv, dk, dv, n, spec)

    def _act(self, kind: str, x: str) -> str:
        if kind == "silu":
            return self.op("Mul", [x, self.op("Sigmoid", [x])])
        if kind == "gelu":
            return self.op("Gelu", [x], approximate="tanh")
        if kind == "gelu_erf":
            return self.op("Gelu", [x])
        if kind == "relu":
            return self.op("Relu", [x])
        raise UnsupportedOperation(f"backend 'hexagon': no activation {kind!r}")

    def _unary(self, node, x, *, kind):
        return self._act(kind, self.val(x))

    def _glu(self, node, gate, up, *, kind):
        return self.op("Mul", [self._act({"swiglu": "silu", "geglu": "gelu"}[kind], self.val(gate)), self.val(up)])

    def _add(self, node, a, b):
        return self.op("Add", [self.val(a), self.operand(b, a)])

    def _mul(self, node, a, b):
        return self.op("Mul", [self.val(a), self.operand(b, a)])

    def _scale(self, node, x, *, s):
        return self.op("Mul", [self.val(x), self.const(s)])

    def _softcap(self, node, x, *, cap):
        return self.op(
            "Mul", [self.op("Tanh", [self.op("Mul", [self.val(x), self.const(1.0 / cap)])]), self.const(cap)]
        )

    def _softmax(self, node, x):
        return self.op("Softmax", [self.val(x)], axis=-1)

    def _argmax(self, node, x):
        return self.op("Cast", [self.op("ArgMax", [self.val(x)], axis=-1, keepdims=0)], to=self.T.INT32)

    def _top_k(self, node, x, *, k):
        _, ids = self.op("TopK", [self.val(x), self.ints([k])], n_out=2, axis=-1, largest=1, sorted=1)
        return self.op("Cast", [ids], to=self.T.INT32)

    def _take(self, node, x, ids):
        return self.op("GatherElements", [self.val(x), self.val(ids)], axis=-1)

    def _concat(self, node, a, b, *, axis):
        return self.op("Concat", [self.val(a), self.val(b)], axis=axis)

    def _rows(self, node, x, *, index):
        # rows as a product with a one-hot matrix (exact in float16): on QNN 2.51's HTP, an Add
        # of two Slice/Gather row picks of products computed wrong values (tiny-mistral's
        # last-layer residual: differences of 26 on values of 28; a MatMul+Slice repro in the
        # README), the product form computes them right
        n = x.shape[0]
        rest = math.prod(x.shape[1:])
        pick = np.zeros((len(index), n), np.float16)
        pick[np.arange(len(index)), list(index)] = 1
        y = self.op("MatMul", [self.const(pick), self.reshape(self.val(x), (n, rest))])
        return self.reshape(y, (len(index),) + tuple(x.shape[1:]))

    def _seq_mean(self, node, x, *, groups):
        parts = [
            self.op("ReduceMean", [self.slice(self.val(x), r0, r0 + n, 0), self.ints([0])], keepdims=1)
            for r0, n in groups
        ]
        return parts[0] if len(parts) == 1 else self.op("Concat", parts, axis=0)

    def _reshape(self, node, x, *, shape):
        return self.reshape(self.val(x), shape)

    def _slice(self, node, x, *, start, length):
        return self.slice(self.val(x), start, start + length, len(x.shape) - 1)

    def _copy(self, node, x):
        return self.val(x)

    def _conv1d_causal(self, node, x, w, state: StateRef):
        i = state.index
        n, C = x.shape
        K = w.shape[0]
        carried = self.feed(f"conv{i}", "conv", (self.S, K - 1, C), state=i)
        kernel = self.weight(w)  # numpy [C, K]
        taps = [self.reshape(self.slice(kernel, j, j + 1, 1), (C,)) for j in range(K)]
        ys, news = [], []
        for s, (r0, ns) in enumerate(self.g.layout.groups):
            prev = self.reshape(self.slice(carried, s, s + 1, 0), (K - 1, C))
            xx = self.op("Concat", [prev, self.slice(self.val(x), r0, r0 + ns, 0)], axis=0)  # [K-1+ns, C]
            y = None
            for j in range(K):
                term = self.op("Mul", [self.slice(xx, j, j + ns, 0), taps[j]])
                y = term if y is None else self.op("Add", [y, term])
            ys.append(y)
            news.append(self.reshape(self.slice(xx, ns, ns + K - 1, 0), (1, K - 1, C)))
        out = f"conv_out{i}"
        new = news[0] if len(news) == 1 else self.op("Concat", news, axis=0)
        self.value_infos[out] = ("f16", (self.S, K - 1, C))
        self.nodes.append(self._identity(new, out))
        self.writebacks.append(Writeback(out, "conv", i))
        return ys[0] if len(ys) == 1 else self.op("Concat", ys, axis=0)


def lower(graph: Graph, kv_cells: dict[int, int]) -> Lowered:
    """The ONNX form of ``graph`` (weights still unnamed values: `Lowered.model` adds them).
    ``kv_cells``: cells per slot of each KV state the graph attends over."""
    return _Lowering(graph, kv_cells, graph.layout.n_seq).run()


# -- what the host feeds ------------------------------------------------------------------------


def rope_tables(positions: np.ndarray, spec) -> tuple[np.ndarray, np.ndarray]:
    theta, mscale = rope_thetas(positions, spec)
    mag = mscale * spec.attn_factor
    n = len(positions)
    return (
        (np.cos(theta) * mag).astype(np.float16).reshape(n, 1, -1),
        (np.sin(theta) * mag).astype(np.float16).reshape(n, 1, -1),
    )


def kv_mask(state, inputs, groups, cells: int, window: int | None) -> np.ndarray:
    """[n, S*cells + n]: which cached cells (as they were before the pass) and which of the
    pass's rows each row sees, as `cera.graph.ops.attention` defines it."""
    S = len(groups)
    n = len(inputs.positions)
    mask = np.full((n, S * cells + n), NEG, np.float32)
    for s, (r0, ns) in enumerate(groups):
        slot, start = int(inputs.slots[s]), int(inputs.starts[s])
        qpos = inputs.positions[r0 : r0 + ns].astype(np.int64)
        c = np.arange(max(0, start + ns - cells), start)  # cached cells the ring still holds after the write
        cpos = state.positions(slot)[c].astype(np.int64)
        vis = (cpos[None, :] >= 0) & (cpos[None, :] <= qpos[:, None])
        if window:
            vis &= qpos[:, None] - cpos[None, :] < window
        mask[r0 : r0 + ns, s * cells + c % cells] = np.where(vis, 0.0, NEG)
        j = np.arange(max(0, ns - cells), ns)  # this pass's rows the ring keeps
        npos = qpos[j]
        vis = npos[None, :] <= qpos[:, None]
        if window:
            vis &= qpos[:, None] - npos[None, :] < window
        mask[r0 : r0 + ns, S * cells + r0 + j] = np.where(vis, 0.0, NEG)
    return mask.astype(np.float16)


def full_mask(inputs, groups, causal: bool, window: int | None) -> np.ndarray:
    n = len(inputs.positions)
    mask = np.full((n, n), NEG, np.float32)
    for r0, ns in groups:
        pos = inputs.positions[r0 : r0 + ns].astype(np.int64)
        vis = np.ones((ns, ns), bool)
        if causal:
            vis = pos[None, :] <= pos[:, None]
        if window:
            vis &= np.abs(pos[:, None] - pos[None, :]) < window
        mask[r0 : r0 + ns, r0 : r0 + ns] = np.where(vis, 0.0, NEG)
    return mask.astype(np.float16)
