"""Lowering of the hybrid families' ops: the short convolution, the SSM scan and the gated
delta rule (their
state in the state's device buffers, a slot per sequence) and the experts of a
mixture-of-experts layer."""

from __future__ import annotations

import math

from cera.errors import ShapeError, UnsupportedOperation
from cera.graph.ops import OPS

from .. import wgsl
from ..memory import f32_bits


def _recurrent_state(lw, node, ref, store: str):
    st = lw.template
    if st is None or ref.index not in getattr(st, store, {}):
        raise ShapeError(f"{node.op} needs a state holding its {store.split('_')[0]} state to compile against")
    return getattr(st, store)[ref.index]


def conv1d_causal(lw, node) -> None:
    """A thread per (sequence, channel), reading and advancing the slot's carried
    inputs in the state's device buffer (wgsl.conv_causal)."""
    x, w, ref = node.args
    _recurrent_state(lw, node, ref, "conv_state")
    ch = x.shape[1]
    kernel = lw.weights[w.name].shape[0]
    if kernel > wgsl.CONV_MAX or kernel < 2:
        raise UnsupportedOperation(f"backend 'vulkan': conv1d_causal with a kernel of {kernel} (2 to {wgsl.CONV_MAX})")
    wt = lw.operand(w)  # numpy [channels, kernel]
    mem = lw.mem
    count = mem.n_seq * ch
    params = [count, ch, kernel, lw.off(x), lw.stride(x), lw.off(node.out), wt, mem.seq_off, mem.n_seq]
    lw.emit(("conv_causal",), wgsl.conv_causal, params, -(-count // 64), binds=[("conv", ref.index)],
            label="conv1d_causal")  # fmt: skip


def ssm_scan(lw, node) -> None:
    """A thread per (sequence, head, head element) with its row of the slot's state in
    registers (wgsl.ssm_scan, one variant per state size)."""
    x, dt, A, B, C, ref = node.args
    lw.need_contiguous(node, x, dt, B, C)
    _recurrent_state(lw, node, ref, "ssm_state")
    H, hd = x.shape[1], x.shape[2]
    G, N = B.shape[1], B.shape[2]
    if N > 256:
        raise UnsupportedOperation(f"backend 'vulkan': ssm_scan with a state of {N} values a row (at most 256)")
    mem = lw.mem
    count = mem.n_seq * H * hd
    params = [count, H, hd, G, lw.off(x), lw.off(dt), lw.operand(A), lw.off(B), lw.off(C),
              lw.off(node.out), mem.seq_off, mem.n_seq]  # fmt: skip
    lw.emit(("ssm_scan", N), lambda: wgsl.ssm_scan(N), params, -(-count // 64), binds=[("ssm", ref.index)],
            label="ssm_scan")  # fmt: skip


def kda(lw, node) -> None:
    """A thread per (sequence, head, value row) with its row of the slot's state in
    registers (wgsl.kda, one variant per head dimension)."""
    q, k, v, f, b, A, ref = node.args
    lw.need_contiguous(node, q, k, v, f, b)
    _recurrent_state(lw, node, ref, "ssm_state")
    H, D = q.shape[1], q.shape[2]
    if D > 256:
        raise UnsupportedOperation(f"backend 'vulkan': kda with heads of {D} (at most 256)")
    mem = lw.mem
    count = mem.n_seq * H * D
    at = node.attrs
    params = [count, H, lw.off(q), lw.off(k), lw.off(v), lw.off(f), lw.off(b), lw.operand(A), lw.off(node.out),
              mem.seq_off, mem.n_seq, f32_bits(at["eps"]), f32_bits(at["lower_bound"])]  # fmt: skip
    lw.emit(("kda", D), lambda: wgsl.kda(D), params, -(-count // 64), binds=[("ssm", ref.index)], label="kda")


def head_linear(lw, node) -> None:
    """A thread per output (wgsl.head_linear), the weight as a float constant."""
    x, w = node.args
    n, H, I = x.shape
    O = node.out.shape[2]
    lw.need_contiguous(node, node.out)
    count = n * H * O
    params = [count, H, I, O, lw.off(x), I if lw.contiguous(x) else lw.stride(x), lw.operand(w), lw.off(node.out)]
    lw.emit(("head_linear",), wgsl.head_linear, params, -(-count // 64), label="head_linear")


def sigmoid_gate(lw, node) -> None:
    x, g = node.args
    lw.need_contiguous(node, x, g)
    per = x.size // g.size
    if g.size * per != x.size or (per > 1 and g.shape[-1] != 1):
        raise UnsupportedOperation(f"backend 'vulkan': sigmoid_gate of {x.shape} by {g.shape}")
    params = [x.size, lw.off(x), lw.off(g), lw.off(node.out), per]
    lw.emit(("sigmoid_gate",), wgsl.sigmoid_gate, params, -(-x.size // 64), label="sigmoid_gate")
def gated_delta_net(lw, node) -> None:
    """A thread per (sequence, value head, value channel) with its row of the head's state
    in registers (wgsl.delta_net, one variant per head width)."""
    q, k, v, g, beta, ref = node.args
    lw.need_contiguous(node, q, k, v, g, beta)
    _recurrent_state(lw, node, ref, "ssm_state")
    Hk, Hv, dim = q.shape[1], v.shape[1], v.shape[2]
    if dim > wgsl.DELTA_MAX:
        raise UnsupportedOperation(f"backend 'vulkan': gated_delta_net with heads of {dim} (at most {wgsl.DELTA_MAX})")
    mem = lw.mem
    count = mem.n_seq * Hv * dim
    params = [count, Hv, Hk, int(bool(node.attrs["grouped"])), lw.off(q), lw.off(k), lw.off(v), lw.off(g),
              lw.off(beta), lw.off(node.out), mem.seq_off, mem.n_seq]  # fmt: skip
    lw.emit(("delta_net", dim), lambda: wgsl.delta_net(dim), params, -(-count // 64), binds=[("ssm", ref.index)],
            label="gated_delta_net")  # fmt: skip


def _whole(lw, node, w) -> tuple:
    """A weight bound whole (an expert tensor: its rows are indexed by expert at run
    time, so it cannot be split into chunks as a product's rows are)."""
    n_rows = math.prod(w.shape[1:])
    if len(lw.weight_chunks(w, n_rows)) > 1:
        raise UnsupportedOperation(
            f"backend 'vulkan': {node.op} weight {w.name!r} ({w.nbytes} bytes) exceeds one binding"
        )
    if w.shape[0] % 8:
        raise UnsupportedOperation(f"backend 'vulkan': {node.op} with rows of {w.shape[0]} values (8k needed)")
    return ("w", w, 0, w.buffer.size)


def moe(lw, node) -> None:
    """Router logits, routing, the chosen experts' gated products, their weighted down
    projections: four dispatches of the wgsl.moe_* kernels, each expert weight read in
    its GGUF blocks; the routing's ids, weights and the products live in scratch
    memory after the constants."""
    x, router, gate, up, down, bias = node.args
    a = node.attrs
    r, g, u, d = (lw.weights[w.name] for w in (router, gate, up, down))
    K = x.shape[-1]
    M = x.size // K
    E, F, D, k = r.shape[1], g.shape[1], d.shape[1], a["k"]
    if len(g.shape) != 3 or g.shape != u.shape or g.shape != (K, F, E) or d.shape != (F, D, E):
        raise ShapeError(f"moe: expert tensors {g.shape}, {u.shape}, {d.shape} do not fit together")
    if a["activation"] not in ("silu", "gelu"):
        raise UnsupportedOperation(f"backend 'vulkan': moe with {a['activation']!r} experts")
    groups = a.get("groups", 1)
    if groups > 32:
        raise UnsupportedOperation(f"backend 'vulkan': moe with {groups} expert groups (at most 32)")
    bind_r, bind_g, bind_u, bind_d = (_whole(lw, node, w) for w in (r, g, u, d))
    xo, xs = lw.off(x), lw.stride(x)
    logits, ids, wts, h = lw.scratch(M * E), lw.scratch(M * k), lw.scratch(M * k), lw.scratch(M * k * F)
    lw.emit(("moe_logits", r.ggml_type), lambda: wgsl.moe_logits(r.ggml_type),
            [M * E, E, K, xo, xs, logits, r.row_bytes], -(-M * E // 64), binds=[bind_r], read_only=(2,),
            label=f"moe router {r.ggml_type}")  # fmt: skip
    b = lw.operand(bias) + 1 if bias is not None else 0
    scale = a["weight_scale"] if a["weight_scale"] is not None else 1.0
    lw.emit(("moe_route",), wgsl.moe_route,
            [M, E, k, logits, ids, wts, int(a["gating"] == "sigmoid"), b, int(bool(a["norm_topk"])),
             f32_bits(scale), groups, a.get("groups_used", 1)], -(-M // 64), label="moe route")  # fmt: skip
    types = (g.ggml_type, u.ggml_type)
    act = OPS["unary"].code("kind", a["activation"])
    lw.emit(("moe_up", types), lambda: wgsl.moe_up(*types),
            [M * k * F, F, K, xo, xs, ids, h, g.row_bytes, u.row_bytes, act, k], -(-M * k * F // 64),
            binds=[bind_g, bind_u], read_only=(2, 3), label=f"moe experts {g.ggml_type}")  # fmt: skip
    lw.emit(("moe_down", d.ggml_type), lambda: wgsl.moe_down(d.ggml_type),
            [M * D, D, F, k, ids, wts, h, lw.off(node.out), d.row_bytes], -(-M * D // 64),
            binds=[bind_d], read_only=(2,), label=f"moe down {d.ggml_type}")  # fmt: skip


__all__ = ["conv1d_causal", "gated_delta_net", "moe", "ssm_scan"]
