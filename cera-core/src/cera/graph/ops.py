"""The op table: the one source of truth for cera's op vocabulary.

Every op a family may use is one `OpDef` here: its name, its arguments (tensors, weights,
state), its attributes, the rule that gives its output shape (and refuses inputs that do
not fit), when it is a view, whether it changes state, whether it reads strided input, the
codes of its enumerated attributes, and a numpy reference of what it computes. Everything
else comes from this table: the `cera.graph.builder.GraphBuilder` methods check shapes with it, the reference backend
(`cera.testing.reference`) runs the references, the conformance suite tests every backend
op by op against them, and `cera plugins` / `cera inspect` list the vocabulary from it.

Conventions (all backends):

- Activations are float32 row-major tensors, ``[n_tokens, dim]`` or ``[n_tokens, heads,
  head_dim]``; token ids, positions and the ids `argmax`/`top_k` return are int32.
- A weight of GGUF shape ``(ne0=in, ne1=out)`` is used as ``y = x @ W.T``: `linear` maps
  ``[n, in] -> [n, out]``. References see weights dequantized to float32 in numpy order
  (the reverse of GGML's).
- Ops that touch per-sequence state (`attention`, `conv1d_causal`, `ssm_scan`,
  `gated_delta_net`, `cross_attention`, `store_cross`) get a handle to a declared piece of state
  (`cera.state`), never a bare layer number; the rows of a batch are grouped by sequence
  (`cera.graph.builder.Layout`), and each sequence has its own slot of that state.

The references are written for clarity, in float64 where sums are long, from the
definitions in llama.cpp / ggml and the papers; they are slow on purpose.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from ..errors import ShapeError

# -- specs shared by families and backends --------------------------------------------------


@attrs.frozen
class RopeSpec:
    """How one attention layer rotates its queries and keys.

    ``n_dims`` is the number of rotated dimensions at the start of each head (the rest
    pass through). ``neox`` pairs dimension i with i + n_dims/2 (GPT-NeoX style, used by
    qwen2, gemma, phi3, ...); otherwise i pairs with i+1 (original llama). Frequencies
    follow llama.cpp's rope_yarn: theta_i = pos * base^(-2i/n_dims) / freq_factors[i],
    interpolated by ``freq_scale`` (1/linear factor) with the YaRN ramp when
    ``ext_factor`` is non-zero, and the result multiplied by ``attn_factor``.
    """

    n_dims: int
    base: float = 10000.0
    neox: bool = False
    freq_scale: float = 1.0
    freq_factors: tuple[float, ...] | None = None
    ext_factor: float = 0.0
    attn_factor: float = 1.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    n_ctx_orig: int = 0

    def __attrs_post_init__(self):
        # Checked here, where every family's RoPE passes: a file's values must not reach a
        # kernel as NaN frequencies or a count that overflows its int32.
        if not (isinstance(self.n_dims, int) and 0 <= self.n_dims < 2**31 and self.n_dims % 2 == 0):
            raise ShapeError(f"rope: n_dims {self.n_dims} must be even and non-negative")
        if not (math.isfinite(self.base) and self.base > 0 and math.isfinite(self.freq_scale) and self.freq_scale > 0):
            raise ShapeError(f"rope: base {self.base} and frequency scale {self.freq_scale} must be positive numbers")
        if not all(math.isfinite(v) for v in (self.ext_factor, self.attn_factor, self.beta_fast, self.beta_slow)):
            raise ShapeError("rope: the YaRN factors must be finite")
        if not 0 <= self.n_ctx_orig < 2**31:
            raise ShapeError(f"rope: original context {self.n_ctx_orig} must be in [0, 2^31)")
        if self.freq_factors is not None and not all(math.isfinite(v) and v != 0 for v in self.freq_factors):
            raise ShapeError("rope: frequency factors must be finite and non-zero")


@attrs.frozen
class AttentionSpec:
    """One attention layer's masking and scaling.

    ``window``: sliding-window size; a key at position p_k is visible from a query at p_q
    when ``0 <= p_q - p_k < window`` (llama.cpp's standard SWA). None: full causal.
    ``softcap``: soft-capping of the attention logits (gemma2), applied to the scaled
    logits: ``softcap * tanh(scale * q.k / softcap)``, as llama.cpp's flash attention does.
    ``causal``: for attention without a cache (`attention_full`), whether a row sees only
    rows at or before its own position (False: bidirectional, as encoders).
    """

    scale: float
    window: int | None = None
    softcap: float | None = None
    causal: bool = True

    def __attrs_post_init__(self):
        if not math.isfinite(self.scale):
            raise ShapeError(f"attention: scale {self.scale} must be a finite number")
        if self.window is not None and not 0 < self.window < 2**31:
            raise ShapeError(f"attention: a sliding window of {self.window} must be in [1, 2^31)")
        if self.softcap is not None and not (math.isfinite(self.softcap) and self.softcap >= 0):
            raise ShapeError(f"attention: soft-cap {self.softcap} must be a non-negative number")


UNARY_KINDS = ("silu", "gelu", "gelu_erf", "relu", "sigmoid", "softplus")
GLU_KINDS = ("swiglu", "geglu")
MOE_GATINGS = ("softmax", "sigmoid")
MOE_ACTIVATIONS = ("silu", "gelu")


# -- the table ------------------------------------------------------------------------------


@attrs.frozen
class Arg:
    """One argument of an op: ``kind`` is "tensor" (float32 activation), "ids" (int32
    tensor), "weight" (an uploaded weight), "operand" (a tensor or a weight, broadcast
    over rows) or "state" (a handle to declared per-sequence state)."""

    name: str
    kind: str
    optional: bool = False


@attrs.frozen
class OpDef:
    """One op of the vocabulary, with every property a backend or the core's planning needs.

    ``view``: a predicate ``(args, attrs) -> bool`` saying when the output is its first
    argument's values seen differently (no computation, no buffer of its own); None when
    the op always computes. ``writes_state``: the op changes per-sequence state, so it runs
    even when nothing reads its output. ``strided``: the op reads a row-strided view of a
    tensor as it is (others get a contiguous copy). ``choices``: for an attribute that names
    one of a fixed set (an activation, a gating), the set; a value's code (`code`) is its
    position there, which is what every backend's kernels switch on, so the order is part
    of the kernels' interface (new values go at the end)."""

    name: str
    args: tuple[Arg, ...]
    attrs: tuple[str, ...]
    shape: Callable[..., tuple[tuple[int, ...], str]]  # (input shapes..., attrs) -> (shape, dtype)
    reference: Callable[..., np.ndarray]  # (ctx, input arrays..., attrs) -> array
    doc: str
    state_kind: str | None = None  # the state declaration kind a "state" argument must be
    view: Callable[..., bool] | None = None
    writes_state: bool = False
    strided: bool = False
    choices: dict[str, tuple[str, ...]] = attrs.field(factory=dict)

    def is_view(self, args, attributes) -> bool:
        """Whether a node of this op with these arguments is a view (see the class docstring)."""
        return self.view is not None and bool(self.view(*args, **attributes))

    def code(self, attr: str, value: str) -> int:
        """The kernel code of ``value`` for the enumerated attribute ``attr``."""
        known = self.choices[attr]
        if value not in known:
            raise ShapeError(f"{self.name}: {attr} {value!r} is not one of {', '.join(known)}")
        return known.index(value)

    def codes(self, attr: str) -> dict[str, int]:
        """Every value of the enumerated attribute ``attr`` with its kernel code."""
        return {v: i for i, v in enumerate(self.choices[attr])}


OPS: dict[str, OpDef] = {}


def op(name: str, args: str, attributes: str = "", *, shape: Callable, state_kind: str | None = None,
       view: Callable[..., bool] | None = None, writes_state: bool = False, strided: bool = False,
       choices: dict[str, tuple[str, ...]] | None = None):  # fmt: skip
    """Register the decorated reference as op ``name``. ``args``: "x:tensor w:weight
    b:weight?" (a trailing ? marks an optional argument); ``attributes``: names; ``shape``:
    the shape rule; the rest as `OpDef`."""

    parsed = []
    for item in args.split():
        arg_name, kind = item.split(":")
        optional = kind.endswith("?")
        parsed.append(Arg(arg_name, kind.rstrip("?"), optional))

    def register(fn):
        OPS[name] = OpDef(
            name=name,
            args=tuple(parsed),
            attrs=tuple(attributes.split()),
            shape=shape,
            reference=fn,
            doc=(fn.__doc__ or "").strip(),
            state_kind=state_kind,
            view=view,
            writes_state=writes_state,
            strided=strided,
            choices=dict(choices or {}),
        )
        return fn

    return register


def names() -> tuple[str, ...]:
    """The op vocabulary, in table order."""
    return tuple(OPS)


# -- shape rules --------------------------------------------------------------------------
# Each takes the input shapes (None for an absent optional input) and the attributes, and
# returns (output shape, dtype) or raises ShapeError naming what does not fit.


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise ShapeError(msg)


def _rows_like(x, what):
    _need(len(x) >= 1, f"{what}: expected at least a 1-D tensor, got shape {x}")
    return x


def _shape_embedding(table, ids, **_):
    _need(len(table) == 2, f"embedding: the table must be 2-D, has GGML shape {table}")
    _need(len(ids) == 1, f"embedding: ids must be 1-D, got shape {ids}")
    return (ids[0], table[0]), "f32"


def _shape_linear(x, w, bias=None, **_):
    _need(len(w) == 2, f"linear: the weight has GGML shape {w}; a 2-D matrix is needed (experts go to moe)")
    _need(len(x) >= 1 and x[-1] == w[0], f"linear: input has {x[-1] if x else '?'} features but the weight {w} takes {w[0]}")
    if bias is not None:
        _need(math.prod(bias) == w[1], f"linear: a bias of {math.prod(bias)} values for {w[1]} outputs")
    return tuple(x[:-1]) + (w[1],), "f32"


def _shape_norm(x, w=None, b=None, **_):
    _rows_like(x, "norm")
    for p, what in ((w, "weight"), (b, "bias")):
        if p is not None:
            _need(math.prod(p) == x[-1], f"norm: a {what} of {math.prod(p)} values for rows of {x[-1]}")
    return tuple(x), "f32"


def _shape_rope(x, positions, spec: RopeSpec, **_):
    _need(len(x) == 3, f"rope expects [n_tokens, n_heads, head_dim], got shape {x}")
    _need(positions == (x[0],), f"rope: {positions} positions for {x[0]} tokens")
    _need(spec.n_dims % 2 == 0 and 0 < spec.n_dims <= x[2], f"rope: n_dims {spec.n_dims} must be even and at most the head dimension {x[2]}")
    if spec.freq_factors is not None:
        _need(len(spec.freq_factors) >= spec.n_dims // 2, f"rope: {len(spec.freq_factors)} freq_factors for {spec.n_dims} rotated dimensions (need n_dims/2)")
    return tuple(x), "f32"


def _shape_attention(q, k, v, state=None, spec=None, **_):
    _need(len(q) == 3 and len(k) == 3 and len(v) == 3, f"attention expects 3-D q, k, v, got {q}, {k}, {v}")
    _need(k[0] == v[0] and k[1] == v[1] and k[2] == q[2], f"attention: q {q}, k {k}, v {v} do not fit together")
    _need(k[1] > 0 and q[1] % k[1] == 0, f"attention: {q[1]} query heads cannot be grouped onto {k[1]} KV heads")
    return (q[0], q[1] * v[2]), "f32"


def _shape_attention_cached(q, k, v, state, spec, **_):
    shape, dtype = _shape_attention(q, k, v)
    _need(q[0] == k[0], f"attention: {q[0]} query rows but {k[0]} new keys (the cache holds the rest)")
    return shape, dtype


def _shape_cross_attention(q, state, spec, **_):
    _need(len(q) == 3, f"cross_attention expects q [n, heads, dim], got {q}")
    return (q[0], None), "f32"  # width filled in by the builder from the state declaration


def _shape_store_cross(k, v, state, **_):
    _need(len(k) == 3 and len(v) == 3 and k[:2] == v[:2], f"store_cross: k {k} and v {v} do not fit together")
    return (0,), "f32"


def _shape_same(x, **_):
    return tuple(x), "f32"


def _shape_glu(gate, up, **_):
    _need(tuple(gate) == tuple(up), f"glu: gate {gate} and up {up} differ")
    return tuple(gate), "f32"


def _shape_binary(a, b, **_):
    try:
        out = np.broadcast_shapes(tuple(a), tuple(b))
    except ValueError:
        raise ShapeError(f"elementwise op on shapes {a} and {b} that do not broadcast") from None
    _need(tuple(out) == tuple(a), f"elementwise op: the second operand {b} may not widen the first {a}")
    return tuple(a), "f32"


def _shape_argmax(x, **_):
    _rows_like(x, "argmax")
    return tuple(x[:-1]), "i32"


def _shape_top_k(x, k, **_):
    _rows_like(x, "top_k")
    _need(0 < k <= x[-1], f"top_k: k={k} of {x[-1]} values")
    return tuple(x[:-1]) + (k,), "i32"


def _shape_take(x, ids, **_):
    _need(tuple(x[:-1]) == tuple(ids[:-1]), f"take: values {x} and ids {ids} have different rows")
    return tuple(ids), "f32"


def _shape_concat(a, b, axis=-1, **_):
    _need(len(a) == len(b), f"concat: {a} and {b} have different ranks")
    ax = axis % len(a)
    _need(all(x == y for i, (x, y) in enumerate(zip(a, b, strict=True)) if i != ax), f"concat: {a} and {b} differ off axis {axis}")
    out = list(a)
    out[ax] = a[ax] + b[ax]
    return tuple(out), "f32"


def _shape_rows(x, index, **_):
    _need(len(x) >= 1, f"rows: a 0-D tensor {x}")
    _need(all(0 <= i < x[0] for i in index), f"rows: indices {index} outside the {x[0]} rows")
    return (len(index),) + tuple(x[1:]), "f32"


def _shape_seq_mean(x, groups, **_):
    _need(len(x) == 2, f"seq_mean expects [n_tokens, dim], got {x}")
    _need(sum(n for _, n in groups) <= x[0], f"seq_mean: groups {groups} outside {x[0]} rows")
    return (len(groups), x[1]), "f32"


def _shape_reshape(x, shape, **_):
    _need(math.prod(shape) == math.prod(x), f"reshape: {x} has {math.prod(x)} values, {shape} needs {math.prod(shape)}")
    return tuple(shape), "f32"


def _shape_slice(x, start, length, **_):
    _need(0 <= start and start + length <= x[-1], f"slice: [{start}, {start + length}) outside a last dimension of {x[-1]}")
    return tuple(x[:-1]) + (length,), "f32"


def _shape_conv1d_causal(x, w, state, **_):
    _need(len(x) == 2, f"conv1d_causal expects [n_tokens, channels], got {x}")
    _need(len(w) == 2 and w[1] == x[1], f"conv1d_causal: weight of GGML shape {w} for {x[1]} channels (needs [kernel, channels])")
    return tuple(x), "f32"


def _shape_conv1d(x, w, bias=None, stride=1, padding=0, **_):
    _need(len(x) == 2, f"conv1d expects [n_frames, in_channels], got {x}")
    _need(len(w) == 3 and w[1] == x[1], f"conv1d: weight of GGML shape {w} for {x[1]} input channels (needs [kernel, in, out])")
    _need(stride >= 1 and padding >= 0, f"conv1d: stride {stride}, padding {padding}")
    n_out = (x[0] + 2 * padding - w[0]) // stride + 1
    _need(n_out >= 1, f"conv1d: {x[0]} frames are fewer than the kernel of {w[0]}")
    if bias is not None:
        _need(math.prod(bias) == w[2], f"conv1d: a bias of {math.prod(bias)} for {w[2]} output channels")
    return (n_out, w[2]), "f32"


def _shape_ssm_scan(x, dt, A, B, C, state, **_):
    _need(len(x) == 3, f"ssm_scan: x must be [n, heads, head_dim], got {x}")
    n, H, _ = x
    _need(tuple(dt) == (n, H), f"ssm_scan: dt {dt} for x {x} (needs [n, heads])")
    _need(math.prod(A) == H, f"ssm_scan: A has {math.prod(A)} values for {H} heads")
    _need(len(B) == 3 and tuple(B) == tuple(C) and B[0] == n and H % B[1] == 0, f"ssm_scan: B {B} / C {C} for x {x} (need [n, groups, state_dim], heads a multiple of groups)")
    return tuple(x), "f32"


def _shape_gated_delta_net(q, k, v, g, beta, state, **_):
    _need(len(q) == 3 and tuple(k) == tuple(q), f"gated_delta_net: q {q} / k {k} must be one shape [n, key_heads, dim]")
    _need(len(v) == 3 and v[0] == q[0] and v[2] == q[2] and v[1] % q[1] == 0,
          f"gated_delta_net: v {v} for q {q} (needs [n, value_heads, dim], value heads a multiple of key heads)")
    _need(tuple(g) == tuple(v[:2]) and tuple(beta) == tuple(v[:2]),
          f"gated_delta_net: g {g} / beta {beta} for v {v} (need [n, value_heads])")
    return tuple(v), "f32"


def _shape_moe(x, router, gate, up, down, selection_bias=None, k=1, groups=1, groups_used=1, **_):
    _need(len(x) == 2, f"moe expects [n_tokens, dim], got {x}")
    _need(len(router) == 2 and router[0] == x[1], f"moe: router of GGML shape {router} for inputs of {x[1]}")
    n_expert = router[1]
    _need(len(gate) == 3 and gate[2] == n_expert and tuple(up) == tuple(gate) and len(down) == 3 and down[2] == n_expert, f"moe: expert tensors {gate}, {up}, {down} for {n_expert} experts")
    _need(gate[0] == x[1] and down[0] == gate[1], f"moe: expert tensors {gate}, {down} for inputs of {x[1]}")
    _need(0 < k <= n_expert, f"moe: k={k} experts per token out of {n_expert}")
    used = groups_used
    _need(groups <= 1 or (n_expert % groups == 0 and 0 < used <= groups and k <= used * (n_expert // groups)),
          f"moe: {n_expert} experts in {groups} groups, {used} of them used, cannot give k={k}")  # fmt: skip
    return (x[0], down[1]), "f32"




# -- views --------------------------------------------------------------------------------
# A view predicate takes the node's graph arguments and attributes.


def _always(*_, **__) -> bool:
    return True


def _rows_view(x, *, index) -> bool:
    """`rows` of one run of consecutive rows of a contiguous tensor is a view of them."""
    return x.contiguous and all(b == a + 1 for a, b in zip(index, index[1:], strict=False))


# -- references -----------------------------------------------------------------------------
# ctx (a `RunContext`) carries the batch: positions, the sequence groups and their state
# slots. Inputs arrive as numpy arrays (weights dequantized, numpy order).


@attrs.define
class RunContext:
    """What a reference (or an eager kernel) sees of the pass in progress."""

    positions: np.ndarray  # int32 [n_tokens]
    groups: tuple[tuple[int, int], ...]  # per sequence: (first row, rows)
    slots: np.ndarray  # int32 [n_seq]: the state slot of each sequence
    starts: np.ndarray  # int32 [n_seq]: cells each sequence held before this pass
    state: Any = None  # a cera.state.HostState (or None for stateless graphs)
    kv_f16: bool = True


def _f64(x):
    return np.asarray(x, dtype=np.float64)


@op("embedding", "table:weight ids:ids", shape=_shape_embedding)
def embedding(ctx, table, ids):
    """Rows ``ids`` of an embedding table: ``[n] -> [n, dim]``."""
    return np.asarray(table, np.float32)[np.asarray(ids, np.int64)]


@op("linear", "x:tensor w:weight bias:weight?", shape=_shape_linear, strided=True)
def linear(ctx, x, w, bias=None):
    """``x @ W.T (+ bias)``: ``[..., in] -> [..., out]``. A GGML vector ``{in}`` (one row) is a
    one-output projection."""
    w = _f64(w)
    y = _f64(x) @ (w.reshape(1, -1) if w.ndim == 1 else w).T
    if bias is not None:
        y = y + _f64(bias).reshape(-1)
    return y.astype(np.float32)


@op("rms_norm", "x:tensor w:operand?", "eps", shape=_shape_norm)
def rms_norm(ctx, x, w=None, *, eps):
    """``x / sqrt(mean(x^2) + eps) (* w)`` over the last dimension."""
    x = _f64(x)
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    if w is not None:
        y = y * _f64(w).reshape(-1)
    return y.astype(np.float32)


@op("layer_norm", "x:tensor w:operand? b:operand?", "eps", shape=_shape_norm)
def layer_norm(ctx, x, w=None, b=None, *, eps):
    """``(x - mean) / sqrt(var + eps) (* w) (+ b)`` over the last dimension."""
    x = _f64(x)
    mean = x.mean(axis=-1, keepdims=True)
    y = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
    if w is not None:
        y = y * _f64(w).reshape(-1)
    if b is not None:
        y = y + _f64(b).reshape(-1)
    return y.astype(np.float32)


def rope_thetas(pos: np.ndarray, spec: RopeSpec) -> tuple[np.ndarray, float]:
    """theta[t, i] and the magnitude scale of llama.cpp's rope_yarn, in float64."""
    n_dims = spec.n_dims
    i = np.arange(n_dims // 2, dtype=np.float64)
    inv = spec.base ** (-2.0 * i / n_dims)
    ff = np.ones_like(i) if spec.freq_factors is None else np.asarray(spec.freq_factors[: n_dims // 2], np.float64)
    extrap = np.asarray(pos, np.float64)[:, None] * inv[None, :] / ff[None, :]
    interp = spec.freq_scale * extrap
    mscale = 1.0
    if spec.ext_factor != 0.0:

        def corr(beta):
            return n_dims * math.log(spec.n_ctx_orig / (beta * 2 * math.pi)) / (2 * math.log(spec.base))

        low = max(0.0, math.floor(corr(spec.beta_fast)))
        high = min(n_dims - 1.0, math.ceil(corr(spec.beta_slow)))
        ramp = 1 - np.clip((i - low) / max(0.001, high - low), 0, 1)
        mix = ramp * spec.ext_factor
        theta = interp * (1 - mix) + extrap * mix
        mscale = 1.0 + 0.1 * math.log(1.0 / spec.freq_scale)
    else:
        theta = interp
    return theta, mscale


def rotate(x: np.ndarray, pos: np.ndarray, spec: RopeSpec, unit: bool = False) -> np.ndarray:
    """`rope` on float64 values. ``unit``: rotate only, without the magnitude scaling
    (to move already rotated keys by a position delta after a context shift)."""
    theta, mscale = rope_thetas(pos, spec)
    mag = 1.0 if unit else mscale * spec.attn_factor
    c = np.cos(theta)[:, None, :] * mag
    s = np.sin(theta)[:, None, :] * mag
    x = _f64(x)
    y = x.copy()
    n = spec.n_dims
    if spec.neox:
        x0, x1 = x[..., : n // 2], x[..., n // 2 : n]
        y[..., : n // 2] = x0 * c - x1 * s
        y[..., n // 2 : n] = x0 * s + x1 * c
    else:
        x0, x1 = x[..., 0:n:2], x[..., 1:n:2]
        y[..., 0:n:2] = x0 * c - x1 * s
        y[..., 1:n:2] = x0 * s + x1 * c
    return y


@op("rope", "x:tensor positions:ids", "spec", shape=_shape_rope)
def rope(ctx, x, positions, *, spec):
    """Rotary position embedding of ``x [n, heads, head_dim]`` at ``positions``."""
    return rotate(x, positions, spec).astype(np.float32)


def _attend(q, k, v, visible, spec: AttentionSpec) -> np.ndarray:
    """q [n, H, dk], k [m, Hkv, dk], v [m, Hkv, dv], visible [n, m] -> [n, H * dv]."""
    n, H, _ = q.shape
    group = H // k.shape[1]
    out = np.zeros((n, H, v.shape[2]))
    for t in range(n):
        idx = np.nonzero(visible[t])[0]
        if not len(idx):
            continue
        for h in range(H):
            g = h // group
            s = k[idx, g] @ q[t, h] * spec.scale
            if spec.softcap:
                s = spec.softcap * np.tanh(s / spec.softcap)
            e = np.exp(s - s.max())
            out[t, h] = (e / e.sum()) @ v[idx, g]
    return out.reshape(n, -1)


@op("attention", "q:tensor k:tensor v:tensor state:state", "spec", state_kind="kv", writes_state=True,
    shape=_shape_attention_cached)
def attention(ctx, q, k, v, state, *, spec):
    """Store this pass's keys/values ``[n, kv_heads, dim]`` in each sequence's cache, then
    attend each query ``[n, heads, dk]`` over the visible cells of its own sequence: a cell
    at position p_k is visible from p_q when p_k <= p_q (and p_q - p_k < window). Query
    heads are grouped onto KV heads (h uses KV head h // (heads / kv_heads)). Returns
    ``[n, heads * dv]``."""
    out = np.zeros((q.shape[0], q.shape[1] * v.shape[2]), np.float32)
    for s, (r0, n) in enumerate(ctx.groups):
        slot, start = int(ctx.slots[s]), int(ctx.starts[s])
        kv = ctx.state.kv(state, slot)
        kv.write(start, k[r0 : r0 + n], v[r0 : r0 + n])
        cells = np.arange(max(0, start + n - kv.capacity), start + n)  # what the cache still holds
        kc, vc = kv.read(cells)
        cpos = ctx.state.positions(slot)[cells]
        qpos = ctx.positions[r0 : r0 + n]
        visible = (cpos[None, :] >= 0) & (cpos[None, :] <= qpos[:, None])
        if spec.window:
            visible &= qpos[:, None] - cpos[None, :] < spec.window
        out[r0 : r0 + n] = _attend(_f64(q[r0 : r0 + n]), kc, vc, visible, spec)
    return out


@op("attention_full", "q:tensor k:tensor v:tensor", "spec", shape=_shape_attention)
def attention_full(ctx, q, k, v, *, spec):
    """Attention without a cache, within each sequence of the batch: every row sees the
    rows of its own sequence (only those at or before it when ``spec.causal``). For
    encoders (bidirectional) and for prompts that need no cache."""
    out = np.zeros((q.shape[0], q.shape[1] * v.shape[2]), np.float32)
    for r0, n in ctx.groups:
        pos = ctx.positions[r0 : r0 + n]
        visible = np.ones((n, n), bool)
        if spec.causal:
            visible = pos[None, :] <= pos[:, None]
        if spec.window:
            visible &= np.abs(pos[:, None] - pos[None, :]) < spec.window
        out[r0 : r0 + n] = _attend(_f64(q[r0 : r0 + n]), _f64(k[r0 : r0 + n]), _f64(v[r0 : r0 + n]), visible, spec)
    return out


@op("store_cross", "k:tensor v:tensor state:state", state_kind="cross", writes_state=True, shape=_shape_store_cross)
def store_cross(ctx, k, v, state):
    """Keep ``k``/``v`` ``[m, kv_heads, dim]`` (an encoder's output projected per decoder
    layer) as the cross-attention memory of each sequence; returns nothing."""
    for s, (r0, n) in enumerate(ctx.groups):
        ctx.state.cross(state, int(ctx.slots[s])).store(k[r0 : r0 + n], v[r0 : r0 + n])
    return np.zeros((0,), np.float32)


@op("cross_attention", "q:tensor state:state", "spec shared", state_kind="cross", shape=_shape_cross_attention)
def cross_attention(ctx, q, state, *, spec, shared=False):
    """Attend each query ``[n, heads, dk]`` over all of its sequence's cross-attention
    memory (`store_cross`), unmasked. Returns ``[n, heads * dv]``. ``shared``: every
    sequence of the batch reads the memory of the batch's first sequence (the hypotheses
    of a beam search over one source, which need their own caches but not copies of the
    memory)."""
    outs = []
    for s, (r0, n) in enumerate(ctx.groups):
        mem = ctx.state.cross(state, int(ctx.slots[0 if shared else s]))
        k, v = mem.read()
        outs.append(_attend(_f64(q[r0 : r0 + n]), k, v, np.ones((n, k.shape[0]), bool), spec))
    return np.concatenate(outs).astype(np.float32)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * x * (1 + 0.044715 * x * x)))


def _gelu_erf(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def _silu(x):
    return x / (1 + np.exp(-x))


def activation(kind: str, x: np.ndarray) -> np.ndarray:
    x = _f64(x)
    if kind == "silu":
        return _silu(x)
    if kind == "gelu":
        return _gelu_tanh(x)
    if kind == "gelu_erf":
        return _gelu_erf(x)
    if kind == "relu":
        return np.maximum(x, 0.0)
    if kind == "sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    if kind == "softplus":  # ggml_softplus: the identity above 20
        return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))
    raise ShapeError(f"unknown activation {kind!r} (known: {', '.join(UNARY_KINDS)})")


@op("unary", "x:tensor", "kind", shape=_shape_same, choices={"kind": UNARY_KINDS})
def unary(ctx, x, *, kind):
    """An activation elementwise: "silu", "gelu" (tanh approximation, as ggml_gelu),
    "gelu_erf", "relu", "sigmoid", "softplus" (log(1 + e^x), x itself above 20, as
    ggml_softplus)."""
    return activation(kind, x).astype(np.float32)


@op("glu", "gate:tensor up:tensor", "kind", shape=_shape_glu, choices={"kind": GLU_KINDS})
def glu(ctx, gate, up, *, kind):
    """"swiglu": silu(gate) * up; "geglu": gelu(gate) * up."""
    act = {"swiglu": "silu", "geglu": "gelu"}[kind]
    return (activation(act, gate) * _f64(up)).astype(np.float32)


@op("add", "a:tensor b:operand", shape=_shape_binary)
def add(ctx, a, b):
    """Elementwise sum; ``b`` may be a weight or a tensor broadcast over ``a``'s rows."""
    return (_f64(a) + _f64(b).reshape(_operand_shape(a, b))).astype(np.float32)


@op("mul", "a:tensor b:operand", shape=_shape_binary)
def mul(ctx, a, b):
    """Elementwise product; ``b`` may be a weight or a tensor broadcast over ``a``'s rows."""
    return (_f64(a) * _f64(b).reshape(_operand_shape(a, b))).astype(np.float32)


def _operand_shape(a, b):
    b = np.asarray(b)
    if b.ndim <= a.ndim and np.broadcast_shapes(a.shape, b.shape) == a.shape:
        return b.shape
    return (1,) * (a.ndim - 1) + (b.size,)  # a weight: one row broadcast


@op("scale", "x:tensor", "s", shape=_shape_same)
def scale(ctx, x, *, s):
    """``x * s``."""
    return (_f64(x) * s).astype(np.float32)


@op("softcap", "x:tensor", "cap", shape=_shape_same)
def softcap(ctx, x, *, cap):
    """``cap * tanh(x / cap)``."""
    return (cap * np.tanh(_f64(x) / cap)).astype(np.float32)


@op("softmax", "x:tensor", shape=_shape_same)
def softmax(ctx, x):
    """Softmax over the last dimension."""
    x = _f64(x)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


@op("argmax", "x:tensor", shape=_shape_argmax)
def argmax(ctx, x):
    """Index of the largest value of each row (the lowest index on a tie), int32."""
    return np.argmax(np.asarray(x), axis=-1).astype(np.int32)


@op("top_k", "x:tensor", "k", shape=_shape_top_k)
def top_k(ctx, x, *, k):
    """Indices of the ``k`` largest values of each row, largest first (lower index first
    on a tie), int32 ``[..., k]``."""
    x = np.asarray(x, np.float32)
    order = np.argsort(-x, axis=-1, kind="stable")
    return order[..., :k].astype(np.int32)


@op("take", "x:tensor ids:ids", shape=_shape_take)
def take(ctx, x, ids):
    """Values of each row of ``x`` at ``ids`` (per row): ``[..., k]``."""
    return np.take_along_axis(np.asarray(x, np.float32), np.asarray(ids, np.int64), axis=-1)


@op("concat", "a:tensor b:tensor", "axis", shape=_shape_concat)
def concat(ctx, a, b, *, axis=-1):
    """``a`` and ``b`` joined along ``axis``."""
    return np.concatenate([a, b], axis=axis).astype(np.float32)


@op("rows", "x:tensor", "index", shape=_shape_rows, view=_rows_view, strided=True)
def rows(ctx, x, *, index):
    """The rows ``index`` (a fixed tuple) of ``x``."""
    return np.asarray(x)[list(index)]


@op("seq_mean", "x:tensor", "groups", shape=_shape_seq_mean)
def seq_mean(ctx, x, *, groups):
    """Mean of each sequence's rows: groups ((first row, rows), ...) -> ``[n_seq, dim]``."""
    return np.stack([_f64(x[r0 : r0 + n]).mean(axis=0) for r0, n in groups]).astype(np.float32)


@op("reshape", "x:tensor", "shape", shape=_shape_reshape, view=_always)
def reshape(ctx, x, *, shape):
    """The same values with another shape (row-major)."""
    return np.asarray(x).reshape(shape)


@op("slice", "x:tensor", "start length", shape=_shape_slice, view=_always, strided=True)
def slice_(ctx, x, *, start, length):
    """``x[..., start:start + length]`` (a view: consecutive rows are not adjacent)."""
    return np.asarray(x)[..., start : start + length]


@op("copy", "x:tensor", shape=_shape_same, strided=True)
def copy(ctx, x):
    """A contiguous copy (of a view)."""
    return np.ascontiguousarray(x, dtype=np.float32)


@op("conv1d_causal", "x:tensor w:weight state:state", state_kind="conv", writes_state=True, shape=_shape_conv1d_causal)
def conv1d_causal(ctx, x, w, state):
    """Depthwise causal convolution over the tokens of each sequence:
    ``y[t, c] = sum_j w[c, j] * xx[t + j, c]``, where xx is the sequence's carried last
    ``kernel - 1`` inputs followed by ``x`` (ggml_ssm_conv); the carried inputs advance."""
    x = _f64(x)
    kernel = _f64(w).reshape(x.shape[1], -1)  # [channels, kernel] (files may add unit axes)
    d = kernel.shape[1]
    y = np.zeros_like(x)
    for s, (r0, n) in enumerate(ctx.groups):
        carried = ctx.state.conv(state, int(ctx.slots[s]))
        xx = np.concatenate([carried.astype(np.float64), x[r0 : r0 + n]], axis=0)
        for j in range(d):
            y[r0 : r0 + n] += xx[j : j + n] * kernel[:, j]
        carried[...] = xx[n:]
    return y.astype(np.float32)


@op("conv1d", "x:tensor w:weight bias:weight?", "stride padding", shape=_shape_conv1d)
def conv1d(ctx, x, w, bias=None, *, stride=1, padding=0):
    """A full 1-D convolution over frames (Whisper's front end): x ``[frames, in]``,
    w of GGML shape ``[kernel, in, out]``; zero padding on both sides. Returns
    ``[out_frames, out]``."""
    x = _f64(x)
    kernel = _f64(w)  # numpy [out, in, kernel]
    k = kernel.shape[2]
    xp = np.pad(x, ((padding, padding), (0, 0)))
    n_out = (xp.shape[0] - k) // stride + 1
    y = np.zeros((n_out, kernel.shape[0]))
    for j in range(k):
        y += xp[j : j + stride * n_out : stride] @ kernel[:, :, j].T
    if bias is not None:
        y = y + _f64(bias).reshape(-1)
    return y.astype(np.float32)


@op("ssm_scan", "x:tensor dt:tensor A:operand B:tensor C:tensor state:state", state_kind="ssm", writes_state=True,
    shape=_shape_ssm_scan)
def ssm_scan(ctx, x, dt, A, B, C, state):
    """Mamba-2's selective scan (ggml_ssm_scan with a scalar A per head), token by token
    within each sequence: dt' = softplus(dt); per head h, state = state * exp(dt' A_h) +
    dt' x_h B_g^T; y_h = state C_g (g = h's group). x ``[n, heads, head_dim]``, dt
    ``[n, heads]``, B/C ``[n, groups, state_dim]``; the state is ``[heads, head_dim,
    state_dim]`` per sequence. D and the gate are applied by the family."""
    x, dt, A, B, C = _f64(x), _f64(dt), _f64(A).reshape(-1), _f64(B), _f64(C)
    H = x.shape[1]
    G = B.shape[1]
    hpg = H // G
    y = np.zeros_like(x)
    for s, (r0, n) in enumerate(ctx.groups):
        st = ctx.state.ssm(state, int(ctx.slots[s]))
        cur = st.astype(np.float64)
        for t in range(r0, r0 + n):
            d = np.where(dt[t] <= 20.0, np.log1p(np.exp(np.minimum(dt[t], 20.0))), dt[t])
            for h in range(H):
                g = h // hpg
                cur[h] = cur[h] * math.exp(d[h] * A[h]) + (d[h] * x[t, h])[:, None] * B[t, g][None, :]
                y[t, h] = cur[h] @ C[t, g]
        st[...] = cur
    return y.astype(np.float32)


@op("gated_delta_net", "q:tensor k:tensor v:tensor g:tensor beta:tensor state:state", "grouped", state_kind="ssm",
    writes_state=True, shape=_shape_gated_delta_net)
def gated_delta_net(ctx, q, k, v, g, beta, state, *, grouped=False):
    """The gated delta rule (Qwen3-Next / Qwen3.5 linear attention; ggml_gated_delta_net
    with one decay per head), token by token within each sequence. Per value head h, with
    key head h mod key_heads (Qwen3.5's files, ggml's broadcast), or h // (value_heads /
    key_heads) when ``grouped`` (Qwen3-Next's repeat-interleave), the state M (``[dim_v, dim_k]``, row j = value channel j):
    M = M * exp(g_h); d = (v_h - M k) * beta_h; M = M + d k^T; y_h = (M q) / sqrt(dim).
    q, k ``[n, key_heads, dim]`` (the family normalizes them), v ``[n, value_heads, dim]``,
    g (log decay, <= 0) and beta ``[n, value_heads]``; the state is an `SSMState` of
    ``[value_heads, dim, dim]`` per sequence."""
    q, k, v, g, beta = _f64(q), _f64(k), _f64(v), _f64(g), _f64(beta)
    Hk, Hv, S = q.shape[1], v.shape[1], v.shape[2]
    key_head = [h // (Hv // Hk) if grouped else h % Hk for h in range(Hv)]
    scale = 1.0 / math.sqrt(S)
    y = np.zeros_like(v)
    for s, (r0, n) in enumerate(ctx.groups):
        st = ctx.state.ssm(state, int(ctx.slots[s]))
        M = st.astype(np.float64)
        for t in range(r0, r0 + n):
            for h in range(Hv):
                kh, qh = k[t, key_head[h]], q[t, key_head[h]]
                M[h] *= math.exp(g[t, h])
                d = (v[t, h] - M[h] @ kh) * beta[t, h]
                M[h] += d[:, None] * kh[None, :]
                y[t, h] = (M[h] @ qh) * scale
        st[...] = M
    return y.astype(np.float32)


@op("moe", "x:tensor router:weight gate:weight up:weight down:weight selection_bias:weight?",
    "k gating norm_topk weight_scale activation groups groups_used", shape=_shape_moe,
    choices={"gating": MOE_GATINGS, "activation": MOE_ACTIVATIONS})
def moe(ctx, x, router, gate, up, down, selection_bias=None, *, k, gating="softmax", norm_topk=False, weight_scale=None,
        activation="silu", groups=1, groups_used=1):  # fmt: skip
    """Top-k mixture of experts, as llama.cpp's build_moe_ffn: router logits, then
    probabilities by ``gating`` ("softmax" or "sigmoid"); experts chosen by probability
    (plus ``selection_bias`` when given, which only chooses); the k weights renormalised
    to sum 1 when ``norm_topk`` and multiplied by ``weight_scale``; each chosen expert's
    gated FFN (``activation`` "silu": SwiGLU, "gelu": GeGLU) summed with its weight.
    ``groups`` > 1: group-limited routing (DeepSeek V3's, llama.cpp's expert groups): the
    experts in that many equal groups, each scored by the sum of its two best selection
    values, and only the ``groups_used`` best groups' experts chosen from.
    gate/up are GGML ``[dim, ff, experts]``, down ``[ff, dim, experts]``."""
    x = _f64(x)
    logits = x @ _f64(router).T
    if gating == "softmax":
        e = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs = e / e.sum(axis=-1, keepdims=True)
    else:
        probs = 1.0 / (1.0 + np.exp(-logits))
    select = probs + (_f64(selection_bias).reshape(-1) if selection_bias is not None else 0.0)
    select = limit_groups(select, groups, groups_used)
    top = np.argsort(-select, axis=-1, kind="stable")[:, :k]
    weights = np.take_along_axis(probs, top, axis=-1)
    if norm_topk:
        weights = weights / weights.sum(axis=-1, keepdims=True)
    if weight_scale is not None:
        weights = weights * weight_scale
    act = {"silu": "silu", "gelu": "gelu"}[activation]
    g, u, d = _f64(gate), _f64(up), _f64(down)  # numpy [experts, ff, dim], [experts, dim, ff]
    out = np.zeros((x.shape[0], d.shape[1]))
    for t in range(x.shape[0]):
        for j, e_ in enumerate(top[t]):
            h = activation_fn(act, x[t] @ g[e_].T) * (x[t] @ u[e_].T)
            out[t] += weights[t, j] * (h @ d[e_].T)
    return out.astype(np.float32)


def limit_groups(select: np.ndarray, groups: int, groups_used: int) -> np.ndarray:
    """Selection values ``[n, experts]`` with the experts outside each row's ``groups_used``
    best groups (scored by their two best values) at -inf; as they are for ``groups`` <= 1."""
    if groups <= 1:
        return select
    n, e = select.shape
    grouped = select.reshape(n, groups, e // groups)
    score = np.sort(grouped, axis=-1)[..., -2:].sum(-1)
    keep = np.argsort(-score, axis=-1, kind="stable")[:, :groups_used]
    mask = np.full((n, groups), -np.inf)
    np.put_along_axis(mask, keep, 0.0, axis=-1)
    return (grouped + mask[:, :, None]).reshape(n, e)


# -- mixers beyond one attention per head: products per head (multi-head latent attention),
# a sigmoid gate, Kimi delta attention's recurrence


def _shape_head_linear(x, w, **_):
    _need(len(x) == 3, f"head_linear expects [n, heads, in], got {x}")
    _need(len(w) == 3 and w[0] == x[2] and w[2] == x[1],
          f"head_linear: a weight of GGML shape {w} for inputs {x} (needs [in, out, heads])")  # fmt: skip
    return (x[0], x[1], w[1]), "f32"


@op("head_linear", "x:tensor w:weight", shape=_shape_head_linear)
def head_linear(ctx, x, w):
    """A product per head: ``y[t, h] = W[h] x[t, h]``, x ``[n, heads, in]``, w of GGML shape
    ``[in, out, heads]`` (numpy ``[heads, out, in]``; ggml_mul_mat over the head axis, as
    multi-head latent attention's absorbed key and value projections ``attn_k_b``/``attn_v_b``)."""
    return np.einsum("thi,hoi->tho", _f64(x), _f64(w)).astype(np.float32)


@op("sigmoid_gate", "x:tensor g:tensor", shape=_shape_binary)
def sigmoid_gate(ctx, x, g):
    """``x * sigmoid(g)``, g of x's shape or broadcast over it (``[n, heads, 1]``: one gate
    per head)."""
    g = _f64(g)
    return (_f64(x) * (1.0 / (1.0 + np.exp(-g)))).astype(np.float32)


def _shape_kda(q, k, v, f, b, a, state, **_):
    _need(len(q) == 3 and tuple(k) == tuple(q) and tuple(v) == tuple(q) and tuple(f) == tuple(q),
          f"kda: q {q}, k {k}, v {v} and f {f} must be one shape [n, heads, dim]")  # fmt: skip
    _need(tuple(b) == tuple(q[:2]), f"kda: beta {b} for q {q} (needs [n, heads])")
    _need(math.prod(a) == q[1], f"kda: A has {math.prod(a)} values for {q[1]} heads")
    return tuple(q), "f32"


@op("kda", "q:tensor k:tensor v:tensor f:tensor b:tensor a:weight state:state", "eps lower_bound", state_kind="ssm",
    writes_state=True, shape=_shape_kda)
def kda(ctx, q, k, v, f, b, a, state, *, eps, lower_bound):
    """Kimi delta attention (Bailing MoE V3's linear layers), token by token within each
    sequence: the gated delta rule with a decay per key channel. q and k are L2-normalised
    (``x / sqrt(sum x^2 + eps)``, llama.cpp's build_gdn_l2_norm); the log decay is
    ``g = lower_bound * sigmoid(A_h f)`` (``lower_bound`` < 0), ``beta = sigmoid(b)``; per
    head, with the state M ``[dim_v, dim_k]`` (an `SSMState` of ``[heads, dim, dim]``)::

        M = M * exp(g)[None, :];  d = (v - M k) * beta;  M = M + d k^T;  y = (M q) / sqrt(dim)

    (ggml_gated_delta_net with a per-channel gate)."""
    q, k, v, f, b = _f64(q), _f64(k), _f64(v), _f64(f), _f64(b)
    q = q / np.sqrt((q * q).sum(-1, keepdims=True) + eps)
    k = k / np.sqrt((k * k).sum(-1, keepdims=True) + eps)
    A = _f64(a).reshape(-1)
    g = lower_bound / (1.0 + np.exp(-(f * A[None, :, None])))
    beta = 1.0 / (1.0 + np.exp(-b))
    scale = 1.0 / math.sqrt(q.shape[2])
    y = np.zeros_like(v)
    for s, (r0, n) in enumerate(ctx.groups):
        st = ctx.state.ssm(state, int(ctx.slots[s]))
        M = st.astype(np.float64)  # [heads, dim_v, dim_k]
        for t in range(r0, r0 + n):  # every head at once
            M *= np.exp(g[t])[:, None, :]
            d = (v[t] - np.einsum("hjc,hc->hj", M, k[t])) * beta[t][:, None]
            M += d[:, :, None] * k[t][:, None, :]
            y[t] = np.einsum("hjc,hc->hj", M, q[t]) * scale
        st[...] = M
    return y.astype(np.float32)


def activation_fn(kind, x):
    return activation(kind, x)


__all__ = ["OPS", "OpDef", "Arg", "RopeSpec", "AttentionSpec", "RunContext", "names", "rotate", "activation"]
