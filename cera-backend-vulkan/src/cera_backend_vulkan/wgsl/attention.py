"""Rotations, the KV cache's stores, and attention over the cache or this pass's rows."""

from __future__ import annotations

from .common import ARENA_U32, GRID, HEADER, SEQ_FN

# The rotation's arithmetic, shared by `rope`, `rope_kv` and `attention_lanes`' rotating
# form (the same operations in the same order, so a rotated value has the same bits
# whichever kernel computes it). P o..o+9: n_dims, neox, base, freq_scale, ext_factor,
# attn_factor, beta_fast, beta_slow, n_ctx_orig, freq_factors offset + 1 (0: none).
ROPE_FNS = """
fn corr_dim(beta: f32, n_dims: f32, n_orig: f32, base: f32) -> f32 {
    return n_dims * log(n_orig / (beta * 6.283185307179586)) / (2.0 * log(base));
}
struct Rope { nd: u32, neox: bool, ndf: f32, base: f32, fs: f32, ext: f32, mscale: f32, low: f32, high: f32, ff: u32 }
fn rope_of(o: u32) -> Rope {
    var r: Rope;
    r.nd = P(o); r.neox = P(o + 1u) != 0u; r.ndf = f32(r.nd);
    r.base = PF(o + 2u); r.fs = PF(o + 3u); r.ext = PF(o + 4u); r.mscale = PF(o + 5u);
    r.low = 0.0; r.high = 0.0;
    if (r.ext != 0.0) {
        r.low = max(0.0, floor(corr_dim(PF(o + 6u), r.ndf, f32(P(o + 8u)), r.base)));
        r.high = min(r.ndf - 1.0, ceil(corr_dim(PF(o + 7u), r.ndf, f32(P(o + 8u)), r.base)));
        r.mscale *= 1.0 + 0.1 * log(1.0 / r.fs);
    }
    r.ff = P(o + 9u);
    return r;
}
// the cosine and sine of pair i's angle at position pos, times the magnitude's scale
fn rope_cs(r: Rope, i: u32, pos: f32) -> vec2<f32> {
    var ff = 1.0;
    if (r.ff != 0u) { ff = bitcast<f32>(A[r.ff - 1u + i]); }
    let extrap = pos * pow(r.base, -2.0 * f32(i) / r.ndf) / ff;
    var theta = r.fs * extrap;
    if (r.ext != 0.0) {
        let ramp = 1.0 - clamp((f32(i) - r.low) / max(0.001, r.high - r.low), 0.0, 1.0);
        let mix = ramp * r.ext;
        theta = theta * (1.0 - mix) + extrap * mix;
    }
    return vec2<f32>(cos(theta) * r.mscale, sin(theta) * r.mscale);
}
// the two elements pair i rotates: adjacent, or half a head apart (neox)
fn rope_idx(r: Rope, i: u32) -> vec2<u32> {
    if (r.neox) { return vec2<u32>(i, i + r.nd / 2u); }
    return vec2<u32>(2u * i, 2u * i + 1u);
}
// element j of the head at x, its norm applied (1 / rms inv, weights + 1 at nw; 0: none)
fn xin(x: u32, j: u32, inv: f32, nw: u32) -> f32 {
    var v = bitcast<f32>(A[x + j]) * inv;
    if (nw != 0u) { v *= bitcast<f32>(A[nw - 1u + j]); }
    return v;
}
// a head's sum of squares (_ROPE_TREE, _ROPE_SUBGROUPS)
var<workgroup> rred: array<f32, 64>;
"""

ROPE_BODY = (
    ROPE_FNS
    + """
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32{SG}) {
    // a second tensor (the keys, after the queries) may share the dispatch: P 16 the
    // first tensor's rows x heads, 17 the second's heads, 18/19 its input/output offsets
    var rh = wg_linear(wid, nwg);
{TAIL}    if (rh >= P(0u)) { return; }
    let dim = P(2u);
    var row = rh / P(1u);
    var x = P(3u) + rh * dim;
    var o = P(4u) + rh * dim;
    var second = false;
    if (rh >= P(16u)) {
        rh -= P(16u);
        row = rh / P(17u);
        x = P(18u) + rh * dim;
        o = P(19u) + rh * dim;
        second = true;
    }
    // an rms_norm of the row first (P 37 bit 1: the first tensor's rows, bit 2: the
    // second's; P 32/34 weight + 1, 33/35 eps), a scale of the first tensor's output
    // after (P 36, f32 bits; 0: none)
    var inv = 1.0;
    var nw = 0u;
    if ((P(37u) & select(1u, 2u, second)) != 0u) {
        var q = 0.0;
        for (var j = t; j < dim; j += 64u) { let v = bitcast<f32>(A[x + j]); q += v * v; }
{NORM_SUM}        inv = inverseSqrt(rred[0] / f32(dim) + PF(select(33u, 35u, second)));
        nw = P(select(32u, 34u, second));
    }
    var osc = 1.0;
    if (!second && P(36u) != 0u) { osc = PF(36u); }
    let rp = rope_of(6u);
    for (var j = rp.nd + t; j < dim; j += 64u) { A[o + j] = bitcast<u32>(xin(x, j, inv, nw) * osc); }
    let pos = f32(bitcast<i32>(A[P(5u) + row]));
    for (var i = t; i < rp.nd / 2u; i += 64u) {
        let cs = rope_cs(rp, i, pos);
        let c = cs.x; let s = cs.y;
        let ii = rope_idx(rp, i);
        let x0 = xin(x, ii.x, inv, nw); let x1 = xin(x, ii.y, inv, nw);
        A[o + ii.x] = bitcast<u32>((x0 * c - x1 * s) * osc);
        A[o + ii.y] = bitcast<u32>((x0 * s + x1 * c) * osc);
    }
{KEYS}}
"""
)


# the row's sum of squares (q: threads 0..63's strided sums) into rred[0] for rope's norm:
# a shared-memory tree (six barriers), or with subgroups each subgroup's subgroupAdd and
# one barrier. Threads past 64 (attention_lanes' rotating form has 128) add nothing.
_ROPE_TREE = """        if (t < 64u) { rred[t] = q; }
        workgroupBarrier();
        for (var s = 32u; s > 0u; s >>= 1u) {
            if (t < s) { rred[t] += rred[t + s]; }
            workgroupBarrier();
        }
"""
_ROPE_SUBGROUPS = """        let qsum = subgroupAdd(q);
        if (t < 64u && t % sgs == 0u) { rred[32u + t / sgs] = qsum; }
        workgroupBarrier();
        if (t == 0u) {
            var tot = rred[32u];
            for (var i = 1u; i < 64u / sgs; i++) { tot += rred[32u + i]; }
            rred[0] = tot;
        }
        workgroupBarrier();
"""


def _rope_body(tail: str, keys: str, subgroups: bool) -> str:
    return (
        ROPE_BODY.replace("{TAIL}", tail)
        .replace("{KEYS}", keys)
        .replace("{SG}", ", @builtin(subgroup_size) sgs: u32" if subgroups else "")
        .replace("{NORM_SUM}", _ROPE_SUBGROUPS if subgroups else _ROPE_TREE)
    )


