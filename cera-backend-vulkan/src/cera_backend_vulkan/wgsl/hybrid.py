"""The hybrid and mixture-of-experts families' ops: short convolutions, the Mamba-2 scan, experts."""

from __future__ import annotations

from .blocks import weight_lib
from .common import ACTIVATIONS, ARENA_U32, GRID, HEADER

# -- recurrent state and experts -------------------------------------------------------------------

CONV_MAX = 16  # conv1d_causal: the longest kernel (LFM2's is 3, Mamba-2's 4)


# four consecutive f32 values of the arena (a u32 view) from word o
XV = "fn xv(o: u32) -> vec4<f32> { return vec4<f32>(bitcast<f32>(A[o]), bitcast<f32>(A[o + 1u]), bitcast<f32>(A[o + 2u]), bitcast<f32>(A[o + 3u])); }\n"


def conv_causal() -> str:
    """LFM2's / Mamba-2's depthwise causal convolution, ggml_ssm_conv: a thread per
    (sequence, channel) walks its sequence's rows in order, the window starting from the
    slot's carried ``kernel - 1`` inputs (binding 2: [slot, kernel - 1, channels]), and
    writes the last ``kernel - 1`` inputs back. Each output is the same sum in the same
    order whatever the other sequences of the batch, so a decode batch row is its one-row
    pass. P: 0 n_seq * channels, 1 channels, 2 kernel, 3 x offset, 4 x row stride, 5 out
    offset, 6 weight offset ([channels, kernel], f32 in the arena), 7 seq table offset,
    8 n_seq."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + f"""
@group(0) @binding(2) var<storage, read_write> S: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let i = wg_linear(wid, nwg) * 64u + t;
    if (i >= P(0u)) {{ return; }}
    let ch = P(1u); let d = P(2u);
    let s = i / ch; let c = i % ch;
    let seq = P(7u); let n_seq = P(8u);
    let slot = A[seq + s]; let r0 = A[seq + 2u * n_seq + s]; let n = A[seq + 3u * n_seq + s];
    let sb = slot * (d - 1u) * ch + c;
    var win: array<f32, {CONV_MAX}>;
    for (var j = 0u; j + 1u < d; j++) {{ win[j] = S[sb + j * ch]; }}
    var w: array<f32, {CONV_MAX}>;
    for (var j = 0u; j < d; j++) {{ w[j] = bitcast<f32>(A[P(6u) + c * d + j]); }}
    for (var r = r0; r < r0 + n; r++) {{
        win[d - 1u] = bitcast<f32>(A[P(3u) + r * P(4u) + c]);
        var y = 0.0;
        for (var j = 0u; j < d; j++) {{ y += w[j] * win[j]; }}
        A[P(5u) + r * ch + c] = bitcast<u32>(y);
        for (var j = 0u; j + 1u < d; j++) {{ win[j] = win[j + 1u]; }}
    }}
    for (var j = 0u; j + 1u < d; j++) {{ S[sb + j * ch] = win[j]; }}
}}
"""
    )


# Mixture of experts (cera.graph.ops.moe, llama.cpp's build_moe_ffn) in four dispatches: router
# logits, routing (probabilities, top k, weights), the chosen experts' gated products, and
# their weighted sum through the down projections. Every output is one thread's sum over
# its row in a fixed order (no reduction across threads, no barriers), so a row of a batch
# is bit for bit its one-row pass whichever experts the other rows chose.


def moe_logits(ggml_type: str) -> str:
    """Router logits: a thread per (row, expert). P: 0 rows * experts, 1 experts, 2 K,
    3 x offset, 4 x row stride, 5 logits offset ([rows, experts]), 6 router row bytes."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + weight_lib(ggml_type, "W0", 2)
        + XV
        + """
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = wg_linear(wid, nwg) * 64u + t;
    if (i >= P(0u)) { return; }
    let r = i / P(1u); let e = i % P(1u);
    let xo = P(3u) + r * P(4u);
    var acc = 0.0;
    for (var g = 0u; g < P(2u) / 8u; g++) {
        let w = dq8_W0(e * P(6u), g);
        acc += dot(xv(xo + g * 8u), w.a) + dot(xv(xo + g * 8u + 4u), w.b);
    }
    A[P(5u) + i] = bitcast<u32>(acc);
}
"""
    )


