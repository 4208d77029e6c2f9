"""The CPU backend's lowerers: how each op of a graph becomes ops of a C plan (csrc/plan.c).

`LOWERERS` is the table, keyed by the op's name in `cera.graph.ops`: per op the function that
appends it to a plan, the C plan ops it may append (the names of plan.c's ``OP_NAMES``,
each appended by the ``cera_plan_<name>`` of csrc/cera_cpu_api.h), and the condition
under which the C kernels take the node as it is (else it runs on the host, through the
op table's reference). An op without an entry always runs on the host. A test checks the
table against plan.c's enum and the op table.

A lowerer takes the executable (`cera_backend_cpu.compile.CpuExecutable`: pointers into
its arena and weights, and ``_keep`` for what a plan op points at) and the plan, with the
step to lower, and returns the C call's status (0: appended).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import numpy as np

from cera.errors import ShapeError
from cera.graph.builder import Tensor, WeightRef
from cera.graph.ops import OPS
from cera.graph.planning import Step

from . import encoder
from .fusion import gated_conv
from ._native import ffi, lib


@attrs.frozen
class Lowerer:
    """One op's lowering: ``lower(exe, plan, step) -> status``; ``c_ops``: the C plan ops
    it may append; ``ready(exe, node) -> bool``: whether the C kernels take the node (by
    default: when every tensor it reads or writes is contiguous)."""

    lower: Callable[..., int]
    c_ops: tuple[str, ...]
    ready: Callable[..., bool] | None = None

    def takes(self, exe, node) -> bool:
        if self.ready is not None:
            return bool(self.ready(exe, node))
        return all(exe._contiguous(t) for t in node.tensors)


def _any(exe, node) -> bool:
    return True


# -- readiness ---------------------------------------------------------------------------------


def _binary_ready(exe, node) -> bool:
    a, b = node.args
    if isinstance(b, WeightRef):
        if b.shape[0] == a.shape[-1] and int(np.prod(b.shape)) == a.shape[-1]:
            return True
        return exe._broadcast_weight(a, b) is not None
    return tuple(b.shape) == tuple(a.shape) or (b.size == a.shape[-1] and b.shape[-1] == a.shape[-1])


def _moe_ready(exe, node) -> bool:
    """The C routing has no expert groups: group-limited routing runs on the host."""
    return node.attrs.get("groups", 1) <= 1 and all(exe._contiguous(t) for t in node.tensors)


def _norm_ready(exe, node) -> bool:
    return all(not isinstance(w, Tensor) or (w.size == node.args[0].shape[-1]) for w in node.args[1:])


# -- lowerers ----------------------------------------------------------------------------------


def _embedding(exe, plan, step: Step) -> int:
    node = step.nodes[0]
    table, ids = node.args
    w = exe.weights[table.name]
    dim, n_rows = w.shape
    return lib.cera_plan_get_rows(
        plan, w.type_id, w.ptr, w.row_bytes, dim, n_rows, exe.ptr(ids, "int32_t *"), ids.size, exe.ptr(node.out)
    )


def _rms_norm(exe, plan, step: Step) -> int:
    node = step.nodes[0]
    x = node.args[0]
    n = x.shape[-1]
    return lib.cera_plan_rms_norm(plan, exe.ptr(x), x.size // n, n, exe.operand(node.args[1]), node.attrs["eps"],
                                  exe.ptr(node.out))  # fmt: skip


def _layer_norm(exe, plan, step: Step) -> int:
    node = step.nodes[0]
    x = node.args[0]
    n = x.shape[-1]
    return lib.cera_plan_layer_norm(
        plan, exe.ptr(x), x.size // n, n, exe.operand(node.args[1]), exe.operand(node.args[2]), node.attrs["eps"],
        exe.ptr(node.out),
    )  # fmt: skip


def _rope(exe, plan, step: Step) -> int:
    node = step.nodes[0]
    x, pos = node.args
    spec = node.attrs["spec"]
    n, heads, head_dim = x.shape
    ff = ffi.NULL
    if spec.freq_factors is not None:
        arr = np.asarray(spec.freq_factors, np.float32)
        exe._keep.append(arr)
        ff = ffi.from_buffer("float[]", arr)
    return lib.cera_plan_rope(
        plan, exe.ptr(x), exe.ptr(node.out), n, heads, head_dim, exe.ptr(pos, "int32_t *"), spec.n_dims,
        int(spec.neox), spec.base, spec.freq_scale, ff, spec.ext_factor, spec.attn_factor, spec.beta_fast,
        spec.beta_slow, spec.n_ctx_orig,
    )  # fmt: skip


def _unary(exe, plan, step: Step) -> int:
    node = step.nodes[0]
    code = OPS["unary"].code("kind", node.attrs["kind"])
    return lib.cera_plan_unary(plan, code, exe.ptr(node.args[0]), exe.ptr(node.out), node.out.size)


def _glu(exe, plan, step: Step) -> int:
    node = step.nodes[0]
    g, u = node.args
    code = OPS["glu"].code("kind", node.attrs["kind"])
    return lib.cera_plan_glu(plan, code, exe.ptr(g), exe.ptr(u), exe.ptr(node.out), node.out.size)


BINARY_CODES = {"add": 0, "mul": 1}  # csrc/cera_cpu_api.h: cera_binary's op


def _binary(exe, plan, step: Step) -> int:
    node = step.nodes[0]
    a, b = node.args
    out = node.out
    code = BINARY_CODES[node.op]
    if isinstance(b, Tensor) and tuple(b.shape) == tuple(a.shape):
        return lib.cera_plan_binary(plan, code, exe.ptr(a), exe.ptr(b), 0, exe.ptr(out), 1, a.size)
    if isinstance(b, WeightRef) and int(np.prod(b.shape)) != a.shape[-1]:
        row = exe._broadcast_weight(a, b)  # e.g. one value per head over [n, heads, dim]
        exe._keep.append(row)
        return lib.cera_plan_binary(plan, code, exe.ptr(a), ffi.from_buffer("float[]", row), 0, exe.ptr(out),
                                    a.shape[0], row.size)  # fmt: skip
    n = a.shape[-1]
    return lib.cera_plan_binary(plan, code, exe.ptr(a), exe.operand(b), 0, exe.ptr(out), a.size // n, n)


def _scale(exe, plan, step: Step) -> int:
    node = step.nodes[0]
    return lib.cera_plan_scale(plan, exe.ptr(node.args[0]), node.attrs["s"], exe.ptr(node.out), node.out.size)


def _softcap(exe, plan, step: Step) -> int:
    node = step.nodes[0]
    return lib.cera_plan_softcap(plan, exe.ptr(node.args[0]), node.attrs["cap"], exe.ptr(node.out), node.out.size)


def _copy(exe, plan, step: Step) -> int:
    node = step.nodes[0]
    x = node.args[0]
    rows = x.size // x.shape[-1]
    return lib.cera_plan_copy_rows(plan, exe.ptr(x), exe.place[x.id].row_stride, rows, x.shape[-1], exe.ptr(node.out))


def _rows(exe, plan, step: Step) -> int:
    """rows with an index that is not one run of rows (else a view): a copy per run."""
    node = step.nodes[0]
    x = node.args[0]
    idx = node.attrs["index"]
    row = x.size // x.shape[0] if x.shape[0] else 0
    stride = exe.place[x.id].row_stride if x.ndim == 2 else row
    src, dst = exe._addr(x), exe._addr(node.out)
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


def _argmax(exe, plan, step: Step) -> int:
    node = step.nodes[0]
    x = node.args[0]
    return lib.cera_plan_argmax(plan, exe.ptr(x), x.size // x.shape[-1], x.shape[-1], exe.ptr(node.out, "int32_t *"))


def _top_k(exe, plan, step: Step) -> int:
    node = step.nodes[0]
    x = node.args[0]
    return lib.cera_plan_top_k(plan, exe.ptr(x), x.size // x.shape[-1], x.shape[-1], node.attrs["k"],
                               exe.ptr(node.out, "int32_t *"))  # fmt: skip


def _take(exe, plan, step: Step) -> int:
    node = step.nodes[0]
    x, ids = node.args
    return lib.cera_plan_take(plan, exe.ptr(x), x.size // x.shape[-1], x.shape[-1], exe.ptr(ids, "int32_t *"),
                              ids.shape[-1], exe.ptr(node.out))  # fmt: skip


def _lora_pairs(exe, member, adapted) -> None:
    """A member's LoRA terms (`cera.graph.builder.AdaptedProduct`) as its cera_lora pairs,
    and the bias added after them."""
    pairs = ffi.new("cera_lora[]", len(adapted.terms))
    for p, (ax, bax, _scale, _add), s in zip(pairs, adapted.terms, adapted.scales, strict=True):
        a, b = exe.weights[ax.args[1].name], exe.weights[bax.args[1].name]
        p.a_type, p.a, p.a_row_bytes = a.type_id, a.ptr, a.row_bytes
        p.b_type, p.b, p.b_row_bytes = b.type_id, b.ptr, b.row_bytes
        p.rank, p.scale = ax.out.shape[-1], s
    exe._keep.append(pairs)
    member.lora, member.n_lora = pairs, len(adapted.terms)
    if adapted.bias_add is not None:
        member.bias = exe.operand(adapted.bias_add.args[1])


def _products(exe, plan, step: Step) -> int:
    """A step of products of one input (with its glu or residual epilogue) as one C op."""
    first = step.nodes[0]
    x = first.args[0]
    K = x.shape[-1]
    M = x.size // K
    members = ffi.new("cera_product[]", len(step.nodes))
    for m, node, out in zip(members, step.nodes, step.outs, strict=True):
        _, wref, bias = node.args
        w = exe.weights[wref.name]
        if len(w.shape) not in (1, 2):
            raise ShapeError(f"linear: weight {w.name!r} has shape {w.shape}; a 2-D matrix is needed")
        n_out = w.shape[1] if len(w.shape) == 2 else 1  # a GGML vector {n} is one row: a one-output projection
        if len(w.shape) == 2 and tuple(wref.shape) != w.shape:  # its first rows (GraphBuilder.head_weight)
            if len(wref.shape) != 2 or wref.shape[0] != w.shape[0] or not 0 < wref.shape[1] <= w.shape[1]:
                raise ShapeError(f"linear: weight {w.name!r} of shape {w.shape} used as {tuple(wref.shape)}")
            n_out = wref.shape[1]
        m.wtype, m.w, m.w_row_bytes, m.N = w.type_id, w.ptr, w.row_bytes, n_out
        m.y, m.y_stride = exe.ptr(out), n_out
        m.bias = exe.operand(bias)
    for m, adapted in zip(members, step.adapters or (), strict=False):
        if adapted is not None:
            _lora_pairs(exe, m, adapted)
    if step.residual is not None:
        add, k, other = step.residual
        members[k].residual = exe.ptr(other)
        members[k].out = exe.ptr(add.out)
    glu_op, glu_out, glu_stride = -1, ffi.NULL, 0
    if step.glu is not None:
        glu_op = OPS["glu"].code("kind", step.glu.attrs["kind"])
        glu_out, glu_stride = exe.ptr(step.glu.out), members[0].N
    exe._keep.append(members)
    return lib.cera_plan_products(
        plan, exe.ptr(x), exe.place[x.id].row_stride, K, M, members, len(step.nodes), glu_op, glu_out,
        glu_stride, int(exe.per_row),
    )  # fmt: skip


def _attention(exe, plan, step: Step) -> int:
    node = step.nodes[0]
    q, k, v, ref = node.args
    spec = node.attrs["spec"]
    state = exe._template
    if state is None:
        raise ShapeError("attention needs a state to compile against")
    ki, vi, *koff = exe.table_index[ref.index]
    groups = exe.graph.layout.groups
    rows = np.array([x for g in groups for x in g], np.int64)
    a = ffi.new("cera_attention_seqs *")
    a.q, a.k, a.v, a.out = exe.ptr(q), exe.ptr(k), exe.ptr(v), exe.ptr(node.out)
    a.n_heads, a.n_kv_heads, a.k_dim, a.v_dim = q.shape[1], k.shape[1], k.shape[2], v.shape[2]
    a.capacity, a.n_ctx = state.k[ref.index].shape[2], state.n_ctx
    a.kv_type, a.acc_f16 = exe.kv_code, int(exe.acc_f16)
    a.k_index, a.v_index, a.pos_index = ki, vi, 0
    a.koff_index = koff[0] if koff else -1
    a.n_slots = state.n_slots
    a.q_pos = exe.ptr(exe.graph.inputs["positions"], "int32_t *")
    a.scale, a.softcap, a.window = float(spec.scale), float(spec.softcap or 0.0), int(spec.window or 0)
    a.n_seq = len(groups)
    a.per_row = exe.per_row
    a.rows = ffi.from_buffer("int64_t[]", rows)
    a.slots, a.starts = exe._slots_p, exe._starts_p
    return lib.cera_plan_attention(plan, a)


def _recurrent(exe, plan, step: Step) -> int:
    """conv1d_causal / ssm_scan: each sequence reads and advances its slot of the state."""
    node = step.nodes[0]
    ref = node.args[-1]
    state = exe._template
    if state is None:
        raise ShapeError(f"{node.op} needs a state to compile against")
    (index,) = exe.table_index[ref.index]
    if node.op == "conv1d_causal":
        x, w, _ = node.args
        wt = np.ascontiguousarray(exe.weights[w.name].dense().T)  # [kernel, channels]
        exe._keep.append(wt)
        a = ffi.new("cera_conv_causal_args *")
        a.x, a.wt, a.y = exe.ptr(x), ffi.from_buffer("float[]", wt), exe.ptr(node.out)
        a.channels, a.kernel = x.shape[1], wt.shape[0]
        fn = lib.cera_plan_conv_causal
    else:
        x, dt, A, B, C, _ = node.args
        a = ffi.new("cera_ssm_scan_args *")
        a.x, a.dt, a.A, a.B, a.C, a.y = (exe.ptr(x), exe.ptr(dt), exe.operand(A), exe.ptr(B), exe.ptr(C),
                                         exe.ptr(node.out))  # fmt: skip
        a.n_heads, a.head_dim, a.n_groups, a.d_state = x.shape[1], x.shape[2], B.shape[1], B.shape[2]
        fn = lib.cera_plan_ssm_scan
    a.state_index, a.n_slots = index, state.n_slots
    a.n_seq, a.rows, a.slots = exe.graph.layout.n_seq, exe._seq_rows(), exe._slots_p
    exe._keep.append(a)
    return fn(plan, a)


def _delta_net(exe, plan, step: Step) -> int:
    """gated_delta_net: each sequence reads and advances its slot of the state."""
    node = step.nodes[0]
    q, k, v, g, beta, ref = node.args
    if exe._template is None:
        raise ShapeError("gated_delta_net needs a state to compile against")
    (index,) = exe.table_index[ref.index]
    a = ffi.new("cera_delta_net_args *")
    a.q, a.k, a.v, a.g, a.beta, a.y = (exe.ptr(q), exe.ptr(k), exe.ptr(v), exe.ptr(g), exe.ptr(beta),
                                       exe.ptr(node.out))  # fmt: skip
    a.key_heads, a.value_heads, a.dim = q.shape[1], v.shape[1], v.shape[2]
    a.grouped = int(bool(node.attrs["grouped"]))
    a.state_index, a.n_slots = index, exe._template.n_slots
    a.n_seq, a.rows, a.slots = exe.graph.layout.n_seq, exe._seq_rows(), exe._slots_p
    exe._keep.append(a)
    return lib.cera_plan_delta_net(plan, a)


def _moe(exe, plan, step: Step) -> int:
    node = step.nodes[0]
    x, router, gate, up, down, bias = node.args
    attributes = node.attrs
    ws = exe.weights
    r, g, u, d = ws[router.name], ws[gate.name], ws[up.name], ws[down.name]
    if len(g.shape) != 3 or g.shape != u.shape or d.shape != (g.shape[1], g.shape[0], g.shape[2]):
        raise ShapeError(f"moe: expert tensors {g.shape}, {u.shape}, {d.shape} do not fit together")
    moe = OPS["moe"]
    a = ffi.new("cera_moe_args *")
    a.x, a.out = exe.ptr(x), exe.ptr(node.out)
    a.n_tok, a.dim, a.n_ff, a.n_expert = x.size // x.shape[-1], g.shape[0], g.shape[1], g.shape[2]
    a.router_type, a.router, a.router_row_bytes = r.type_id, r.ptr, r.row_bytes
    a.gate_type, a.gate, a.gate_row_bytes = g.type_id, g.ptr, g.row_bytes
    a.up_type, a.up, a.up_row_bytes = u.type_id, u.ptr, u.row_bytes
    a.down_type, a.down, a.down_row_bytes = d.type_id, d.ptr, d.row_bytes
    a.selection_bias = exe.operand(bias)
    a.k, a.gating = attributes["k"], moe.code("gating", attributes["gating"])
    a.norm_topk = int(bool(attributes["norm_topk"]))
    a.act, a.per_row = moe.code("activation", attributes["activation"]), int(exe.per_row)
    a.weight_scale = float(attributes["weight_scale"] or 0.0)
    exe._keep.append(a)
    return lib.cera_plan_moe(plan, a)


def _encoder(exe, plan, step: Step) -> int:
    return encoder.lower_encoder_op(exe, plan, step.nodes[0])


# -- the table ---------------------------------------------------------------------------------

LOWERERS: dict[str, Lowerer] = {
    "embedding": Lowerer(_embedding, ("get_rows",)),
    "linear": Lowerer(_products, ("products",), _any),  # a step of products (plan_steps groups them)
    "rms_norm": Lowerer(_rms_norm, ("rms_norm",), _norm_ready),
    "layer_norm": Lowerer(_layer_norm, ("layer_norm",), _norm_ready),
    "rope": Lowerer(_rope, ("rope",)),
    "attention": Lowerer(_attention, ("attention",)),
    "unary": Lowerer(_unary, ("unary",)),
    "glu": Lowerer(_glu, ("glu",)),
    "add": Lowerer(_binary, ("binary",), _binary_ready),
    "mul": Lowerer(_binary, ("binary",), _binary_ready),
    "scale": Lowerer(_scale, ("scale",)),
    "softcap": Lowerer(_softcap, ("softcap",)),
    "copy": Lowerer(_copy, ("copy_rows",), _any),
    "rows": Lowerer(_rows, ("copy_rows",), _any),
    "argmax": Lowerer(_argmax, ("argmax",)),
    "top_k": Lowerer(_top_k, ("top_k",)),
    "take": Lowerer(_take, ("take",)),
    "conv1d": Lowerer(_encoder, ("conv1d",)),
    "attention_full": Lowerer(_encoder, ("attention_full",)),
    "cross_attention": Lowerer(_encoder, ("cross_attention",)),
    "store_cross": Lowerer(_encoder, ("store_cross",)),
    "conv1d_causal": Lowerer(_recurrent, ("conv_causal",)),
    "ssm_scan": Lowerer(_recurrent, ("ssm_scan",)),
    "gated_delta_net": Lowerer(_delta_net, ("delta_net",)),
    "moe": Lowerer(_moe, ("moe",), _moe_ready),
}

# The ops with a C kernel here (the rest run on the host between C segments).
C_OPS = frozenset(LOWERERS)


def _gated_conv(exe, plan, step: Step, parts) -> int:
    """A fused gated short convolution (fusion.py): conv_causal reading b, h and c in place."""
    conv = parts.conv
    ref = conv.args[-1]
    if exe._template is None:
        raise ShapeError("conv1d_causal needs a state to compile against")
    (index,) = exe.table_index[ref.index]
    w = conv.args[1]
    wt = np.ascontiguousarray(exe.weights[w.name].dense().T)  # [kernel, channels]
    exe._keep.append(wt)
    a = ffi.new("cera_conv_causal_args *")
    a.x, a.b, a.c = exe.ptr(parts.h), exe.ptr(parts.b), exe.ptr(parts.c)
    a.x_stride = exe.place[parts.h.id].row_stride
    a.wt, a.y = ffi.from_buffer("float[]", wt), exe.ptr(parts.out)
    a.channels, a.kernel = parts.h.shape[1], wt.shape[0]
    a.state_index, a.n_slots = index, exe._template.n_slots
    a.n_seq, a.rows, a.slots = exe.graph.layout.n_seq, exe._seq_rows(), exe._slots_p
    exe._keep.append(a)
    return lib.cera_plan_conv_causal(plan, a)


def lower(exe, plan, step: Step) -> None:
    """Append ``step`` to ``plan`` through its op's lowerer."""
    node = step.nodes[0]
    parts = gated_conv(step)
    if parts is not None:
        rc = _gated_conv(exe, plan, step, parts)
        if rc != 0:
            raise ShapeError(f"cpu compiler: the C plan refused the gated convolution {parts.conv!r} (error {rc})")
        return
    lowerer = LOWERERS.get(node.op)
    if lowerer is None:
        raise ShapeError(f"cpu compiler: no C lowering for {node.op}; it runs on the host")
    rc = lowerer.lower(exe, plan, step)
    if rc != 0:
        raise ShapeError(f"cpu compiler: the C plan refused {node!r} (error {rc})")


def takes(exe, step: Step) -> bool:
    """Whether the C kernels take this step as it is (else it runs on the host)."""
    if gated_conv(step) is not None:
        return True
    lowerer = LOWERERS.get(step.nodes[0].op)
    return lowerer is not None and lowerer.takes(exe, step.nodes[0])


__all__ = ["C_OPS", "LOWERERS", "Lowerer", "lower", "takes"]
