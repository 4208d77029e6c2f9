"""The backend-neutral graph: what a family's forward pass builds.

A family writes its forward pass with the op vocabulary (`cera.graph.ops`) as method calls on a
`GraphBuilder`; each call checks shapes with the op table and adds one `Node`. Nothing
is computed: the result is a `Graph` with declared inputs (token ids, positions, and the
sequence slots the runtime fills in) and declared outputs (logits, argmax, top-k, hidden
states, ... as the caller asked, see `Outputs`). Backends compile a graph once per shape
class (`Layout` and `Outputs`) and run it for every step of that shape; the core does
what every backend would otherwise repeat: validation, dead-code removal, liveness and
buffer planning, fusion (`cera.graph.planning`), and an eager interpreter (`run_eager`).

A batch holds one or more sequences, each a run of consecutive rows (`Layout`): a decode
step of four sessions is four sequences of one token; a prompt is one sequence of many.
Stateful ops (attention with a cache, convolutions with carried inputs, SSM scans) work
per sequence, each in the state slot the runtime assigns it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import numpy as np

from ..errors import ShapeError, UnsupportedOperation
from .ops import GLU_KINDS, OPS, UNARY_KINDS, AttentionSpec, RopeSpec, RunContext
from ..state import StateRef

# -- shape classes -----------------------------------------------------------------------------


@attrs.frozen(cache_hash=True)  # a key of the compiled-graph cache, hashed every pass
class Layout:
    """The rows of a batch, by sequence: ``seq_lens[i]`` consecutive rows for sequence i.

    ``exact_rows``: compute every row as a one-token step would (products with the one-row
    kernels, attention row by row), so the outputs equal those of feeding the tokens one at
    a time, bit for bit (speculative decoding verifies a draft this way). A decode batch
    (several sequences of one token) always computes this way.

    ``prompt_rows``: compute every row with the prompt kernels (many-row products, attention
    in tiles) however few rows the pass has, so the rows of a long prompt come out the same
    however the prompt is cut into passes (a prompt-cache hit evaluates only the rest, and
    must give what evaluating it all gives). Otherwise the kernels are chosen by the row
    count, as llama.cpp chooses them.

    ``embeds``: the rows enter as embedding vectors (graph input ``embeds``, an image
    encoder's output) instead of token ids; see `GraphBuilder.token_embeddings`."""

    seq_lens: tuple[int, ...] = attrs.field(converter=tuple)
    exact_rows: bool = False
    prompt_rows: bool = False
    embeds: bool = False

    def __attrs_post_init__(self):
        if not self.seq_lens or any((not isinstance(n, int)) or n < 1 for n in self.seq_lens):
            raise ShapeError(f"a batch layout needs one or more sequences of at least one token, got {self.seq_lens}")

    @classmethod
    def single(cls, n_tokens: int) -> Layout:
        return cls((int(n_tokens),))

    @property
    def n_tokens(self) -> int:
        return sum(self.seq_lens)

    @property
    def n_seq(self) -> int:
        return len(self.seq_lens)

    @property
    def groups(self) -> tuple[tuple[int, int], ...]:
        starts = itertools.accumulate((0,) + self.seq_lens[:-1])
        return tuple(zip(starts, self.seq_lens, strict=True))

    @property
    def last_rows(self) -> tuple[int, ...]:
        return tuple(r0 + n - 1 for r0, n in self.groups)

    @property
    def is_decode_batch(self) -> bool:
        """Several sequences of one token each: its products must keep each row's own
        arithmetic (a sequence's tokens do not depend on who shares its batch)."""
        return self.n_seq > 1 and all(n == 1 for n in self.seq_lens)

    @property
    def row_exact(self) -> bool:
        """Whether every row is computed as a one-token step computes it."""
        return self.exact_rows or self.is_decode_batch

    @property
    def row_mode(self) -> int:
        """How backends pick kernels: 0 by the row count, 1 one-token arithmetic for every
        row (`row_exact`), 2 prompt kernels for every row (`prompt_rows`)."""
        return 1 if self.row_exact else 2 if self.prompt_rows else 0


EMBEDS = "embeds"  # the graph input of a layout of embeddings (Layout.embeds)
OUTPUT_KINDS = ("logits", "argmax", "top_k", "hidden", "pooled")


@attrs.frozen(cache_hash=True)  # a key of the compiled-graph cache, hashed every pass
class Outputs:
    """What a forward pass returns: any of "logits", "argmax", "top_k" (ids and values of
    the k largest logits), "hidden" (last-layer states after the final norm) and "pooled"
    (their mean per sequence); for the ``rows`` "last" (each sequence's last row) or
    "all". No kinds: nothing is read back (a prompt chunk whose logits nobody reads).

    ``vocab``: the logits (and what derives from them) cover token ids below this only;
    the output head computes those rows of its weight alone (0: every token). A draft
    model proposes from its vocabulary's frequent tokens this way
    (`cera.generation.draft_model`)."""

    kinds: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    rows: str = "last"
    k: int = 0
    vocab: int = 0

    def __attrs_post_init__(self):
        bad = [k for k in self.kinds if k not in OUTPUT_KINDS]
        if bad:
            raise ShapeError(f"unknown output kinds {bad}; known: {', '.join(OUTPUT_KINDS)}")
        if self.rows not in ("last", "all"):
            raise ShapeError(f"output rows must be 'last' or 'all', not {self.rows!r}")
        if "top_k" in self.kinds and self.k < 1:
            raise ShapeError("top_k output needs k >= 1")
        if not isinstance(self.vocab, int) or self.vocab < 0:
            raise ShapeError(f"output vocab must be a non-negative integer, got {self.vocab!r}")

    @property
    def wants_logits(self) -> bool:
        return bool({"logits", "argmax", "top_k"} & set(self.kinds))

    @property
    def wants_hidden(self) -> bool:
        return bool({"hidden", "pooled"} & set(self.kinds))


NONE = Outputs()
LAST_LOGITS = Outputs(("logits",))
ALL_LOGITS = Outputs(("logits",), rows="all")
ARGMAX = Outputs(("argmax",))


# -- nodes ---------------------------------------------------------------------------------------


@attrs.frozen
class WeightRef:
    """A weight as the graph sees it: its name and stored type and GGML shape (ne0 first).
    The backend binds the name to its uploaded copy when it compiles the graph."""

    name: str
    ggml_type: str
    shape: tuple[int, ...] = attrs.field(converter=tuple)

    @property
    def numpy_shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.shape))