def moe_route() -> str:
    """Routing, a thread per row: probabilities from the logits (softmax, or sigmoid),
    in place; the k experts of largest probability plus selection bias (ties to the lower
    index, as a stable sort), picked one after another each below the last in (value,
    index) order; their probabilities as weights, renormalised to sum 1 when asked and
    scaled. With expert groups (P 10 > 1), only the experts of the P 11 groups whose two best
    selection values sum highest (ties to the lower group) are picked from (group-limited
    routing, cera.graph.ops.limit_groups). P: 0 rows, 1 experts, 2 k, 3 logits offset,
    4 ids offset ([rows, k] u32), 5 weights offset ([rows, k]), 6 gating (0 softmax,
    1 sigmoid), 7 selection bias offset + 1 (0: none), 8 renormalise, 9 scale (f32),
    10 groups (at most 32), 11 groups used."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + """
fn F(o: u32) -> f32 { return bitcast<f32>(A[o]); }
fn sel(o: u32, e: u32) -> f32 {
    var v = F(o + e);
    if (P(7u) != 0u) { v += F(P(7u) - 1u + e); }
    return v;
}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r = wg_linear(wid, nwg) * 64u + t;
    if (r >= P(0u)) { return; }
    let E = P(1u); let k = P(2u);
    let lo = P(3u) + r * E;
    if (P(6u) == 0u) {
        var mx = F(lo);
        for (var e = 1u; e < E; e++) { mx = max(mx, F(lo + e)); }
        var sum = 0.0;
        for (var e = 0u; e < E; e++) { let p = exp(F(lo + e) - mx); A[lo + e] = bitcast<u32>(p); sum += p; }
        for (var e = 0u; e < E; e++) { A[lo + e] = bitcast<u32>(F(lo + e) / sum); }
    } else {
        for (var e = 0u; e < E; e++) { A[lo + e] = bitcast<u32>(1.0 / (1.0 + exp(-F(lo + e)))); }
    }
    let G = P(10u);
    var keep = 0xffffffffu;
    if (G > 1u) {
        let per = E / G;
        var score: array<f32, 32>;
        for (var gi = 0u; gi < G; gi++) {
            var b1 = -3.4e38; var b2 = -3.4e38;
            for (var e = gi * per; e < (gi + 1u) * per; e++) {
                let v = sel(lo, e);
                if (v > b1) { b2 = b1; b1 = v; } else if (v > b2) { b2 = v; }
            }
            score[gi] = b1 + b2;
        }
        keep = 0u;
        for (var j = 0u; j < P(11u); j++) {
            var bg = 0u; var bv = 0.0; var found = false;
            for (var gi = 0u; gi < G; gi++) {
                if (((keep >> gi) & 1u) == 0u && (!found || score[gi] > bv)) { bg = gi; bv = score[gi]; found = true; }
            }
            keep = keep | (1u << bg);
        }
    }
    let per_group = max(E / max(G, 1u), 1u);
    var last_v = 0.0; var last_e = 0u;
    var total = 0.0;
    for (var j = 0u; j < k; j++) {
        var best = 0u; var best_v = 0.0; var found = false;
        for (var e = 0u; e < E; e++) {
            if (G > 1u && ((keep >> (e / per_group)) & 1u) == 0u) { continue; }
            let v = sel(lo, e);
            let below = j == 0u || v < last_v || (v == last_v && e > last_e);
            if (below && (!found || v > best_v)) { best = e; best_v = v; found = true; }
        }
        last_v = best_v; last_e = best;
        A[P(4u) + r * k + j] = best;
        let w = F(lo + best);
        A[P(5u) + r * k + j] = bitcast<u32>(w);
        total += w;
    }
    for (var j = 0u; j < k; j++) {
        var w = F(P(5u) + r * k + j);
        if (P(8u) != 0u) { w = w / total; }
        A[P(5u) + r * k + j] = bitcast<u32>(w * PF(9u));
    }
}
"""
    )


def moe_up(gate_type: str, up_type: str) -> str:
    """The chosen experts' gated products, a thread per (row, choice, feature):
    h = act(x . gate_e[f]) * (x . up_e[f]), the expert's rows following one another in
    the [dim, ff, experts] tensors. P: 0 rows * k * ff, 1 ff, 2 K, 3 x offset, 4 x row
    stride, 5 ids offset, 6 h offset ([rows, k, ff]), 7 gate row bytes, 8 up row bytes,
    9 activation (act_'s code), 10 k."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + ACTIVATIONS
        + weight_lib(gate_type, "W0", 2)
        + weight_lib(up_type, "W1", 3)
        + XV
        + """
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = wg_linear(wid, nwg) * 64u + t;
    if (i >= P(0u)) { return; }
    let ff = P(1u);
    let rj = i / ff; let f = i % ff;
    let r = rj / P(10u);
    let row = A[P(5u) + rj] * ff + f;
    let xo = P(3u) + r * P(4u);
    var a = 0.0; var b = 0.0;
    for (var g = 0u; g < P(2u) / 8u; g++) {
        let xa = xv(xo + g * 8u); let xb = xv(xo + g * 8u + 4u);
        let wg = dq8_W0(row * P(7u), g);
        let wu = dq8_W1(row * P(8u), g);
        a += dot(xa, wg.a) + dot(xb, wg.b);
        b += dot(xa, wu.a) + dot(xb, wu.b);
    }
    A[P(6u) + i] = bitcast<u32>(act_(P(9u), a) * b);
}
"""
    )