def rope(subgroups: bool = False) -> str:
    """Rotary embedding of x [n, heads, dim]: a thread per rotated pair. P: 0 n*heads,
    1 heads, 2 dim, 3 x offset, 4 out offset, 5 positions offset, 6 n_dims, 7 neox,
    8 base, 9 freq_scale, 10 ext_factor, 11 attn_factor, 12 beta_fast, 13 beta_slow,
    14 n_ctx_orig, 15 freq_factors offset + 1. Dimensions past n_dims are copied.
    ``subgroups``: the norm's sum through subgroupAdd (_ROPE_SUBGROUPS)."""
    return HEADER + ARENA_U32 + GRID + _rope_body("", "", subgroups)


# The per-run sequence table in the arena (compile.py writes it): at P(seq) offset,
# n_seq entries each of slots, starts, first rows, row counts.
def _kv_stores(kv_f16: bool) -> tuple[str, str, str]:
    """kv_store's two stores (of element e of (row r, kv head h), ``nh`` kv heads, ``base``
    the cell's row of the cache; the parameters at P(KVP + i), KVP set by the kernel)
    and the loop step."""
    if kv_f16:
        store_k = "K[base * (dk / 2u) + (e / 2u)] = pack2x16float(vec2<f32>(bitcast<f32>(A[P(KVP + 4u) + (r * nh + h) * dk + e]), bitcast<f32>(A[P(KVP + 4u) + (r * nh + h) * dk + e + 1u])));"
        store_v = "V[base * (dv / 2u) + (e / 2u)] = pack2x16float(vec2<f32>(bitcast<f32>(A[P(KVP + 5u) + (r * nh + h) * dv + e]), bitcast<f32>(A[P(KVP + 5u) + (r * nh + h) * dv + e + 1u])));"
        return store_k, store_v, "2u"
    store_k = "K[base * dk + e] = A[P(KVP + 4u) + (r * nh + h) * dk + e];"
    store_v = "V[base * dv + e] = A[P(KVP + 5u) + (r * nh + h) * dv + e];"
    return store_k, store_v, "1u"


def _kv_cell(kvp: int) -> str:
    """The cache row ``base`` of (row r, kv head h) and the sizes, for _kv_stores."""
    return f"""        let KVP = {kvp}u;
        let nh = P(KVP + 1u);
        let seq = P(KVP + 7u); let n_seq = P(KVP + 8u);
        let sq = seq_of(r, seq, n_seq);
        let slot = A[seq + sq]; let start = A[seq + n_seq + sq]; let r0 = A[seq + 2u * n_seq + sq];
        let cell = start + r - r0;
        let cap = P(KVP + 6u);
        let base = (slot * nh + h) * cap + cell % cap;
        let dk = P(KVP + 2u); let dv = P(KVP + 3u);
"""


def rope_kv(kv_f16: bool, subgroups: bool = False) -> str:
    """`rope` of a layer's queries and keys (a pair, P 0..19 as `rope`) with `kv_store`
    folded in (its parameters at P 20..31): the keys' workgroups also write their rotated
    row into the cache (after a storage barrier: it reads back the row its threads
    wrote), and n x kv heads more workgroups after the rotations write the values (and
    the cells' positions). One dispatch instead of two a layer."""
    store_k, store_v, step = _kv_stores(kv_f16)
    tail = f"""    let total = P(0u);
    if (rh >= total) {{
        // the values of (row r, kv head h)
        let vh = rh - total;
        if (vh >= P(20u) * P(21u)) {{ return; }}
        let r = vh / P(21u); let h = vh % P(21u);
{_kv_cell(20)}        for (var e = t * {step}; e < dv; e += 64u * {step}) {{ {store_v} }}
        if (P(31u) != 0u && h == 0u && t == 0u) {{
            POS[slot * P(30u) + cell] = bitcast<i32>(A[P(29u) + r]);
        }}
        return;
    }}
"""
    keys = f"""    if (second) {{
        storageBarrier();
        let r = row; let h = rh % P(17u);
{_kv_cell(20)}        for (var e = t * {step}; e < dk; e += 64u * {step}) {{ {store_k} }}
    }}
"""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + SEQ_FN
        + """
@group(0) @binding(2) var<storage, read_write> K: array<u32>;
@group(0) @binding(3) var<storage, read_write> V: array<u32>;
@group(0) @binding(4) var<storage, read_write> POS: array<i32>;
"""
        + _rope_body(tail, keys, subgroups)
    )


def kv_store(kv_f16: bool) -> str:
    """Write this pass's keys and values into each sequence's cells of the cache (and the
    cells' positions). A thread per (row, kv head, element). P: 0 rows, 1 kv heads, 2 dk,
    3 dv, 4 k offset, 5 v offset, 6 capacity, 7 seq table offset, 8 n_seq, 9 positions
    offset, 10 n_ctx, 11 write positions (1: this is the pass's first cache)."""
    if kv_f16:
        store_k = "K[base * (dk / 2u) + (e / 2u)] = pack2x16float(vec2<f32>(bitcast<f32>(A[P(4u) + (r * nh + h) * dk + e]), bitcast<f32>(A[P(4u) + (r * nh + h) * dk + e + 1u])));"
        store_v = "V[base * (dv / 2u) + (e / 2u)] = pack2x16float(vec2<f32>(bitcast<f32>(A[P(5u) + (r * nh + h) * dv + e]), bitcast<f32>(A[P(5u) + (r * nh + h) * dv + e + 1u])));"
        step = "2u"
    else:
        store_k = "K[base * dk + e] = A[P(4u) + (r * nh + h) * dk + e];"
        store_v = "V[base * dv + e] = A[P(5u) + (r * nh + h) * dv + e];"
        step = "1u"
    return (
        HEADER
        + ARENA_U32
        + GRID
        + SEQ_FN
        + f"""
@group(0) @binding(2) var<storage, read_write> K: array<u32>;
@group(0) @binding(3) var<storage, read_write> V: array<u32>;
@group(0) @binding(4) var<storage, read_write> POS: array<i32>;
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let rh = wg_linear(wid, nwg);
    let nh = P(1u);
    if (rh >= P(0u) * nh) {{ return; }}
    let r = rh / nh; let h = rh % nh;
    let seq = P(7u); let n_seq = P(8u);
    let s = seq_of(r, seq, n_seq);
    let slot = A[seq + s]; let start = A[seq + n_seq + s]; let r0 = A[seq + 2u * n_seq + s];
    let cell = start + r - r0;
    let cap = P(6u);
    let base = (slot * nh + h) * cap + cell % cap;
    let dk = P(2u); let dv = P(3u);
    for (var e = t * {step}; e < dk; e += 64u * {step}) {{ {store_k} }}
    for (var e = t * {step}; e < dv; e += 64u * {step}) {{ {store_v} }}
    if (P(11u) != 0u && h == 0u && t == 0u) {{
        POS[slot * P(10u) + cell] = bitcast<i32>(A[P(9u) + r]);
    }}
}}
"""
    )