@attrs.define(eq=False, repr=False)
class Tensor:
    """A value of the graph: made by a node (or a graph input), with a static shape.

    ``contiguous`` is False for a view whose rows are not adjacent (a slice of the last
    dimension); ops other than `linear` get a contiguous copy of such a view."""

    id: int
    shape: tuple[int, ...]
    dtype: str  # "f32" or "i32"
    node: Node | None = None
    contiguous: bool = True
    name: str | None = None  # graph inputs

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * 4

    def __repr__(self) -> str:
        what = f"input {self.name!r}" if self.node is None else self.node.op
        return f"<Tensor %{self.id} {self.dtype}{list(self.shape)} from {what}>"


@attrs.define(eq=False, repr=False)
class Node:
    id: int
    op: str
    args: tuple  # Tensor | WeightRef | StateRef | None, in the op table's order
    attrs: dict[str, Any]
    out: Tensor

    @property
    def tensors(self) -> list[Tensor]:
        return [a for a in self.args if isinstance(a, Tensor)]

    @property
    def weights(self) -> list[WeightRef]:
        return [a for a in self.args if isinstance(a, WeightRef)]

    @property
    def state(self) -> StateRef | None:
        for a in self.args:
            if isinstance(a, StateRef):
                return a
        return None

    def __repr__(self) -> str:
        args = ", ".join(
            f"%{a.id}" if isinstance(a, Tensor) else a.name if isinstance(a, WeightRef) else f"state{a.index}" if isinstance(a, StateRef) else "None"
            for a in self.args
        )
        extra = "".join(f", {k}={v!r}" for k, v in self.attrs.items())
        return f"%{self.out.id} = {self.op}({args}{extra}) : {self.out.dtype}{list(self.out.shape)}"