def moe_down(ggml_type: str) -> str:
    """The experts' down projections summed with their weights, a thread per (row, output
    feature), the choices in order. P: 0 rows * D, 1 D, 2 ff, 3 k, 4 ids offset, 5 weights
    offset, 6 h offset, 7 out offset, 8 down row bytes."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + weight_lib(ggml_type, "W0", 2)
        + XV
        + """
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = wg_linear(wid, nwg) * 64u + t;
    if (i >= P(0u)) { return; }
    let D = P(1u); let ff = P(2u); let k = P(3u);
    let r = i / D; let o = i % D;
    var y = 0.0;
    for (var j = 0u; j < k; j++) {
        let row = A[P(4u) + r * k + j] * D + o;
        let ho = P(6u) + (r * k + j) * ff;
        var acc = 0.0;
        for (var g = 0u; g < ff / 8u; g++) {
            let w = dq8_W0(row * P(8u), g);
            acc += dot(xv(ho + g * 8u), w.a) + dot(xv(ho + g * 8u + 4u), w.b);
        }
        y += bitcast<f32>(A[P(5u) + r * k + j]) * acc;
    }
    A[P(7u) + i] = bitcast<u32>(y);
}
"""
    )


def ssm_scan(d_state: int) -> str:
    """Mamba-2's selective scan (ggml_ssm_scan, a scalar A per head): a thread per
    (sequence, head, head element) keeps its row of the state (``d_state`` values) in
    registers and walks the sequence's tokens in order: dt' = softplus(dt), state = state *
    exp(dt' A) + dt' x B, y = state . C; the row goes back to the slot (binding 2:
    [slot, heads, head_dim, d_state]) at the end. No thread reads another's values, so a
    decode batch row is its one-row pass. P: 0 n_seq * heads * head_dim, 1 heads,
    2 head_dim, 3 groups, 4 x offset, 5 dt offset, 6 A offset, 7 B offset, 8 C offset,
    9 y offset, 10 seq table offset, 11 n_seq."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + f"""
@group(0) @binding(2) var<storage, read_write> S: array<f32>;
fn F(o: u32) -> f32 {{ return bitcast<f32>(A[o]); }}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let i = wg_linear(wid, nwg) * 64u + t;
    if (i >= P(0u)) {{ return; }}
    let H = P(1u); let hd = P(2u); let G = P(3u);
    let p = i % hd; let h = (i / hd) % H; let s = i / (hd * H);
    let g = h / (H / G);
    let seq = P(10u); let n_seq = P(11u);
    let slot = A[seq + s]; let r0 = A[seq + 2u * n_seq + s]; let n = A[seq + 3u * n_seq + s];
    let sb = ((slot * H + h) * hd + p) * {d_state}u;
    var st: array<f32, {d_state}>;
    for (var j = 0u; j < {d_state}u; j++) {{ st[j] = S[sb + j]; }}
    let a = F(P(6u) + h);
    for (var r = r0; r < r0 + n; r++) {{
        let dt0 = F(P(5u) + r * H + h);
        let dt = select(log(1.0 + exp(min(dt0, 20.0))), dt0, dt0 > 20.0);
        let decay = exp(dt * a);
        let xd = dt * F(P(4u) + (r * H + h) * hd + p);
        let bo = P(7u) + (r * G + g) * {d_state}u;
        let co = P(8u) + (r * G + g) * {d_state}u;
        var y = 0.0;
        for (var j = 0u; j < {d_state}u; j++) {{
            st[j] = st[j] * decay + xd * F(bo + j);
            y += st[j] * F(co + j);
        }}
        A[P(9u) + (r * H + h) * hd + p] = bitcast<u32>(y);
    }}
    for (var j = 0u; j < {d_state}u; j++) {{ S[sb + j] = st[j]; }}
}}
"""
    )


DELTA_MAX = 256  # gated_delta_net: the widest head (Qwen3.5's and Qwen3-Next's are 128)


def delta_net(dim: int) -> str:
    """The gated delta rule (ggml_gated_delta_net, one decay per head): a thread per
    (sequence, value head, value channel j) keeps row j of the head's [dim, dim] state in
    registers and walks the sequence's tokens in order: row *= exp(g); d = (v_j - row . k) *
    beta; row += d k; y_j = (row . q) / sqrt(dim). The row goes back to the slot (binding 2:
    [slot, value heads, dim, dim]) at the end; no thread reads another's values, so a decode
    batch row is its one-row pass. Value head h reads key head h % key_heads, or
    h / (value_heads / key_heads) when grouped. P: 0 n_seq * value_heads * dim, 1 value
    heads, 2 key heads, 3 grouped, 4 q, 5 k, 6 v, 7 g, 8 beta, 9 y offsets, 10 seq table
    offset, 11 n_seq."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + f"""
