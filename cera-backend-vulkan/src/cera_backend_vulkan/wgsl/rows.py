"""Row-wise ops: embeddings (rows by token id), softmax, argmax and top-k, gathers, means, upcasts."""

from __future__ import annotations

from .blocks import weight_lib
from .common import ARENA_F32, ARENA_U32, GRID, HEADER, WG


def embedding(ggml_type: str) -> str:
    """Rows of a table by token id. P: 0 ids offset, 1 n ids, 2 K, 3 out offset, 4 row
    bytes, 5 first row of this chunk of the table, 6 rows in the chunk."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + weight_lib(ggml_type, "W0", 2)
        + f"""
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
    let r = wg_linear(wid, nwg);
    if (r >= P(1u)) {{ return; }}
    let id = A[P(0u) + r] - P(5u);
    if (id >= P(6u)) {{ return; }}
    let K = P(2u);
    let out = P(3u) + r * K;
    for (var g = lid.x; g < K / 8u; g += {WG}u) {{
        let v = dq8_W0(id * P(4u), g);
        let o = out + g * 8u;
        A[o] = bitcast<u32>(v.a.x); A[o + 1u] = bitcast<u32>(v.a.y); A[o + 2u] = bitcast<u32>(v.a.z); A[o + 3u] = bitcast<u32>(v.a.w);
        A[o + 4u] = bitcast<u32>(v.b.x); A[o + 5u] = bitcast<u32>(v.b.y); A[o + 6u] = bitcast<u32>(v.b.z); A[o + 7u] = bitcast<u32>(v.b.w);
    }}
}}
"""
    )


def softmax() -> str:
    """Softmax of rows: one workgroup a row. P: 0 rows, 1 row length, 2 x offset, 3 out
    offset."""
    return (
        HEADER
        + ARENA_F32
        + GRID
        + f"""
var<workgroup> red: array<f32, {WG}>;
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let r = wg_linear(wid, nwg);
    if (r >= P(0u)) {{ return; }}
    let n = P(1u); let x = P(2u) + r * n; let o = P(3u) + r * n;
    var mx = -3.0e38;
    for (var i = t; i < n; i += {WG}u) {{ mx = max(mx, A[x + i]); }}
    red[t] = mx;
    workgroupBarrier();
    for (var s = {WG // 2}u; s > 0u; s >>= 1u) {{
        if (t < s) {{ red[t] = max(red[t], red[t + s]); }}
        workgroupBarrier();
    }}
    mx = red[0];
    workgroupBarrier();
    var sum = 0.0;
    for (var i = t; i < n; i += {WG}u) {{ sum += exp(A[x + i] - mx); }}
    red[t] = sum;
    workgroupBarrier();
    for (var s = {WG // 2}u; s > 0u; s >>= 1u) {{
        if (t < s) {{ red[t] += red[t + s]; }}
        workgroupBarrier();
    }}
    let inv = 1.0 / red[0];
    for (var i = t; i < n; i += {WG}u) {{ A[o + i] = exp(A[x + i] - mx) * inv; }}
}}
"""
    )


SELECT_WG = 256  # threads of the selection kernels' workgroups (select_top, the two-stage argmax)

# The selection kernels' reduction: ``best(t, v, vi)`` leaves the workgroup's best
# (value, index) of its threads' in bv[0], bi[0] (value descending, then index
# ascending; index 0xffffffff: none), through a shared-memory tree.
SELECT_BEST = f"""
var<workgroup> bv: array<f32, {SELECT_WG}>;
var<workgroup> bi: array<u32, {SELECT_WG}>;
fn better(v: f32, i: u32, w: f32, j: u32) -> bool {{ return v > w || (v == w && i < j); }}
fn best(t: u32, v: f32, vi: u32) {{
    bv[t] = v; bi[t] = vi;
    workgroupBarrier();
    for (var s = {SELECT_WG // 2}u; s > 0u; s >>= 1u) {{
        if (t < s) {{
            let j = bi[t + s];
            if (j != 0xffffffffu && (bi[t] == 0xffffffffu || better(bv[t + s], j, bv[t], bi[t]))) {{
                bv[t] = bv[t + s]; bi[t] = j;
            }}
        }}
        workgroupBarrier();
    }}
}}
"""


def select_top() -> str:
    """argmax (k = 1) and top_k of rows: one workgroup of 256 a row, k rounds, each
    finding the best value after the previous one in the order (value descending, index
    ascending): ties go to the lower index, as the reference's stable sort. P: 0 rows,
    1 row length, 2 x offset, 3 out offset (ids, int32), 4 k, 5 values out offset + 1
    (take of the chosen ids, fused)."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + SELECT_BEST
        + """
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r = wg_linear(wid, nwg);
    if (r >= P(0u)) { return; }
    let n = P(1u); let x = P(2u) + r * n;
    let k = P(4u);
    var pv = 3.4e38; var pi = 0u; var first = true;
    for (var round = 0u; round < k; round++) {
        var v = -3.4e38; var vi = 0xffffffffu;
        for (var i = t; i < n; i += 256u) {
            let a = bitcast<f32>(A[x + i]);
            let after = first || better(pv, pi, a, i);
            if (after && (vi == 0xffffffffu || better(a, i, v, vi))) { v = a; vi = i; }
        }
        best(t, v, vi);
        pv = bv[0]; pi = bi[0]; first = false;
        if (t == 0u) {
            A[P(3u) + r * k + round] = pi;
            if (P(5u) != 0u) { A[P(5u) - 1u + r * k + round] = bitcast<u32>(pv); }
        }
        workgroupBarrier();
    }
}
"""
    )