# Ops whose effect on state must happen even if nobody reads their result.
SIDE_EFFECT_OPS = frozenset(name for name, d in OPS.items() if d.writes_state)
# Ops that take a row-strided view as is; every other op gets a contiguous copy.
STRIDED_OK = frozenset(name for name, d in OPS.items() if d.strided)


@attrs.define
class Graph:
    """A built forward pass. ``nodes`` are in a valid execution order (the family's)."""

    nodes: list[Node]
    inputs: dict[str, Tensor]
    outputs: dict[str, Tensor]
    layout: Layout
    requested: Outputs
    n_states: int = 0
    # the products with LoRA terms, each with the nodes that add them (`AdaptedProduct`)
    adapted: tuple = ()

    def ops_used(self) -> set[str]:
        return {n.op for n in self.nodes}

    def weights_used(self) -> dict[str, WeightRef]:
        return {w.name: w for n in self.nodes for w in n.weights}

    def describe(self) -> str:
        return "\n".join(repr(n) for n in self.nodes)


@attrs.frozen(eq=False)
class AdaptedProduct:
    """A product with LoRA terms, as `GraphBuilder.linear` builds it in llama.cpp's order:
    ``base`` (W x), then per adapter ``(A x, B(A x), its scale, the add)`` in ``terms``, then
    ``bias_add`` (or None); ``out`` is the last of these. A backend may run the whole as one
    step (the nodes in between are read by nothing else); the others run the nodes as
    they are."""

    base: Node
    terms: tuple[tuple[Node, Node, Node, Node], ...]
    bias_add: Node | None

    @property
    def nodes(self) -> tuple[Node, ...]:
        """The nodes after ``base``, in order."""
        tail = (self.bias_add,) if self.bias_add is not None else ()
        return tuple(n for term in self.terms for n in term) + tail

    @property
    def out(self) -> Tensor:
        return self.nodes[-1].out

    @property
    def scales(self) -> tuple[float, ...]:
        return tuple(term[2].attrs["s"] for term in self.terms)


# -- building ------------------------------------------------------------------------------------


