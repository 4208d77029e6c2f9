"""Rotary embeddings (`rope`): the rotation's arithmetic, shared by every kernel that
rotates (`kv_store.rope_kv`, `attention_lanes`' rotating form), and its per-head norm."""

from __future__ import annotations

from .common import ARENA_U32, GRID, HEADER

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