def select_partial() -> str:
    """argmax, first stage: workgroup (r, c) finds the best of chunk c of row r (value
    descending, then index ascending, as `select_top`) and writes its (value, index) to
    a scratch table; `select_combine` then picks each row's best of its chunks. For long
    rows (a vocabulary): many workgroups share the reading instead of one a row.
    P: 0 rows, 1 row length, 2 x offset, 3 scratch offset (2 words a chunk), 4 chunk
    length, 5 chunks a row."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + SELECT_BEST
        + f"""
@compute @workgroup_size({SELECT_WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let w = wg_linear(wid, nwg);
    if (w >= P(0u) * P(5u)) {{ return; }}
    let r = w / P(5u); let c = w % P(5u);
    let n = P(1u); let x = P(2u) + r * n;
    let lo = c * P(4u); let hi = min(n, lo + P(4u));
    var v = -3.4e38; var vi = 0xffffffffu;
    for (var i = lo + t; i < hi; i += {SELECT_WG}u) {{
        let a = bitcast<f32>(A[x + i]);
        if (vi == 0xffffffffu || better(a, i, v, vi)) {{ v = a; vi = i; }}
    }}
    best(t, v, vi);
    if (t == 0u) {{
        A[P(3u) + 2u * w] = bitcast<u32>(bv[0]);
        A[P(3u) + 2u * w + 1u] = bi[0];
    }}
}}
"""
    )


def select_combine() -> str:
    """argmax, second stage: one workgroup a row picks the best (value, index) of its
    chunks' (`select_partial`) in the same order. P: 0 rows, 1 chunks a row, 2 scratch
    offset, 3 out offset (ids, int32), 4 (unused), 5 values out offset + 1."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + SELECT_BEST
        + f"""
@compute @workgroup_size({SELECT_WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let r = wg_linear(wid, nwg);
    if (r >= P(0u)) {{ return; }}
    let nc = P(1u); let base = P(2u) + 2u * r * nc;
    var v = -3.4e38; var vi = 0xffffffffu;
    for (var c = t; c < nc; c += {SELECT_WG}u) {{
        let a = bitcast<f32>(A[base + 2u * c]);
        let i = A[base + 2u * c + 1u];
        if (i != 0xffffffffu && (vi == 0xffffffffu || better(a, i, v, vi))) {{ v = a; vi = i; }}
    }}
    best(t, v, vi);
    if (t == 0u) {{
        A[P(3u) + r] = bi[0];
        if (P(5u) != 0u) {{ A[P(5u) - 1u + r] = bitcast<u32>(bv[0]); }}
    }}
}}
"""
    )


def gather() -> str:
    """General moves of f32 values by an index table: out[i] = x[table[i]] (rows,
    concat, take, seq_mean's sums are done elsewhere). P: 0 count, 1 out offset, 2 source
    offset, 3 table offset (u32 indices relative to the source), 4 mode: 0 table, 1 take
    (out [rows, k]: x[row * P(5) + ids[i]], ids at P(3)), P(6) k."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + """
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = wg_linear(wid, nwg) * 256u + t;
    if (i >= P(0u)) { return; }
    if (P(4u) == 0u) {
        A[P(1u) + i] = A[P(2u) + A[P(3u) + i]];
    } else {
        let row = i / P(6u);
        A[P(1u) + i] = A[P(2u) + row * P(5u) + A[P(3u) + i]];
    }
}
"""
    )


def seq_mean() -> str:
    """Mean of each sequence's rows. P: 0 n_seq * dim, 1 dim, 2 x offset, 3 out offset,
    4 table offset (per sequence: first row, rows)."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + """
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = wg_linear(wid, nwg) * 256u + t;
    if (i >= P(0u)) { return; }
    let d = P(1u); let s = i / d; let c = i % d;
    let r0 = A[P(4u) + 2u * s]; let n = A[P(4u) + 2u * s + 1u];
    var sum = 0.0;
    for (var r = r0; r < r0 + n; r++) { sum += bitcast<f32>(A[P(2u) + r * d + c]); }
    A[P(3u) + i] = bitcast<u32>(sum / f32(n));
}
"""
    )


def embedding_dense() -> str:
    """Rows of a small table held as f32 values in the arena, by token id: for rows whose
    length is no multiple of 8 (dq8 decodes groups of 8), such as the conformance suite's
    per-head inputs. P: 0 ids offset, 1 n ids * K, 2 K, 3 out offset, 4 table offset,
    5 rows of the table."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + """
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = wg_linear(wid, nwg) * 64u + t;
    if (i >= P(1u)) { return; }
    let K = P(2u);
    let id = A[P(0u) + i / K];
    if (id >= P(5u)) { return; }
    A[P(3u) + i] = A[P(4u) + id * K + i % K];
}
"""
    )


def upcast(ggml_type: str) -> str:
    """A small weight decoded to f32 into the arena (norm weights and biases stored as
    F16/BF16/quantized: decoded once per run, a few hundred values). P: 0 groups of 8,
    1 out offset."""
    return (
        HEADER
        + ARENA_F32
        + GRID
        + weight_lib(ggml_type, "W0", 2)
        + """
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let g = wg_linear(wid, nwg) * 64u + t;
    if (g >= P(0u)) { return; }
    let v = dq8_W0(0u, g);
    let o = P(1u) + g * 8u;
    A[o] = v.a.x; A[o + 1u] = v.a.y; A[o + 2u] = v.a.z; A[o + 3u] = v.a.w;
    A[o + 4u] = v.b.x; A[o + 5u] = v.b.y; A[o + 6u] = v.b.z; A[o + 7u] = v.b.w;
}
"""
    )