class GraphBuilder:
    """Records a forward pass. Methods mirror `cera.graph.ops` (one node per call) and return
    `Tensor`s; shapes are checked as the graph is built, so a family's mistake shows as a
    `ShapeError` naming the op, at the line that made it.

    ``g.tokens`` and ``g.positions`` are the batch's inputs; ``g.layout`` its sequences;
    ``g.requested`` the outputs the caller wants (a family's head hands its final hidden
    states and logits to `emit_hidden` / `emit_logits`, which add what is asked for)."""

    def __init__(self, layout: Layout, outputs: Outputs = LAST_LOGITS):
        self.layout = layout
        self.requested = outputs
        self.nodes: list[Node] = []
        self._ids = itertools.count()
        self.inputs: dict[str, Tensor] = {}
        self.outputs: dict[str, Tensor] = {}
        self._row_selected: set[int] = set()
        self._states: set[int] = set()
        # LoRA pairs by the weight they adapt (`cera.adapters.active.ActiveAdapters.by_target`),
        # and the weights adapted so far: `linear` and `embedding` add ``s * B(Ax)`` beside them
        self.adapters: dict = {}
        self.adapted: set[str] = set()
        self._adapted_products: list[AdaptedProduct] = []
        n = layout.n_tokens
        self.tokens = self.input("tokens", (n,), "i32")
        self.positions = self.input("positions", (n,), "i32")

    # -- inputs and outputs ----------------------------------------------------------------------

    def input(self, name: str, shape: tuple[int, ...], dtype: str = "f32") -> Tensor:
        """Declare a per-run input (tokens and positions exist already; an encoder declares
        its features)."""
        if name in self.inputs:
            raise ShapeError(f"graph input {name!r} declared twice")
        t = Tensor(next(self._ids), tuple(int(d) for d in shape), dtype, None, True, name)
        self.inputs[name] = t
        return t

    def output(self, name: str, t: Tensor) -> None:
        if name in self.outputs:
            raise ShapeError(f"graph output {name!r} set twice")
        self.outputs[name] = t

    def output_rows(self, x: Tensor) -> Tensor:
        """The rows whose outputs are wanted: each sequence's last (``requested.rows ==
        "last"``) or all. Families call it in their last layer, after attention has
        stored every row's keys, so the rest of that layer runs on these rows only (as
        llama.cpp does); calling it again (on a tensor whose rows were already chosen) is
        harmless."""
        if x.id in self._row_selected or x.shape[0] != self.layout.n_tokens:
            return x
        if self.requested.rows == "all" or "pooled" in self.requested.kinds or not self.requested.kinds:
            out = x
        else:
            want = self.layout.last_rows
            out = x if want == tuple(range(x.shape[0])) else self.rows(x, want)
        self._row_selected.add(out.id)
        return out

    @property
    def wants_logits(self) -> bool:
        return self.requested.wants_logits

    @property
    def wants_hidden(self) -> bool:
        return self.requested.wants_hidden

    def emit_hidden(self, h: Tensor) -> None:
        """The last layer's hidden states after the final norm, as asked."""
        kinds = self.requested.kinds
        if "hidden" in kinds:
            self.output("hidden", h)
        if "pooled" in kinds:
            self.output("pooled", self.seq_mean(h))

    def head_weight(self, w: WeightRef) -> WeightRef:
        """The output head's weight ``w`` (GGML shape ``[n_embd, n_vocab]``) as the
        requested outputs need it: its first ``requested.vocab`` rows where that asks for
        fewer tokens than it holds (a row prefix of the stored weight), else ``w``."""
        n = self.requested.vocab
        if not n or len(w.shape) != 2 or n >= w.shape[1]:
            return w
        return WeightRef(w.name, w.ggml_type, (w.shape[0], n))

    def emit_logits(self, logits: Tensor) -> None:
        """Logits of the output rows, and what is derived from them on the device."""
        kinds = self.requested.kinds
        n = self.requested.vocab
        if n and logits.shape[-1] > n:
            raise UnsupportedOperation(
                f"this model's output head computes all {logits.shape[-1]} tokens' logits; it does not limit them "
                f"to the first {n} (its family does not take the weight through GraphBuilder.head_weight)"
            )
        if "logits" in kinds:
            self.output("logits", logits)
        if "argmax" in kinds:
            self.output("argmax", self.argmax(logits))
        if "top_k" in kinds:
            k = min(self.requested.k, logits.shape[-1])
            ids = self.top_k(logits, k)
            self.output("top_k_ids", ids)
            self.output("top_k_values", self.take(logits, ids))

    # -- the generic node maker ----------------------------------------------------------------

    def _node(self, op: str, args: tuple, **attributes) -> Tensor:
        spec = OPS[op]
        if len(args) > len(spec.args):
            raise ShapeError(f"{op}: {len(args)} arguments for {len(spec.args)}")
        args = tuple(args) + (None,) * (len(spec.args) - len(args))
        fixed = []
        shapes = []
        for a, arg in zip(args, spec.args, strict=True):
            if a is None:
                if not arg.optional:
                    raise ShapeError(f"{op}: argument {arg.name!r} is required")
                fixed.append(None)
                shapes.append(None)
                continue
            if arg.kind == "state":
                if not isinstance(a, StateRef):
                    raise ShapeError(f"{op}: argument {arg.name!r} must be a state handle (cera.state.StateRef), got {a!r}")
                if a.kind != spec.state_kind:
                    raise ShapeError(f"{op}: needs {spec.state_kind!r} state, got a {a.kind!r} declaration")
                self._states.add(a.index)
                fixed.append(a)
                shapes.append(a)
                continue
            if isinstance(a, WeightRef):
                if arg.kind not in ("weight", "operand"):
                    raise ShapeError(f"{op}: argument {arg.name!r} must be a tensor, got weight {a.name!r}")
                fixed.append(a)
                shapes.append(a.shape if arg.kind == "weight" else a.numpy_shape)
                continue
            if not isinstance(a, Tensor):
                raise ShapeError(f"{op}: argument {arg.name!r} must be a graph tensor or weight, got {type(a).__name__}")
            if arg.kind == "weight":
                raise ShapeError(f"{op}: argument {arg.name!r} must be a weight, got a tensor")
            want_dtype = "i32" if arg.kind == "ids" else "f32"
            if a.dtype != want_dtype:
                raise ShapeError(f"{op}: argument {arg.name!r} must be {want_dtype}, got {a.dtype}")
            if not a.contiguous and op not in STRIDED_OK:
                a = self.copy(a)
            fixed.append(a)
            shapes.append(a.shape)
        try:
            out_shape, dtype = spec.shape(*shapes, **attributes)
        except TypeError as e:
            raise ShapeError(f"{op}: {e}") from None
        out_shape = tuple(out_shape)
        contiguous = True
        if op == "slice":
            src = fixed[0]
            rows = math.prod(src.shape[:-1])
            contiguous = (src.contiguous and (rows == 1 or out_shape[-1] == src.shape[-1]))
        elif op in ("reshape", "rows"):
            contiguous = True
        out = Tensor(next(self._ids), out_shape, dtype, None, contiguous)
        node = Node(len(self.nodes), op, tuple(fixed), dict(attributes), out)
        out.node = node
        self.nodes.append(node)
        return out

    # -- the vocabulary ------------------------------------------------------------------------

    def embedding(self, table: WeightRef, ids: Tensor) -> Tensor:
        out = self._node("embedding", (table, ids))
        pairs = self.adapters.get(table.name) if self.adapters else None
        if pairs:  # llama.cpp's order: rows of the transposed A, then B, scaled, added
            for pair, s in pairs:
                out = self.add(out, self.scale(self._node("linear", (self._node("embedding", (pair.a, ids)), pair.b)), s))
            self.adapted.add(table.name)
        return out

    def token_embeddings(self, table: WeightRef) -> Tensor:
        """The rows' input vectors: ``table``'s rows of the batch's tokens, or, for a layout
        of embeddings (``layout.embeds``), the graph input ``embeds`` ``[n_tokens, width]``
        (an image encoder's rows, fed as they are). A family that calls this takes images."""
        if self.layout.embeds:
            return self.input(EMBEDS, (self.layout.n_tokens, table.shape[0]))
        return self.embedding(table, self.tokens)

    def linear(self, x: Tensor, w: WeightRef, bias: WeightRef | None = None) -> Tensor:
        pairs = self.adapters.get(w.name) if self.adapters else None
        if not pairs or pairs[0][0].embedding:
            return self._node("linear", (x, w, bias))
        # llama.cpp's order of operations: W x, then each adapter's s * B(A x), then the bias
        out = self._node("linear", (x, w))
        base = out.node
        terms = []
        for pair, s in pairs:
            ax = self._node("linear", (x, pair.a))
            bax = self._node("linear", (ax, pair.b))
            scaled = self.scale(bax, s)
            out = self.add(out, scaled)
            terms.append((ax.node, bax.node, scaled.node, out.node))
        self.adapted.add(w.name)
        if bias is not None:
            out = self.add(out, bias)
        self._adapted_products.append(AdaptedProduct(base, tuple(terms), out.node if bias is not None else None))
        return out

    def rms_norm(self, x: Tensor, w=None, eps: float = 1e-6) -> Tensor:
        return self._node("rms_norm", (x, w), eps=float(eps))

    def layer_norm(self, x: Tensor, w=None, b=None, eps: float = 1e-5) -> Tensor:
        return self._node("layer_norm", (x, w, b), eps=float(eps))

    def rope(self, x: Tensor, positions: Tensor, spec: RopeSpec) -> Tensor:
        return self._node("rope", (x, positions), spec=spec)

    def attention(self, q: Tensor, k: Tensor, v: Tensor, state: StateRef, spec: AttentionSpec) -> Tensor:
        decl = state.decl
        if decl is not None and (k.shape[1:] != (decl.n_kv_heads, decl.k_dim) or v.shape[1:] != (decl.n_kv_heads, decl.v_dim)):
            raise ShapeError(
                f"attention: state {state.index} caches K {(decl.n_kv_heads, decl.k_dim)} and V "
                f"{(decl.n_kv_heads, decl.v_dim)} per token, got K {k.shape[1:]} and V {v.shape[1:]}"
            )
        if decl is not None and spec.window != decl.window:
            raise ShapeError(f"attention: the layer's window {spec.window} differs from its state's {decl.window}")
        return self._node("attention", (q, k, v, state), spec=spec)

    def attention_full(self, q: Tensor, k: Tensor, v: Tensor, spec: AttentionSpec) -> Tensor:
        if q.shape[0] != k.shape[0]:
            raise ShapeError(f"attention_full: {q.shape[0]} queries and {k.shape[0]} keys (one sequence per batch group)")
        return self._node("attention_full", (q, k, v), spec=spec)

    def store_cross(self, k: Tensor, v: Tensor, state: StateRef) -> Tensor:
        return self._node("store_cross", (k, v, state))

    def cross_attention(self, q: Tensor, state: StateRef, spec: AttentionSpec, shared: bool = False) -> Tensor:
        """``shared``: all sequences of the batch read the first one's memory (see the op)."""
        decl = state.decl
        if decl.k_dim != q.shape[2] or q.shape[1] % decl.n_kv_heads:
            raise ShapeError(f"cross_attention: q {q.shape} against memory of {decl.n_kv_heads} heads x {decl.k_dim}")
        t = self._node("cross_attention", (q, state), spec=spec, shared=bool(shared))
        t.shape = (q.shape[0], q.shape[1] * decl.v_dim)
        return t

    def unary(self, kind: str, x: Tensor) -> Tensor:
        if kind not in UNARY_KINDS:
            raise UnsupportedOperation(f"no unary op {kind!r} (known: {', '.join(UNARY_KINDS)})")
        return self._node("unary", (x,), kind=kind)

    def glu(self, kind: str, gate: Tensor, up: Tensor) -> Tensor:
        if kind not in GLU_KINDS:
            raise UnsupportedOperation(f"no glu op {kind!r} (known: {', '.join(GLU_KINDS)})")
        return self._node("glu", (gate, up), kind=kind)

    def add(self, a, b) -> Tensor:
        return self._node("add", (a, b))

    def mul(self, a, b) -> Tensor:
        return self._node("mul", (a, b))

    def scale(self, x: Tensor, s: float) -> Tensor:
        return self._node("scale", (x,), s=float(s))

    def softcap(self, x: Tensor, cap: float) -> Tensor:
        return self._node("softcap", (x,), cap=float(cap))

    def softmax(self, x: Tensor) -> Tensor:
        return self._node("softmax", (x,))

    def argmax(self, x: Tensor) -> Tensor:
        return self._node("argmax", (x,))

    def top_k(self, x: Tensor, k: int) -> Tensor:
        return self._node("top_k", (x,), k=int(k))

    def take(self, x: Tensor, ids: Tensor) -> Tensor:
        return self._node("take", (x, ids))

    def concat(self, a: Tensor, b: Tensor, axis: int = -1) -> Tensor:
        return self._node("concat", (a, b), axis=int(axis))

    def rows(self, x: Tensor, index) -> Tensor:
        if isinstance(index, slice):
            index = range(x.shape[0])[index]
        return self._node("rows", (x,), index=tuple(int(i) for i in index))

    def seq_mean(self, x: Tensor) -> Tensor:
        return self._node("seq_mean", (x,), groups=self.layout.groups)

    def reshape(self, x: Tensor, shape: tuple[int, ...]) -> Tensor:
        if not x.contiguous:
            x = self.copy(x)
        return self._node("reshape", (x,), shape=tuple(int(d) for d in shape))

    def split(self, x: Tensor, sizes: tuple[int, ...]) -> list[Tensor]:
        """Consecutive parts of the last dimension (views), e.g. of a fused projection."""
        if sum(sizes) != x.shape[-1]:
            raise ShapeError(f"split: parts {sizes} do not add up to the last dimension {x.shape[-1]}")
        out, start = [], 0
        for s in sizes:
            out.append(self._node("slice", (x,), start=int(start), length=int(s)))
            start += s
        return out

    def copy(self, x: Tensor) -> Tensor:
        return self._node("copy", (x,))

    def conv1d_causal(self, x: Tensor, w: WeightRef, state: StateRef) -> Tensor:
        return self._node("conv1d_causal", (x, w, state))

    def conv1d(self, x: Tensor, w: WeightRef, bias: WeightRef | None = None, stride: int = 1, padding: int = 0) -> Tensor:
        return self._node("conv1d", (x, w, bias), stride=int(stride), padding=int(padding))

    def ssm_scan(self, x: Tensor, dt: Tensor, A, B: Tensor, C: Tensor, state: StateRef) -> Tensor:
        return self._node("ssm_scan", (x, dt, A, B, C, state))

    def head_linear(self, x: Tensor, w: WeightRef) -> Tensor:
        return self._node("head_linear", (x, w))

    def sigmoid_gate(self, x: Tensor, g: Tensor) -> Tensor:
        return self._node("sigmoid_gate", (x, g))

    def kda(self, q: Tensor, k: Tensor, v: Tensor, f: Tensor, b: Tensor, a: WeightRef, state: StateRef, eps: float,
            lower_bound: float) -> Tensor:  # fmt: skip
        decl = state.decl
        if (decl.n_heads, decl.head_dim, decl.state_dim) != (v.shape[1], v.shape[2], q.shape[2]):
            raise ShapeError(f"kda: a state of {decl} for v {v.shape} and q {q.shape}")
        return self._node("kda", (q, k, v, f, b, a, state), eps=float(eps), lower_bound=float(lower_bound))
    def gated_delta_net(self, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: StateRef,
                        grouped: bool = False) -> Tensor:  # fmt: skip
        decl = state.decl
        if (decl.n_heads, decl.head_dim, decl.state_dim) != (v.shape[1], v.shape[2], q.shape[2]):
            raise ShapeError(f"gated_delta_net: a state of {decl} for v {v.shape} and q {q.shape}")
        return self._node("gated_delta_net", (q, k, v, g, beta, state), grouped=bool(grouped))

    def moe(self, x: Tensor, router: WeightRef, gate: WeightRef, up: WeightRef, down: WeightRef, k: int,
            gating: str = "softmax", selection_bias: WeightRef | None = None, norm_topk: bool = False,
            weight_scale: float | None = None, activation: str = "silu", groups: int = 1,
            groups_used: int = 1) -> Tensor:  # fmt: skip
        from .ops import MOE_ACTIVATIONS, MOE_GATINGS

        if gating not in MOE_GATINGS:
            raise UnsupportedOperation(f"moe gating {gating!r} (use one of {', '.join(MOE_GATINGS)})")
        if activation not in MOE_ACTIVATIONS:
            raise UnsupportedOperation(f"moe activation {activation!r} (use one of {', '.join(MOE_ACTIVATIONS)})")
        return self._node(
            "moe", (x, router, gate, up, down, selection_bias), k=int(k), gating=gating, norm_topk=bool(norm_topk),
            weight_scale=None if weight_scale is None else float(weight_scale), activation=activation,
            groups=int(groups), groups_used=int(groups_used),
        )  # fmt: skip

    # -- finishing -------------------------------------------------------------------------------

    def finish(self) -> Graph:
        """The graph of what the outputs need and what changes state (dead nodes removed)."""
        if self.requested.kinds and not self.outputs:
            raise ShapeError(
                f"the forward pass produced none of the requested outputs {list(self.requested.kinds)} "
                f"(a family's head must call emit_logits / emit_hidden)"
            )
        missing = [k for k in self.requested.kinds if not _has_output(self.outputs, k)]
        if missing:
            raise UnsupportedOperation(f"this model does not produce the outputs {missing}")
        live: set[int] = set()
        stack = [t for t in self.outputs.values()]
        stack += [n.out for n in self.nodes if n.op in SIDE_EFFECT_OPS]
        while stack:
            t = stack.pop()
            if t.id in live:
                continue
            live.add(t.id)
            if t.node is not None:
                stack.extend(t.node.tensors)
        nodes = [n for n in self.nodes if n.out.id in live]
        for i, n in enumerate(nodes):
            n.id = i
        adapted = tuple(p for p in self._adapted_products if p.out.id in live)
        return Graph(nodes, dict(self.inputs), dict(self.outputs), self.layout, self.requested, len(self._states),
                     adapted)  # fmt: skip