@group(0) @binding(2) var<storage, read_write> S: array<f32>;
fn F(o: u32) -> f32 {{ return bitcast<f32>(A[o]); }}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let i = wg_linear(wid, nwg) * 64u + t;
    if (i >= P(0u)) {{ return; }}
    let Hv = P(1u); let Hk = P(2u);
    let j = i % {dim}u; let h = (i / {dim}u) % Hv; let s = i / ({dim}u * Hv);
    let hk = select(h % Hk, h / (Hv / Hk), P(3u) != 0u);
    let seq = P(10u); let n_seq = P(11u);
    let slot = A[seq + s]; let r0 = A[seq + 2u * n_seq + s]; let n = A[seq + 3u * n_seq + s];
    let sb = ((slot * Hv + h) * {dim}u + j) * {dim}u;
    var row: array<f32, {dim}>;
    for (var c = 0u; c < {dim}u; c++) {{ row[c] = S[sb + c]; }}
    let scale = 1.0 / sqrt(f32({dim}u));
    for (var r = r0; r < r0 + n; r++) {{
        let ko = P(5u) + (r * Hk + hk) * {dim}u;
        let qo = P(4u) + (r * Hk + hk) * {dim}u;
        let decay = exp(F(P(7u) + r * Hv + h));
        var sk = 0.0;
        for (var c = 0u; c < {dim}u; c++) {{
            row[c] = row[c] * decay;
            sk += row[c] * F(ko + c);
        }}
        let d = (F(P(6u) + (r * Hv + h) * {dim}u + j) - sk) * F(P(8u) + r * Hv + h);
        var y = 0.0;
        for (var c = 0u; c < {dim}u; c++) {{
            row[c] = row[c] + d * F(ko + c);
            y += row[c] * F(qo + c);
        }}
        A[P(9u) + (r * Hv + h) * {dim}u + j] = bitcast<u32>(y * scale);
    }}
    for (var c = 0u; c < {dim}u; c++) {{ S[sb + c] = row[c]; }}
}}
"""
    )


def kda(dim: int) -> str:
    """Kimi delta attention (cera.graph.ops.kda): a thread per (sequence, head, value row j)
    keeps row j of the head's state ([dim_v, dim_k], ``dim`` values a row) in registers and
    walks the sequence's tokens: q and k L2-normalised, the decay exp(lower_bound *
    sigmoid(A_h f)) per key channel, d = (v_j - row . k) * sigmoid(b), row += d k,
    y_j = row . q / sqrt(dim); the row goes back to the slot (binding 2: [slot, heads, dim,
    dim]) at the end. P: 0 n_seq * heads * dim, 1 heads, 2 q, 3 k, 4 v, 5 f, 6 b, 7 A,
    8 y offsets, 9 seq table offset, 10 n_seq, 11 eps (f32), 12 lower bound (f32)."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + f"""
