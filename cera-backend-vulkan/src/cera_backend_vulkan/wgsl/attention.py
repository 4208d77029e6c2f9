"""Attention over the cache, a cross-attention memory or this pass's rows, chunk by
chunk with an online softmax (`attention`, the general kernel: any cache type and head
size up to 512)."""

from __future__ import annotations

from cera.kv_types import hadamard_block

from .common import ARENA_U32, GRID, HEADER, SEQ_FN
from .kv_quant import QUANT_KV, hadamard, readers
from .kv_tq import TQ_KV, attention_parts


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
    cross: 16 the offset of the rows stored per slot, u32 [slots]). ``kv`` "q8_0" /
    "q4_0": the state's quantized cache (`wgsl.kv_quant`), its rows kept turned where
    `cera.kv_types.hadamard_block` says so: the query is turned as the keys were, and the
    output turned back from the values' turn. ``kv`` "tq3" / "tq2": the state's
    TurboQuant cache, read as it is kept (`wgsl.kv_tq`; ``dk`` given): P 16 and 17 the
    arena offsets of the rotations of dk and dv."""
    per = max(1, -(-dv // 64))
    tq = attention_parts(kv, dv=dv, dk=dk) if kv in TQ_KV else None
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
    elif kv in QUANT_KV:
        binds = """
@group(0) @binding(2) var<storage, read_write> K: array<u32>;
@group(0) @binding(3) var<storage, read_write> V: array<u32>;
@group(0) @binding(4) var<storage, read_write> POS: array<i32>;
""" + readers(kv)
        kstep = 2
    elif tq is not None:
        binds = tq["binds"]
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
        if tq is not None:  # row indices: the readers know the rows' bytes
            kbase = vbase = "(slot * nkv + g) * cap + c % cap"
    causal = "P(15u) != 0u" if kv == "act" else "false" if kv == "cross" else "true"
    # the key loop with the head size baked in: unrolled by the compiler, its loads
    # issued together instead of one round trip each
    if tq is not None:
        kloop = tq["kloop"]
    elif dk and dk % 8 == 0:
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
    turn_q = turn_out = ""
    if kv in QUANT_KV:
        turn_q = hadamard("qs", dk, hadamard_block(kv, dk, True))
        turn_out = hadamard("qs", dv, hadamard_block(kv, dv, False))
    if tq is not None:
        turn_q, turn_out = tq["turn_q"], tq["turn_out"]
    if turn_out:
        # the output through shared memory (qs is free after the last chunk), turned back
        write_out = f"""    workgroupBarrier();
    for (var i = 0u; i < {per}u; i++) {{
        let e = t + 64u * i;
        if (e < dv) {{ qs[e] = select(0.0, acc[i] / l, l > 0.0); }}
    }}
{turn_out}    for (var e = t; e < dv; e += 64u) {{ A[o + e] = bitcast<u32>(qs[e]); }}
"""
    else:
        write_out = f"""    for (var i = 0u; i < {per}u; i++) {{
        let e = t + 64u * i;
        if (e < dv) {{ A[o + e] = bitcast<u32>(select(0.0, acc[i] / l, l > 0.0)); }}
    }}
"""
    # a TurboQuant value is its centroid weighed by wn (the weight times the row's norm
    # / sqrt(dv), once a cell), summed in the rotated space
    weights, value = ("wn", tq["vcode"]) if tq is not None else ("sc", f"vval({vbase}, e)")
    vunroll = ""
    for q in range(4):
        vunroll += f"""                        {{ let pj = {weights}[j + {q}u]; let c = c0 + j + {q}u;{" let vb = " + vbase + ";" if tq else ""}
                          a += select(0.0, pj * {value}, pj != 0.0); }}
"""
    wnorm = ""
    if tq is not None:
        wnorm = f"""            {{ let c = c0 + t; let vr = {vbase};
              wn[t] = select(0.0, sc[t] * {tq["vnorm"]}, sc[t] != 0.0); }}
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
{turn_q}{cell_setup}
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
{wnorm}            workgroupBarrier();
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
                        let pj = {weights}[j];
                        let c = c0 + j;{" let vb = " + vbase + ";" if tq else ""}
                        a += select(0.0, pj * {value}, pj != 0.0);
                    }}
                    acc[i] = a;
                }}
            }}
            m = mn;
            workgroupBarrier();
        }}
    }}
    let o = P(6u) + (r * nh + h) * dv;
{write_out}}}
"""
    )