def _has_output(outputs: dict, kind: str) -> bool:
    return ("top_k_ids" in outputs) if kind == "top_k" else kind in outputs


# -- the eager interpreter -------------------------------------------------------------------------


Kernel = Callable[..., np.ndarray]


def run_eager(
    graph: Graph,
    kernels: Mapping[str, Kernel],
    weights: Mapping[str, Any],
    inputs: Mapping[str, np.ndarray],
    ctx: RunContext,
) -> dict[str, np.ndarray]:
    """Run a graph node by node on the host. ``kernels[op](ctx, *args, **attrs)`` computes
    one op on numpy arrays (weights as ``weights[name]``, whatever form the kernel
    takes); the reference backend passes the op table's references, a backend may pass
    its own per-op kernels to debug its compiled form."""
    values: dict[int, Any] = {}
    for name, t in graph.inputs.items():
        if name not in inputs:
            raise ShapeError(f"graph input {name!r} was not supplied")
        a = np.asarray(inputs[name], np.int32 if t.dtype == "i32" else np.float32)
        if a.shape != t.shape:
            raise ShapeError(f"graph input {name!r} has shape {a.shape}, the graph was built for {t.shape}")
        values[t.id] = a
    for node in graph.nodes:
        fn = kernels.get(node.op)
        if fn is None:
            raise UnsupportedOperation(f"no kernel for op {node.op!r}")
        args = []
        for a in node.args:
            if isinstance(a, Tensor):
                args.append(values[a.id])
            elif isinstance(a, WeightRef):
                args.append(weights[a.name])
            else:
                args.append(a)  # a StateRef or None
        values[node.out.id] = fn(ctx, *args, **node.attrs)
    return {name: np.array(values[t.id], copy=True) for name, t in graph.outputs.items()}


__all__ = [
    "ARGMAX",
    "AdaptedProduct",
    "ALL_LOGITS",
    "EMBEDS",
    "Graph",
    "GraphBuilder",
    "LAST_LOGITS",
    "Layout",
    "NONE",
    "Node",
    "Outputs",
    "Tensor",
    "WeightRef",
    "run_eager",
]