def attention(kv: str, dv: int, dk: int = 0) -> str:
    """Attention of each (query row, head) over the visible cells of its sequence: one
    workgroup of 64 threads per pair, 64 cells at a time, online softmax in f32. ``kv``:
    "f16" / "f32" (the state's cache, positions from the state), "act" (keys and
    values are this pass's activations, positions the pass's: attention without a
    cache) or "cross" (a cross-attention memory of the state, f32 [slot, row, kv head,
    dim], every stored row visible). P: 0 rows, 1 heads, 2 kv heads, 3 dk, 4 dv, 5 q
    offset, 6 out offset, 7 capacity (cross: the memory's rows per slot), 8 seq table
    offset, 9 n_seq, 10 q positions offset, 11 n_ctx, 12 scale, 13 softcap (0: none),
    14 window (0: none), 15 causal (attention without a cache; cross: shared, every
    sequence reads the batch's first one's memory), 16 k offset, 17 v offset (act;
    cross: 16 the offset of the rows stored per slot, u32 [slots])."""
    per = max(1, -(-dv // 64))
    if kv == "f16":
        binds = """
@group(0) @binding(2) var<storage, read_write> K: array<u32>;
@group(0) @binding(3) var<storage, read_write> V: array<u32>;
@group(0) @binding(4) var<storage, read_write> POS: array<i32>;
fn kval(base: u32, e: u32) -> vec2<f32> { return unpack2x16float(K[(base + e) / 2u]); }
fn vval(base: u32, e: u32) -> f32 { return unpack2x16float(V[(base + e) / 2u])[e & 1u]; }
"""
        kstep = 2
    elif kv == "f32":
        binds = """
@group(0) @binding(2) var<storage, read_write> K: array<u32>;
@group(0) @binding(3) var<storage, read_write> V: array<u32>;
@group(0) @binding(4) var<storage, read_write> POS: array<i32>;
fn kval(base: u32, e: u32) -> vec2<f32> { return vec2<f32>(bitcast<f32>(K[base + e]), bitcast<f32>(K[base + e + 1u])); }
fn vval(base: u32, e: u32) -> f32 { return bitcast<f32>(V[base + e]); }
"""
        kstep = 2
    elif kv == "cross":
        binds = """
@group(0) @binding(2) var<storage, read_write> K: array<u32>;
@group(0) @binding(3) var<storage, read_write> V: array<u32>;
fn kval(base: u32, e: u32) -> vec2<f32> { return vec2<f32>(bitcast<f32>(K[base + e]), bitcast<f32>(K[base + e + 1u])); }
fn vval(base: u32, e: u32) -> f32 { return bitcast<f32>(V[base + e]); }
"""
        kstep = 2
    else:
        binds = """
fn kval(base: u32, e: u32) -> vec2<f32> { return vec2<f32>(bitcast<f32>(A[P(16u) + base + e]), bitcast<f32>(A[P(16u) + base + e + 1u])); }
fn vval(base: u32, e: u32) -> f32 { return bitcast<f32>(A[P(17u) + base + e]); }
"""
        kstep = 2
    qpos = "bitcast<i32>(A[P(10u) + r])"
    if kv == "cross":
        # row c of the memory of the sequence's slot (of the batch's first sequence when
        # shared), every stored row visible: no positions, no mask
        cell_setup = """
    let mslot = A[seq + select(s, 0u, P(15u) != 0u)];
    let c_lo = 0u; let c_hi = A[P(16u) + mslot];
"""
        kbase = "((mslot * cap + c) * nkv + g) * dk"
        vbase = "((mslot * cap + c) * nkv + g) * dv"
        cpos = "0"
        qpos = "0"
    elif kv == "act":
        # cell c of the sequence is row r0 + c of this pass; key rows are [n, kv heads, dk]
        cell_setup = """
    let c_lo = 0u; let c_hi = n;
"""
        kbase = "(r0 + c) * nkv * dk + g * dk"
        vbase = "(r0 + c) * nkv * dv + g * dv"
        cpos = "bitcast<i32>(A[P(10u) + r0 + c])"
    else:
        cell_setup = """
    let c_hi = start + n;
    let c_lo = select(0u, c_hi - cap, c_hi > cap);
"""
        kbase = "((slot * nkv + g) * cap + c % cap) * dk"
        vbase = "((slot * nkv + g) * cap + c % cap) * dv"
        cpos = "POS[slot * P(11u) + c]"
    causal = "P(15u) != 0u" if kv == "act" else "false" if kv == "cross" else "true"
    # the key loop with the head size baked in: unrolled by the compiler, its loads
    # issued together instead of one round trip each
    if dk and dk % 8 == 0:
        kloop = f"""                for (var e = 0u; e < {dk}u; e += 8u) {{
                    let k0 = kval(kb, e); let k1 = kval(kb, e + 2u); let k2 = kval(kb, e + 4u); let k3 = kval(kb, e + 6u);
                    d += qs[e] * k0.x + qs[e + 1u] * k0.y + qs[e + 2u] * k1.x + qs[e + 3u] * k1.y
                       + qs[e + 4u] * k2.x + qs[e + 5u] * k2.y + qs[e + 6u] * k3.x + qs[e + 7u] * k3.y;
                }}
"""
    else:
        kloop = f"""                for (var e = 0u; e < dk; e += {kstep}u) {{
                    let kv2 = kval(kb, e);
                    d += qs[e] * kv2.x + qs[e + 1u] * kv2.y;
                }}
"""
    vunroll = ""
    for q in range(4):
        vunroll += f"""                        {{ let pj = sc[j + {q}u]; let c = c0 + j + {q}u;
                          a += select(0.0, pj * vval({vbase}, e), pj != 0.0); }}
"""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + SEQ_FN
        + binds
        + f"""
var<workgroup> qs: array<f32, 512>;
var<workgroup> sc: array<f32, 64>;
var<workgroup> u_lo: u32;
var<workgroup> u_hi: u32;
var<workgroup> u_cm: f32;
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let rh = wg_linear(wid, nwg);
    let nh = P(1u);
    if (rh >= P(0u) * nh) {{ return; }}
    let r = rh / nh; let h = rh % nh;
    let nkv = P(2u); let dk = P(3u); let dv = P(4u);
    let g = h / (nh / nkv);
    let seq = P(8u); let n_seq = P(9u);
    let s = seq_of(r, seq, n_seq);
    let slot = A[seq + s]; let start = A[seq + n_seq + s];
    let r0 = A[seq + 2u * n_seq + s]; let n = A[seq + 3u * n_seq + s];
    let cap = P(7u);
    let qpos = {qpos};
    let window = i32(P(14u));
    let scale = PF(12u); let cap_s = PF(13u);
    for (var e = t; e < dk; e += 64u) {{ qs[e] = bitcast<f32>(A[P(5u) + (r * nh + h) * dk + e]); }}
    workgroupBarrier();
{cell_setup}
    // the loop bounds come from the arena: made uniform for the barriers inside
    if (t == 0u) {{ u_lo = c_lo; u_hi = c_hi; }}
    let lo = workgroupUniformLoad(&u_lo);
    let hi = workgroupUniformLoad(&u_hi);
    var m = -3.0e38;
    var l = 0.0;
    var acc: array<f32, {per}>;
    for (var i = 0u; i < {per}u; i++) {{ acc[i] = 0.0; }}
    for (var c0 = lo; c0 < hi; c0 += 64u) {{
        let c = c0 + t;
        var score = -3.0e38;
        if (c < hi) {{
            let p = {cpos};
            var vis = p >= 0 && (!({causal}) || p <= qpos);
            if (window > 0) {{ vis = vis && (qpos - p < window) && (p - qpos < window); }}
            if (vis) {{
                let kb = {kbase};
                var d = 0.0;
{kloop}
                d *= scale;
                if (cap_s > 0.0) {{
                    let u = d / cap_s;
                    d = cap_s * select(1.0 - 2.0 / (exp(2.0 * u) + 1.0), sign(u), abs(u) > 15.0);
                }}
                score = d;
            }}
        }}
        sc[t] = score;
        workgroupBarrier();
        var cm = -3.0e38;
        for (var j = 0u; j < 64u; j++) {{ cm = max(cm, sc[j]); }}
        if (t == 0u) {{ u_cm = cm; }}
        cm = workgroupUniformLoad(&u_cm);
        if (cm > -1.0e38) {{
            let mn = max(m, cm);
            let alpha = exp(m - mn);
            sc[t] = select(0.0, exp(score - mn), score > -1.0e38);
            workgroupBarrier();
            var ps = 0.0;
            let cnt = min(64u, hi - c0);
            for (var j = 0u; j < cnt; j++) {{ ps += sc[j]; }}
            l = l * alpha + ps;
            for (var i = 0u; i < {per}u; i++) {{
                let e = t + 64u * i;
                if (e < dv) {{
                    var a = acc[i] * alpha;
                    // four cells an iteration: independent loads in flight; a masked
                    // cell (weight 0) adds nothing even if its value is not finite
                    var j = 0u;
                    for (; j + 4u <= cnt; j += 4u) {{
{vunroll}                    }}
                    for (; j < cnt; j++) {{
                        let pj = sc[j];
                        let c = c0 + j;
                        a += select(0.0, pj * vval({vbase}, e), pj != 0.0);
                    }}
                    acc[i] = a;
                }}
            }}
            m = mn;
            workgroupBarrier();
        }}
    }}
    let o = P(6u) + (r * nh + h) * dv;
    for (var i = 0u; i < {per}u; i++) {{
        let e = t + 64u * i;
        if (e < dv) {{ A[o + e] = bitcast<u32>(select(0.0, acc[i] / l, l > 0.0)); }}
    }}
}}
"""
    )


# the f16 cache as attention_lanes and attention_tiles read it: keys and values as 16-byte
# words of 8 halves (h8 decodes one), the cells' positions
F16_CACHE = """
@group(0) @binding(2) var<storage, read> K4: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> V4: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read> POS: array<i32>;
fn h8(w: vec4<u32>) -> V8 {
    return V8(vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)), vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w)));
}"""


def _rotating_parts(dk: int, dv: int, rope_sg: bool, split: bool) -> tuple[str, str, str]:
    """attention_lanes' rotating form: (the query's load: norms, rotations and scale as
    `rope`'s, the key and value rounded to f16 as the cache holds them; the cache
    stores; the functions and shared arrays they need)."""
    norm_sum = _ROPE_SUBGROUPS if rope_sg else _ROPE_TREE
    sig, call = ("x: u32, t: u32, sgs: u32", "{x}, t, sgs") if rope_sg else ("x: u32, t: u32", "{x}, t")
    lib = (
        ROPE_FNS
        + f"""
var<workgroup> qf: array<f32, {dk}>;
var<workgroup> kf: array<f32, {dk}>;
var<workgroup> kc: array<vec4<u32>, {dk // 8}>;
var<workgroup> vc: array<vec4<u32>, {dv // 8}>;
// a head's sum of squares as `rope` takes it: 64 threads' strided sums, then its
// reduction. Called twice (the query's head, the key's): every thread reads the sum
// before the barrier, so the second call's tree cannot overwrite rred[0] under a thread
// still to read the first's
fn rope_norm({sig}) -> f32 {{
    var q = 0.0;
    if (t < 64u) {{ for (var j = t; j < {dk}u; j += 64u) {{ let v = bitcast<f32>(A[x + j]); q += v * v; }} }}
{norm_sum}    let total = rred[0];
    workgroupBarrier();
    return total;
}}
fn pack8(a: u32) -> vec4<u32> {{
    return vec4<u32>(pack2x16float(vec2<f32>(kf[a], kf[a + 1u])), pack2x16float(vec2<f32>(kf[a + 2u], kf[a + 3u])),
                     pack2x16float(vec2<f32>(kf[a + 4u], kf[a + 5u])), pack2x16float(vec2<f32>(kf[a + 6u], kf[a + 7u])));
}}
// eight values of the arena from a, rounded to f16 as `kv_store` rounds them (no
// private array: see attention_lanes)
fn pack2a(a: u32) -> u32 {{ return pack2x16float(vec2<f32>(bitcast<f32>(A[a]), bitcast<f32>(A[a + 1u]))); }}
fn pack8a(a: u32) -> vec4<u32> {{ return vec4<u32>(pack2a(a), pack2a(a + 2u), pack2a(a + 4u), pack2a(a + 6u)); }}
"""
    )
    query = f"""    // this row's query (P 5) and its KV head's key (P 18) as the products left them:
    // normed (P 35 bits 1, 2; weights + 1 at P 30, 32, eps at 31, 33), rotated (P 20..29),
    // the query scaled (P 34), as `rope` computes them
    let xq = P(5u) + (r * nh + h) * {dk}u;
    let xk = P(18u) + (r * nkv + g) * {dk}u;
    var invq = 1.0; var nwq = 0u;
    if ((P(35u) & 1u) != 0u) {{ invq = inverseSqrt(rope_norm({call.format(x="xq")}) / f32({dk}u) + PF(31u)); nwq = P(30u); }}
    var invk = 1.0; var nwk = 0u;
    if ((P(35u) & 2u) != 0u) {{ invk = inverseSqrt(rope_norm({call.format(x="xk")}) / f32({dk}u) + PF(33u)); nwk = P(32u); }}
    var osc = 1.0;
    if (P(34u) != 0u) {{ osc = PF(34u); }}
    let one = 1.0;
    let rp = rope_of(20u);
    let pos = f32(qpos);
    for (var j = rp.nd + t; j < {dk}u; j += {ATT_WG}u) {{ qf[j] = xin(xq, j, invq, nwq) * osc; kf[j] = xin(xk, j, invk, nwk) * one; }}
    for (var i = t; i < rp.nd / 2u; i += {ATT_WG}u) {{
        let cs = rope_cs(rp, i, pos);
        let cz = cs.x; let sz = cs.y;
        let ii = rope_idx(rp, i);
        let x0 = xin(xq, ii.x, invq, nwq); let x1 = xin(xq, ii.y, invq, nwq);
        qf[ii.x] = (x0 * cz - x1 * sz) * osc;
        qf[ii.y] = (x0 * sz + x1 * cz) * osc;
        let y0 = xin(xk, ii.x, invk, nwk); let y1 = xin(xk, ii.y, invk, nwk);
        kf[ii.x] = (y0 * cz - y1 * sz) * one;
        kf[ii.y] = (y0 * sz + y1 * cz) * one;
    }}
    workgroupBarrier();
    for (var e = t; e < {dk // 4}u; e += {ATT_WG}u) {{ qs[e] = vec4<f32>(qf[4u * e], qf[4u * e + 1u], qf[4u * e + 2u], qf[4u * e + 3u]); }}
    for (var e = t; e < {dk // 8}u; e += {ATT_WG}u) {{ kc[e] = pack8(8u * e); }}
    let xv = P(19u) + (r * nkv + g) * {dv}u;
    for (var e = t; e < {dv // 8}u; e += {ATT_WG}u) {{ vc[e] = pack8a(xv + 8u * e); }}
    // the current cell: this row's (one row a sequence)
    let cur = start + r - A[seq + 2u * n_seq + s];
"""
    # the last head of the group: a software adapter that runs the workgroups in order
    # then runs the others first, so a kernel that read the current cell from the cache
    # would read it unwritten there too (the tests would see it)
    writer = "h % (nh / nkv) == nh / nkv - 1u" + (" && sp == 0u" if split else "")
    stores = f"""    // one workgroup of the KV head writes the current cell (no other reads it)
    if ({writer}) {{
        let cb = (slot * nkv + g) * cap + cur % cap;
        for (var e = t; e < {dk // 8}u; e += {ATT_WG}u) {{ K4[cb * {dk // 8}u + e] = kc[e]; }}
        for (var e = t; e < {dv // 8}u; e += {ATT_WG}u) {{ V4[cb * {dv // 8}u + e] = vc[e]; }}
        if (P(36u) != 0u && g == 0u && t == 0u) {{ POS[slot * P(11u) + cur] = qpos; }}
    }}
"""
    return query, stores, lib


ATT_WG = 128  # threads of attention_lanes: cells a chunk
ATT_SPLIT_CELLS = 128  # the fewest cells a split attention_lanes gives one workgroup


def attention_lanes(dv: int, dk: int, subgroups: bool = False, split: int = 1, rotate: int = 0) -> str:
    """Attention over an f16 cache for heads of dk, dv values (multiples of 8, at most
    256), latency first: a decode step has a few workgroups (rows x heads), each a chain
    of dependent loads, so every load a thread needs is issued at once. One workgroup of
    128 threads per (query row, head), 128 cells a chunk, online softmax in f32:

    - scores: thread t takes cell t of the chunk, its key read as dk / 8 16-byte loads
      (all in flight together), the query from shared memory;
    - the chunk's max and sum: shared-memory trees (7 steps) instead of a loop over the
      chunk in every thread;
    - values: thread t takes 8 values (one 16-byte load a cell) of every (128 / (dv / 8))th
      cell, four cells at a time, so a chunk costs 1-4 round trips to memory instead of
      one per four cells; the threads' partial sums meet once, at the end, in a fixed
      order (a row's result does not depend on the other rows of the pass).

    With ``subgroups`` the max and the sum go through `subgroupMax`/`subgroupAdd` and one
    shared-memory step (two barriers each instead of eight). A cell's key is read before
    its position is checked (the two loads in flight together; a hidden cell's score is
    dropped whatever it is).

    A key's loads are written out eight at a time (in flight together without the
    compiler's unrolling), and the values taken eight cells at a time (heads of 256
    values give each thread a quarter of a chunk's cells). Written as loops, four cells
    at a time, the H200 took 1.19x as long over Gemma 3's decode step (1.766 against
    1.488 ms).

    ``split`` > 1 (flash-decoding): the cells of a (query row, head) are cut into at most
    ``split`` spans of ATT_SPLIT_CELLS or more, each taken by its own workgroup, which
    writes its running max, sum and unscaled values to scratch (P 16: its offset;
    ``split`` x (dv + 2) values a row and head) for `attention_combine`; a decode step over a
    long context otherwise walks all its chunks in a few workgroups.

    ``rotate`` (1: norms through a shared-memory tree, 2: through subgroups, as `rope`'s
    ``subgroups``): the rotating form, for a pass of one row per sequence. It takes the
    layer's queries, keys and values as the products left them and does the work of
    `rope_kv` (the norms, rotations and scale of `rope`, in its arithmetic, then the cache
    stores) in the workgroup of each (row, head): one dispatch a layer fewer in a decoded
    token. Each workgroup rotates its query and its KV head's key; one workgroup of that
    KV head (its last query head's, first span) writes the key, the value and the
    position into the cache. No workgroup reads the current cell from the cache, which
    the others may not have written yet: its key, value and position come from the
    workgroup's own copy, the same f16 values the cache would give back, so the results'
    bits are those of `rope_kv` and then the plain form.

    Parameters as `attention` ("f16"); in the rotating form P 5 is the queries before
    their rotation, 18 the keys', 19 the values' offset, 20..29 `rope`'s 6..15, 30..35
    `rope`'s 32..37 (norms and the queries' scale), 36 write the cells' positions."""
    lanes = dv // 8
    subs = ATT_WG // lanes
    n_cells = 8
    key = ""

    def kload(e: int) -> str:
        return f"select(K4[kb + {e}u], kc[{e}u], now)" if rotate else f"K4[kb + {e}u]"

    def vload(cell: str) -> str:
        v = f"V4[(head + ({cell}) % cap) * {lanes}u + lane]"
        return f"select({v}, vc[lane], {cell} == cur)" if rotate else v

    for e0 in range(0, dk // 8, 8):
        n = min(8, dk // 8 - e0)
        key += "".join(f"            let k{e0 + e} = h8({kload(e0 + e)});\n" for e in range(n))
        key += "".join(
            f"            d += dot(qs[{2 * (e0 + e)}u], k{e0 + e}.a) + dot(qs[{2 * (e0 + e) + 1}u], k{e0 + e}.b);\n"
            for e in range(n)
        )
    vals = "".join(f"            let p{i} = sc[j + {i * subs}u];\n" for i in range(n_cells))
    vals += "".join(f"            let v{i} = h8({vload(f'c0 + j + {i * subs}u')});\n" for i in range(n_cells))
    vals += "            // a masked cell (weight 0) adds nothing even if its values are not finite\n"
    vals += "".join(
        f"            if (p{i} != 0.0) {{ acc.a += p{i} * v{i}.a; acc.b += p{i} * v{i}.b; }}\n" for i in range(n_cells)
    )
    if subgroups:
        tree_fn = f"""// the workgroup's max (is_max) or sum of v: the subgroups' results, then thread 0
fn tree(v: f32, t: u32, is_max: bool, sgs: u32) -> f32 {{
    var s = 0.0;
    if (is_max) {{ s = subgroupMax(v); }} else {{ s = subgroupAdd(v); }}
    if (t % sgs == 0u) {{ red[t / sgs] = s; }}
    workgroupBarrier();
    if (t == 0u) {{
        var r = red[0];
        for (var i = 1u; i < {ATT_WG}u / sgs; i++) {{ r = select(r + red[i], max(r, red[i]), is_max); }}
        u_r = r;
    }}
    return workgroupUniformLoad(&u_r);
}}"""
        tree_call, sg_builtin = "tree({v}, t, {m}, sgs)", ", @builtin(subgroup_size) sgs: u32"
    else:
        tree_fn = f"""// the workgroup's max (is_max) or sum of v, through a shared-memory tree
fn tree(v: f32, t: u32, is_max: bool) -> f32 {{
    red[t] = v;
    workgroupBarrier();
    for (var s = {ATT_WG // 2}u; s > 0u; s >>= 1u) {{
        if (t < s) {{ red[t] = select(red[t] + red[t + s], max(red[t], red[t + s]), is_max); }}
        workgroupBarrier();
    }}
    if (t == 0u) {{ u_r = red[0]; }}
    return workgroupUniformLoad(&u_r);
}}"""
        tree_call, sg_builtin = "tree({v}, t, {m})", ""
    if rotate == 2 and not subgroups:
        sg_builtin = ", @builtin(subgroup_size) sgs: u32"
    reduce = f"""    if (t < {lanes}u) {{
        var a = vec4<f32>(0.0); var b = vec4<f32>(0.0);
        for (var i = 0u; i < {subs}u; i++) {{ a += part[2u * (i * {lanes}u + t)]; b += part[2u * (i * {lanes}u + t) + 1u]; }}
"""
    if split == 1:
        head_index = "    let rh = wg_linear(wid, nwg);"
        span = "    let c_lo = lo; let c_hi = hi;\n"
        tail = (
            reduce
            + f"""        let inv = select(0.0, 1.0 / l, l > 0.0);
        let o = P(6u) + (r * nh + h) * {dv}u + 8u * t;
        a *= inv; b *= inv;
        A[o] = bitcast<u32>(a.x); A[o + 1u] = bitcast<u32>(a.y); A[o + 2u] = bitcast<u32>(a.z); A[o + 3u] = bitcast<u32>(a.w);
        A[o + 4u] = bitcast<u32>(b.x); A[o + 5u] = bitcast<u32>(b.y); A[o + 6u] = bitcast<u32>(b.z); A[o + 7u] = bitcast<u32>(b.w);
"""
        )
    else:
        head_index = f"    let rs = wg_linear(wid, nwg); let rh = rs / {split}u; let sp = rs % {split}u;"
        # this workgroup's span of the cells (uniform: from lo and hi); a span past the
        # cells' count writes an empty part (weight 0) and leaves
        span = f"""    let ns = min({split}u, max(1u, (hi - lo + {ATT_SPLIT_CELLS - 1}u) / {ATT_SPLIT_CELLS}u));
    let per = (hi - lo + ns - 1u) / ns;
    let po = P(16u) + rs * {dv + 2}u;
    if (sp >= ns) {{
        if (t == 0u) {{ A[po] = bitcast<u32>(-3.0e38); A[po + 1u] = 0u; }}
        return;
    }}
    let c_lo = lo + sp * per; let c_hi = min(hi, c_lo + per);
"""
        tail = (
            reduce
            + """        let o = po + 2u + 8u * t;
        A[o] = bitcast<u32>(a.x); A[o + 1u] = bitcast<u32>(a.y); A[o + 2u] = bitcast<u32>(a.z); A[o + 3u] = bitcast<u32>(a.w);
        A[o + 4u] = bitcast<u32>(b.x); A[o + 5u] = bitcast<u32>(b.y); A[o + 6u] = bitcast<u32>(b.z); A[o + 7u] = bitcast<u32>(b.w);
        if (t == 0u) { A[po] = bitcast<u32>(m); A[po + 1u] = bitcast<u32>(l); }
"""
        )
    query = f"""    let qo = P(5u) + (r * nh + h) * {dk}u;
    for (var e = t; e < {dk // 4}u; e += {ATT_WG}u) {{
        qs[e] = vec4<f32>(bitcast<f32>(A[qo + 4u * e]), bitcast<f32>(A[qo + 4u * e + 1u]),
                          bitcast<f32>(A[qo + 4u * e + 2u]), bitcast<f32>(A[qo + 4u * e + 3u]));
    }}
"""
    stores, pos_load, cache, rot_lib, now = "", "POS[slot * P(11u) + c]", F16_CACHE, "", ""
    if rotate:
        query, stores, rot_lib = _rotating_parts(dk, dv, rotate == 2, split > 1)
        now = "            let now = c == cur;\n"
        pos_load = "select(POS[slot * P(11u) + c], qpos, now)"
        cache = F16_CACHE.replace("var<storage, read>", "var<storage, read_write>")
    return (
        HEADER
        + ARENA_U32
        + GRID
        + SEQ_FN
        + cache
        + rot_lib
        + f"""
var<workgroup> qs: array<vec4<f32>, {dk // 4}>;
var<workgroup> sc: array<f32, {ATT_WG}>;
var<workgroup> red: array<f32, {ATT_WG}>;
var<workgroup> part: array<vec4<f32>, {2 * ATT_WG}>;
var<workgroup> u_lo: u32;
var<workgroup> u_hi: u32;
var<workgroup> u_r: f32;
{tree_fn}
@compute @workgroup_size({ATT_WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32{sg_builtin}) {{
{head_index}
    let nh = P(1u);
    // whole workgroups leave together (uniform): the barriers below see all threads
    if (rh >= P(0u) * nh) {{ return; }}
    let r = rh / nh; let h = rh % nh;
    let nkv = P(2u);
    let g = h / (nh / nkv);
    let seq = P(8u); let n_seq = P(9u);
    let s = seq_of(r, seq, n_seq);
    let slot = A[seq + s]; let start = A[seq + n_seq + s];
    let n = A[seq + 3u * n_seq + s];
    let cap = P(7u);
    let qpos = bitcast<i32>(A[P(10u) + r]);
    let window = i32(P(14u));
    let scale = PF(12u); let cap_s = PF(13u);
{query}    if (t == 0u) {{
        let c_hi = start + n;
        u_lo = select(0u, c_hi - cap, c_hi > cap); u_hi = c_hi;
    }}
    let lo = workgroupUniformLoad(&u_lo);
    let hi = workgroupUniformLoad(&u_hi);
{span}{stores}    let head = (slot * nkv + g) * cap;
    let lane = t % {lanes}u; let sub = t / {lanes}u;
    var m = -3.0e38;
    var l = 0.0;
    var acc = V8(vec4<f32>(0.0), vec4<f32>(0.0));
    for (var c0 = c_lo; c0 < c_hi; c0 += {ATT_WG}u) {{
        let c = c0 + t;
        var score = -3.0e38;
        if (c < c_hi) {{
{now}            let p = {pos_load};
            let kb = (head + c % cap) * {dk // 8}u;
            var d = 0.0;
{key}            var vis = p >= 0 && p <= qpos;
            if (window > 0) {{ vis = vis && (qpos - p < window) && (p - qpos < window); }}
            if (vis) {{
                d *= scale;
                if (cap_s > 0.0) {{
                    let u = d / cap_s;
                    d = cap_s * select(1.0 - 2.0 / (exp(2.0 * u) + 1.0), sign(u), abs(u) > 15.0);
                }}
                score = d;
            }}
        }}
        // a chunk without a visible cell changes nothing: its weights are 0, alpha 1
        let cm = {tree_call.format(v="score", m="true")};
        let mn = max(m, cm);
        let alpha = exp(m - mn);
        let pw = select(0.0, exp(score - mn), score > -1.0e38);
        sc[t] = pw;
        let ps = {tree_call.format(v="pw", m="false")};
        l = l * alpha + ps;
        acc.a *= alpha; acc.b *= alpha;
        let cnt = min({ATT_WG}u, c_hi - c0);
        var j = sub;
        for (; j + {(n_cells - 1) * subs}u < cnt; j += {n_cells * subs}u) {{
{vals}        }}
        for (; j < cnt; j += {subs}u) {{
            let pj = sc[j];
            let v = h8({vload("c0 + j")});
            if (pj != 0.0) {{ acc.a += pj * v.a; acc.b += pj * v.b; }}
        }}
        m = mn;
        workgroupBarrier();
    }}
    part[2u * t] = acc.a; part[2u * t + 1u] = acc.b;
    workgroupBarrier();
{tail}    }}
}}
"""
    )


def attention_combine(dv: int, split: int) -> str:
    """The parts of a split `attention_lanes` (flash-decoding) joined: a workgroup per
    (query row, head) weighs each part's values by exp(its max - the largest max), sums
    the parts in order and divides by the weighed sum of their sums. P 0 rows x heads,
    1 the parts' offset (``split`` x (dv + 2) values each: max, sum, values), 2 the output's.

    Every load is issued first (the parts' maxes, sums and this thread's values: one
    round trip to memory, not one for the maxes and another for the values, which their
    weights' test held back), then the arithmetic in the same order as before."""
    stride = dv + 2
    n_e = -(-dv // 64)  # values a thread takes from each part
    # written out part by part: no private array (the H200's compiler keeps one that a
    # loop indexes in local memory)
    part = [f"base + {s * stride}u" for s in range(split)]
    loads = "".join(f"    let e{j} = min(t + {64 * j}u, {dv - 1}u);\n" for j in range(n_e))
    for s_, p in enumerate(part):
        loads += f"    let m{s_} = bitcast<f32>(A[{p}]); let l{s_} = bitcast<f32>(A[{p} + 1u]);\n"
        loads += "".join(f"    let v{s_}_{j} = bitcast<f32>(A[{p} + 2u + e{j}]);\n" for j in range(n_e))
    maxes = "".join(f"    mx = max(mx, m{s_});\n" for s_ in range(split))
    weights = "".join(
        f"    let w{s_} = select(0.0, exp(m{s_} - mx), l{s_} > 0.0);\n    total += w{s_} * l{s_};\n"
        for s_ in range(split)
    )
    stores = ""
    for j in range(n_e):
        stores += f"    if (t + {64 * j}u < {dv}u) {{\n        var a = 0.0;\n"
        stores += "".join(f"        if (w{s_} != 0.0) {{ a += w{s_} * v{s_}_{j}; }}\n" for s_ in range(split))
        stores += f"        A[P(2u) + rh * {dv}u + t + {64 * j}u] = bitcast<u32>(a * inv);\n    }}\n"
    return (
        HEADER
        + ARENA_U32
        + GRID
        + f"""
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let rh = wg_linear(wid, nwg);
    if (rh >= P(0u)) {{ return; }}
    let base = P(1u) + rh * {split * stride}u;
{loads}    var mx = -3.0e38;
{maxes}    var total = 0.0;
    // an empty part (sum 0) weighs nothing (its values, read all the same, are not used)
{weights}    let inv = select(0.0, 1.0 / total, total > 0.0);
{stores}}}
"""
    )


ATT_TILE_ROWS = 16  # query rows a workgroup of attention_tiles takes (with one head)
ATT_TILE_CELLS = 64  # cells a chunk of attention_tiles


def attention_tiles(dv: int, dk: int) -> str:
    """Attention of a prompt pass over an f16 cache (flash-style): a workgroup of 128
    threads per (tile of ATT_TILE_ROWS query rows of one sequence, head), the cells
    ATT_TILE_CELLS a chunk, online softmax in f32. Every key and value a chunk reads
    serves the tile's 16 rows: per (row, head), as `attention_lanes` does it, each row
    read them all itself, and a prompt of 512 rows spent 11-31% of its pass there (H200).

    - a chunk's positions are read once; a chunk no row of the tile sees (the causal
      future of the tile, cells out of a window) is skipped whole;
    - scores: thread t takes cell t % 64 for 8 of the rows (the query rows in shared
      memory, read at the same address by a warp's threads), its key as dk / 8 16-byte
      loads;
    - softmax: 8 threads a row, 8 cells each; each row's sum in a fixed order;
    - values: thread t takes 8 values (one 16-byte load a cell) for 16 / (128 / (dv / 8))
      rows, four cells at a time.

    Heads of dk, dv values (multiples of 8, at most 256). Workgroups: sequences x
    ceil(rows / 16) x heads (a sequence's tiles start at its first row; the tiles past a
    sequence's rows leave at once). Parameters as `attention` ("f16")."""
    BQ, BC, WG = ATT_TILE_ROWS, ATT_TILE_CELLS, 128
    lanes = dv // 8
    groups = WG // lanes  # row groups of the values' phase
    per = max(1, BQ // groups)  # rows a thread accumulates (heads under 64 values: 1, and
    # the threads past the tile's rows idle there)
    idle = groups > BQ
    srows = WG // BC  # row groups of the scores' phase
    spr = BQ // srows  # rows a thread scores
    q4 = dk // 4
    d_decl = "".join(f"        var d{k} = 0.0;\n" for k in range(spr))
    d_fma = "".join(
        f"                d{k} += dot(qs[{k * srows}u * {q4}u + qb + 2u * e], kv.a)"
        f" + dot(qs[{k * srows}u * {q4}u + qb + 2u * e + 1u], kv.b);\n"
        for k in range(spr)
    )
    d_store = "".join(
        f"""        {{
            let i = sg + {k * srows}u;
            var x = -3.0e38;
            if (i < nr && cv && vis(p, qp[i], window)) {{ x = soft(d{k} * scale, cap_s); }}
            sc[i * {BC}u + cj] = x;
        }}
"""
        for k in range(spr)
    )
    acc_decl = "".join(f"    var acc{k} = V8(vec4<f32>(0.0), vec4<f32>(0.0));\n" for k in range(per))
    rescale = "".join(
        f"        {{ let a = ra[rg + {k * groups}u]; acc{k}.a *= a; acc{k}.b *= a; }}\n" for k in range(per)
    )

    def weigh(v: str, j: str, ind: str) -> str:
        return "".join(
            f"{ind}{{ let w = sc[(rg + {k * groups}u) * {BC}u + {j}]; "
            f"if (w != 0.0) {{ acc{k}.a += w * {v}.a; acc{k}.b += w * {v}.b; }} }}\n"
            for k in range(per)
        )

    vals4 = "".join(
        f"            let v{u} = h8(V4[(head + (c0 + j + {u}u) % cap) * {lanes}u + lane]);\n" for u in range(4)
    )
    vals4 += "".join(weigh(f"v{u}", f"j + {u}u", "            ") for u in range(4))
    stores = "".join(
        f"""    {{
        let i = rg + {k * groups}u;
        if (i < nr{" && i < " + str(BQ) + "u" if idle else ""}) {{
            let l = rl[i];
            let inv = select(0.0, 1.0 / l, l > 0.0);
            let o = P(6u) + ((r0 + i) * nh + h) * {dv}u + 8u * lane;
            let a = acc{k}.a * inv; let b = acc{k}.b * inv;
            A[o] = bitcast<u32>(a.x); A[o + 1u] = bitcast<u32>(a.y); A[o + 2u] = bitcast<u32>(a.z); A[o + 3u] = bitcast<u32>(a.w);
            A[o + 4u] = bitcast<u32>(b.x); A[o + 5u] = bitcast<u32>(b.y); A[o + 6u] = bitcast<u32>(b.z); A[o + 7u] = bitcast<u32>(b.w);
        }}
    }}
"""
        for k in range(per)
    )
    return (
        HEADER
        + ARENA_U32
        + GRID
        + F16_CACHE
        + f"""
// whether a cell at position p is visible to a query row at q
fn vis(p: i32, q: i32, window: i32) -> bool {{
    var v = p >= 0 && p <= q;
    if (v && window > 0) {{ v = q - p < window; }}
    return v;
}}
fn soft(d: f32, cap_s: f32) -> f32 {{
    if (cap_s <= 0.0) {{ return d; }}
    let u = d / cap_s;
    return cap_s * select(1.0 - 2.0 / (exp(2.0 * u) + 1.0), sign(u), abs(u) > 15.0);
}}
var<workgroup> qs: array<vec4<f32>, {BQ * q4}>;
var<workgroup> sc: array<f32, {BQ * BC}>;
var<workgroup> cpos: array<i32, {BC}>;
var<workgroup> qp: array<i32, {BQ}>;
var<workgroup> red: array<f32, {WG}>;
var<workgroup> rm: array<f32, {BQ}>;
var<workgroup> rl: array<f32, {BQ}>;
var<workgroup> ra: array<f32, {BQ}>;
var<workgroup> seen: atomic<u32>;
var<workgroup> u_seen: u32;
var<workgroup> u_r0: u32;
var<workgroup> u_nr: u32;
var<workgroup> u_lo: u32;
var<workgroup> u_hi: u32;
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let w = wg_linear(wid, nwg);
    let n_rows = P(0u); let nh = P(1u);
    let tiles = (n_rows + {BQ - 1}u) / {BQ}u;
    let seq = P(8u); let n_seq = P(9u);
    // whole workgroups leave together (uniform): the barriers below see all threads
    if (w >= n_seq * tiles * nh) {{ return; }}
    let h = w % nh; let st = w / nh;
    let s = st / tiles; let tile = st % tiles;
    let nkv = P(2u);
    let g = h / (nh / nkv);
    let cap = P(7u);
    if (t == 0u) {{
        let first = A[seq + 2u * n_seq + s];
        var end = n_rows;
        if (s + 1u < n_seq) {{ end = A[seq + 2u * n_seq + s + 1u]; }}
        let r0 = first + tile * {BQ}u;
        u_r0 = r0;
        u_nr = select(0u, min({BQ}u, end - r0), r0 < end);
        let c_hi = A[seq + n_seq + s] + A[seq + 3u * n_seq + s];
        u_lo = select(0u, c_hi - cap, c_hi > cap); u_hi = c_hi;
        atomicStore(&seen, 0u);
    }}
    let nr = workgroupUniformLoad(&u_nr);
    if (nr == 0u) {{ return; }}
    let r0 = workgroupUniformLoad(&u_r0);
    let lo = workgroupUniformLoad(&u_lo);
    let hi = workgroupUniformLoad(&u_hi);
    let slot = A[seq + s];
    let head = (slot * nkv + g) * cap;
    let window = i32(P(14u));
    let scale = PF(12u); let cap_s = PF(13u);
    for (var e = t; e < {BQ * q4}u; e += {WG}u) {{
        let i = e / {q4}u;
        var q = vec4<f32>(0.0);
        if (i < nr) {{
            let qo = P(5u) + ((r0 + i) * nh + h) * {dk}u + 4u * (e % {q4}u);
            q = vec4<f32>(bitcast<f32>(A[qo]), bitcast<f32>(A[qo + 1u]), bitcast<f32>(A[qo + 2u]), bitcast<f32>(A[qo + 3u]));
        }}
        qs[e] = q;
    }}
    if (t < {BQ}u) {{
        qp[t] = select(-1, bitcast<i32>(A[P(10u) + r0 + t]), t < nr);
        rm[t] = -3.0e38; rl[t] = 0.0;
    }}
    let cj = t % {BC}u; let sg = t / {BC}u; let qb = sg * {q4}u;
    let si = t / 8u; let sq = t % 8u;
    let lane = t % {lanes}u; let rg = t / {lanes}u;
{acc_decl}    workgroupBarrier();
    for (var c0 = lo; c0 < hi; c0 += {BC}u) {{
        // the chunk's positions, and whether any row of the tile sees any of its cells
        if (t < {BC}u) {{
            let c = c0 + t;
            var p = -1;
            if (c < hi) {{ p = POS[slot * P(11u) + c]; }}
            cpos[t] = p;
            var any = false;
            for (var i = 0u; i < nr; i++) {{ any = any || vis(p, qp[i], window); }}
            if (any) {{ atomicOr(&seen, 1u); }}
        }}
        workgroupBarrier();
        if (t == 0u) {{ u_seen = atomicLoad(&seen); atomicStore(&seen, 0u); }}
        if (workgroupUniformLoad(&u_seen) == 0u) {{ continue; }}
        // scores of 8 rows for this thread's cell
        let c = c0 + cj;
        let p = cpos[cj];
        let cv = c < hi;
{d_decl}        if (cv && p >= 0) {{
            let kb = (head + c % cap) * {dk // 8}u;
            for (var e = 0u; e < {dk // 8}u; e++) {{
                let kv = h8(K4[kb + e]);
{d_fma}            }}
        }}
{d_store}        workgroupBarrier();
        // softmax: 8 threads a row, 8 cells each
        var mx = -3.0e38;
        for (var u = 0u; u < 8u; u++) {{ mx = max(mx, sc[si * {BC}u + sq * 8u + u]); }}
        red[t] = mx;
        workgroupBarrier();
        var cm = red[si * 8u];
        for (var u = 1u; u < 8u; u++) {{ cm = max(cm, red[si * 8u + u]); }}
        let mo = rm[si];
        let mn = max(mo, cm);
        var ps = 0.0;
        for (var u = 0u; u < 8u; u++) {{
            let x = sc[si * {BC}u + sq * 8u + u];
            let wgt = select(0.0, exp(x - mn), x > -1.0e38);
            sc[si * {BC}u + sq * 8u + u] = wgt;
            ps += wgt;
        }}
        workgroupBarrier();
        red[t] = ps;
        workgroupBarrier();
        if (sq == 0u) {{
            var l = 0.0;
            for (var u = 0u; u < 8u; u++) {{ l += red[si * 8u + u]; }}
            let alpha = exp(mo - mn);
            ra[si] = alpha; rm[si] = mn; rl[si] = rl[si] * alpha + l;
        }}
        workgroupBarrier();
        // values: 8 of them for {per} rows, four cells at a time
        if ({"rg < " + str(BQ) + "u" if idle else "true"}) {{
{rescale}        let cnt = min({BC}u, hi - c0);
        var j = 0u;
        for (; j + 3u < cnt; j += 4u) {{
{vals4}        }}
        for (; j < cnt; j++) {{
            let v = h8(V4[(head + (c0 + j) % cap) * {lanes}u + lane]);
{weigh("v", "j", "            ")}        }}
        }}
        workgroupBarrier();
    }}
{stores}}}
"""
    )