@group(0) @binding(2) var<storage, read_write> S: array<f32>;
fn F(o: u32) -> f32 {{ return bitcast<f32>(A[o]); }}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let i = wg_linear(wid, nwg) * 64u + t;
    if (i >= P(0u)) {{ return; }}
    let H = P(1u); let D = {dim}u;
    let j = i % D; let h = (i / D) % H; let s = i / (D * H);
    let seq = P(9u); let n_seq = P(10u);
    let slot = A[seq + s]; let r0 = A[seq + 2u * n_seq + s]; let n = A[seq + 3u * n_seq + s];
    let sb = ((slot * H + h) * D + j) * D;
    var st: array<f32, {dim}>;
    for (var c = 0u; c < D; c++) {{ st[c] = S[sb + c]; }}
    let a = F(P(7u) + h); let eps = PF(11u); let lb = PF(12u);
    let scale = 1.0 / sqrt(f32(D));
    for (var r = r0; r < r0 + n; r++) {{
        let o = (r * H + h) * D;
        var qq = 0.0; var kk = 0.0;
        for (var c = 0u; c < D; c++) {{
            let qc = F(P(2u) + o + c); let kc = F(P(3u) + o + c);
            qq += qc * qc; kk += kc * kc;
        }}
        let qn = 1.0 / sqrt(qq + eps); let kn = 1.0 / sqrt(kk + eps);
        var dot = 0.0;
        for (var c = 0u; c < D; c++) {{
            let g = lb / (1.0 + exp(-(F(P(5u) + o + c) * a)));
            st[c] = st[c] * exp(g);
            dot += st[c] * F(P(3u) + o + c) * kn;
        }}
        let beta = 1.0 / (1.0 + exp(-F(P(6u) + r * H + h)));
        let d = (F(P(4u) + o + j) - dot) * beta;
        var y = 0.0;
        for (var c = 0u; c < D; c++) {{
            st[c] += d * F(P(3u) + o + c) * kn;
            y += st[c] * F(P(2u) + o + c) * qn;
        }}
        A[P(8u) + o + j] = bitcast<u32>(y * scale);
    }}
    for (var c = 0u; c < D; c++) {{ S[sb + c] = st[c]; }}
}}
"""
    )


def head_linear() -> str:
    """A product per head (cera.graph.ops.head_linear): a thread per output (row, head,
    out), y = W[h, out, :] . x[row, h, :] with W a float constant [heads, out, in].
    P: 0 rows * heads * out, 1 heads, 2 in, 3 out, 4 x offset, 5 x row stride, 6 W offset,
    7 y offset."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + """
fn F(o: u32) -> f32 { return bitcast<f32>(A[o]); }
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = wg_linear(wid, nwg) * 64u + t;
    if (i >= P(0u)) { return; }
    let H = P(1u); let I = P(2u); let O = P(3u);
    let o = i % O; let h = (i / O) % H; let r = i / (O * H);
    let xo = P(4u) + (r * H + h) * P(5u);
    let wo = P(6u) + (h * O + o) * I;
    var y = 0.0;
    for (var c = 0u; c < I; c++) { y += F(wo + c) * F(xo + c); }
    A[P(7u) + i] = bitcast<u32>(y);
}
"""
    )


def sigmoid_gate() -> str:
    """x * sigmoid(g) (cera.graph.ops.sigmoid_gate), a thread per element; g per element
    or one per run of P 4 elements (a gate per head). P: 0 count, 1 x offset, 2 g offset,
    3 y offset, 4 elements per gate value."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + """
fn F(o: u32) -> f32 { return bitcast<f32>(A[o]); }
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = wg_linear(wid, nwg) * 64u + t;
    if (i >= P(0u)) { return; }
    let g = F(P(2u) + i / P(4u));
    A[P(3u) + i] = bitcast<u32>(F(P(1u) + i) / (1.0 + exp(-g)));
}
"""
    )
