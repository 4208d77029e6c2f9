"""The block-wise row kernel (compile.ROW_KERNELS subgroup-blk): 32 columns a lane, whole-word loads."""

from __future__ import annotations

from .blocks import weight_lib
from .common import ACTIVATIONS, ARENA_F32, GRID, HEADER
from .products import MV_WG, SEG_BASE

# -- the block-wise row kernel (compile.ROW_KERNELS "subgroup-blk") ----------------------------

# 32 consecutive elements of a row, decoded at once: dq32_<W>(row byte offset, c) gives
# elements 32c .. 32c + 31 as eight vec4. The types that matter most in the real files
# read their block (or sub-block) with a few whole-word loads, each once; the others
# decode it as four groups of 8 (dq8).
V32 = """
struct V32 { v0: vec4<f32>, v1: vec4<f32>, v2: vec4<f32>, v3: vec4<f32>, v4: vec4<f32>, v5: vec4<f32>, v6: vec4<f32>, v7: vec4<f32> }
struct U8w { a: vec4<u32>, b: vec4<u32> }
"""

# 8 words from a 2-byte aligned byte offset (9 loads, no branch: a lane's blocks may be
# aligned differently from its neighbours')
WIN8 = """
fn win8_{W}(o: u32) -> U8w {
    let i = o >> 2u;
    let a = vec4<u32>({W}[i], {W}[i + 1u], {W}[i + 2u], {W}[i + 3u]);
    let b = vec4<u32>({W}[i + 4u], {W}[i + 5u], {W}[i + 6u], {W}[i + 7u]);
    let c = {W}[i + 8u];
    let odd = (o & 3u) != 0u;
    let a2 = (a >> vec4<u32>(16u)) | (vec4<u32>(a.y, a.z, a.w, b.x) << vec4<u32>(16u));
    let b2 = (b >> vec4<u32>(16u)) | (vec4<u32>(b.y, b.z, b.w, c) << vec4<u32>(16u));
    return U8w(select(a, a2, odd), select(b, b2, odd));
}
"""

# the nibbles / bit fields of a word's 4 bytes, as 4 values (once per kernel)
BYTES4 = """
fn nib4(w: u32, sh: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(w >> sh) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(15u));
}
fn bits4(w: u32, sh: u32, m: u32) -> vec4<u32> {
    return (vec4<u32>(w >> sh) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(m);
}
// Q4_K/Q5_K: scale and min of sub-block s from the 12 packed scale bytes, held as three
// words (kscale_<W> reads the same bytes one load each): bytes s, s + 4 (and s - 4 for
// s >= 4)
fn kscale3(k0: u32, k1: u32, k2: u32, s: u32) -> vec2<f32> {
    let sh = (s & 3u) * 8u;
    let b_s = (select(k0, k1, s >= 4u) >> sh) & 0xffu;
    let b_s4 = (select(k1, k2, s >= 4u) >> sh) & 0xffu;
    if (s < 4u) {
        return vec2<f32>(f32(b_s & 63u), f32(b_s4 & 63u));
    }
    let b_sm4 = (k0 >> sh) & 0xffu;
    return vec2<f32>(f32((b_s4 & 15u) | ((b_sm4 >> 6u) << 4u)), f32((b_s4 >> 4u) | ((b_s >> 6u) << 4u)));
}
"""

DQ32 = {
    # 20 bytes, 4-aligned: d, m, 16 bytes (element j: low nibble of byte j, j + 16: high)
    "Q4_1": """
    let i = (base + c * 20u) >> 2u;
    let dm = unpack2x16float({W}[i]);
    let q0 = {W}[i + 1u]; let q1 = {W}[i + 2u]; let q2 = {W}[i + 3u]; let q3 = {W}[i + 4u];
    let d = dm.x; let m = dm.y;
    return V32(nib4(q0, 0u) * d + m, nib4(q1, 0u) * d + m, nib4(q2, 0u) * d + m, nib4(q3, 0u) * d + m,
               nib4(q0, 4u) * d + m, nib4(q1, 4u) * d + m, nib4(q2, 4u) * d + m, nib4(q3, 4u) * d + m);
""",
    # 22 bytes, 2-aligned: d, 32 high bits, 16 bytes of nibbles (6 loads)
    "Q5_0": """
    let o = base + c * 22u;
    let i = o >> 2u;
    let w0 = {W}[i]; let w1 = {W}[i + 1u]; let w2 = {W}[i + 2u]; let w3 = {W}[i + 3u]; let w4 = {W}[i + 4u]; let w5 = {W}[i + 5u];
    let odd = (o & 3u) != 0u;
    let d = unpack2x16float(select(w0, w0 >> 16u, odd)).x;
    let qh = select((w0 >> 16u) | (w1 << 16u), w1, odd);
    let q0 = select((w1 >> 16u) | (w2 << 16u), w2, odd);
    let q1 = select((w2 >> 16u) | (w3 << 16u), w3, odd);
    let q2 = select((w3 >> 16u) | (w4 << 16u), w4, odd);
    let q3 = select((w4 >> 16u) | (w5 << 16u), w5, odd);
    let hb = vec4<u32>(0u, 1u, 2u, 3u);
    let s = vec4<f32>(16.0);
    return V32(
        (vec4<f32>(bits4(q0, 0u, 15u) | (((vec4<u32>(qh) >> hb) & vec4<u32>(1u)) << vec4<u32>(4u))) - s) * d,
        (vec4<f32>(bits4(q1, 0u, 15u) | (((vec4<u32>(qh) >> (hb + 4u)) & vec4<u32>(1u)) << vec4<u32>(4u))) - s) * d,
        (vec4<f32>(bits4(q2, 0u, 15u) | (((vec4<u32>(qh) >> (hb + 8u)) & vec4<u32>(1u)) << vec4<u32>(4u))) - s) * d,
        (vec4<f32>(bits4(q3, 0u, 15u) | (((vec4<u32>(qh) >> (hb + 12u)) & vec4<u32>(1u)) << vec4<u32>(4u))) - s) * d,
        (vec4<f32>(bits4(q0, 4u, 15u) | (((vec4<u32>(qh) >> (hb + 16u)) & vec4<u32>(1u)) << vec4<u32>(4u))) - s) * d,
        (vec4<f32>(bits4(q1, 4u, 15u) | (((vec4<u32>(qh) >> (hb + 20u)) & vec4<u32>(1u)) << vec4<u32>(4u))) - s) * d,
        (vec4<f32>(bits4(q2, 4u, 15u) | (((vec4<u32>(qh) >> (hb + 24u)) & vec4<u32>(1u)) << vec4<u32>(4u))) - s) * d,
        (vec4<f32>(bits4(q3, 4u, 15u) | (((vec4<u32>(qh) >> (hb + 28u)) & vec4<u32>(1u)) << vec4<u32>(4u))) - s) * d);
""",
    # 34 bytes, 2-aligned: d, 32 signed bytes (9 loads)
    "Q8_0": """
    let o = base + c * 34u;
    let d = unpack2x16float(({W}[o >> 2u] >> ((o & 2u) * 8u)) & 0xffffu).x;
    let q = win8_{W}(o + 2u);
    let m = vec4<u32>(24u, 16u, 8u, 0u);
    return V32(
        vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(q.a.x) << m) >> vec4<u32>(24u)) * d,
        vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(q.a.y) << m) >> vec4<u32>(24u)) * d,
        vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(q.a.z) << m) >> vec4<u32>(24u)) * d,
        vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(q.a.w) << m) >> vec4<u32>(24u)) * d,
        vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(q.b.x) << m) >> vec4<u32>(24u)) * d,
        vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(q.b.y) << m) >> vec4<u32>(24u)) * d,
        vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(q.b.z) << m) >> vec4<u32>(24u)) * d,
        vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(q.b.w) << m) >> vec4<u32>(24u)) * d);
""",
    # 144 bytes per 256 (4-aligned): sub-block s = c & 7: its scale and min from the 12
    # bytes at 4 (3 loads), its 32 nibbles from the 32 bytes of its pair (8 loads)
    "Q4_K": """
    let blk = (base >> 2u) + (c >> 3u) * 36u;
    let s = c & 7u;
    let dm = unpack2x16float({W}[blk]);
    let k0 = {W}[blk + 1u]; let k1 = {W}[blk + 2u]; let k2 = {W}[blk + 3u];
    let sm = kscale3(k0, k1, k2, s);
    let d = dm.x * sm.x; let m = dm.y * sm.y;
    let q = blk + 4u + 8u * (s >> 1u);
    let n = (s & 1u) * 4u;
    return V32(nib4({W}[q], n) * d - m, nib4({W}[q + 1u], n) * d - m, nib4({W}[q + 2u], n) * d - m, nib4({W}[q + 3u], n) * d - m,
               nib4({W}[q + 4u], n) * d - m, nib4({W}[q + 5u], n) * d - m, nib4({W}[q + 6u], n) * d - m, nib4({W}[q + 7u], n) * d - m);
""",
    # 210 bytes per 256 (2-aligned): quarter k of half h (c & 7 = 4 h + k): 32 low
    # nibbles (nibble k >> 1 of 32 bytes at 64 h + 32 (k & 1)), 32 2-bit highs (bits 2k of
    # the 32 bytes at 128 + 32 h), two signed scales (bytes 192 + 8 h + 2 k and + 1), d
    "Q6_K": """
    let blk = base + (c >> 3u) * 210u;
    let h = (c >> 2u) & 1u;
    let k = c & 3u;
    let d = unpack2x16float(({W}[(blk + 208u) >> 2u] >> ((blk & 2u) * 8u)) & 0xffffu).x;
    let so = blk + 192u + 8u * h + 2u * k;
    let sw = ({W}[so >> 2u] >> ((so & 2u) * 8u)) & 0xffffu;
    let s0 = f32(bitcast<i32>(sw << 24u) >> 24u) * d;
    let s1 = f32(bitcast<i32>(sw << 16u) >> 24u) * d;
    let ql = win8_{W}(blk + 64u * h + 32u * (k & 1u));
    let qh = win8_{W}(blk + 128u + 32u * h);
    let n = (k >> 1u) * 4u;
    let hs = 2u * k;
    let z = vec4<f32>(32.0);
    return V32(
        (vec4<f32>(bits4(ql.a.x, n, 15u) | (bits4(qh.a.x, hs, 3u) << vec4<u32>(4u))) - z) * s0,
        (vec4<f32>(bits4(ql.a.y, n, 15u) | (bits4(qh.a.y, hs, 3u) << vec4<u32>(4u))) - z) * s0,
        (vec4<f32>(bits4(ql.a.z, n, 15u) | (bits4(qh.a.z, hs, 3u) << vec4<u32>(4u))) - z) * s0,
        (vec4<f32>(bits4(ql.a.w, n, 15u) | (bits4(qh.a.w, hs, 3u) << vec4<u32>(4u))) - z) * s0,
        (vec4<f32>(bits4(ql.b.x, n, 15u) | (bits4(qh.b.x, hs, 3u) << vec4<u32>(4u))) - z) * s1,
        (vec4<f32>(bits4(ql.b.y, n, 15u) | (bits4(qh.b.y, hs, 3u) << vec4<u32>(4u))) - z) * s1,
        (vec4<f32>(bits4(ql.b.z, n, 15u) | (bits4(qh.b.z, hs, 3u) << vec4<u32>(4u))) - z) * s1,
        (vec4<f32>(bits4(ql.b.w, n, 15u) | (bits4(qh.b.w, hs, 3u) << vec4<u32>(4u))) - z) * s1);
""",
}

DQ32_GENERIC = """
    let g = c * 4u;
    let x0 = dq8_{W}(base, g); let x1 = dq8_{W}(base, g + 1u); let x2 = dq8_{W}(base, g + 2u); let x3 = dq8_{W}(base, g + 3u);
    return V32(x0.a, x0.b, x1.a, x1.b, x2.a, x2.b, x3.a, x3.b);
"""


# Q4_K through a second view of the same buffer as vec4<u32> (16-byte loads: a block's
# 144 bytes are nine of them, 16-byte aligned): a sub-block is its header (d, dmin and the
# 12 scale bytes, one load) and the 32 nibble bytes of its pair (two loads)
DQ32_VEC = {
    "Q4_K": """
    let blk = (base >> 4u) + (c >> 3u) * 9u;
    let s = c & 7u;
    let hd = {W}v[blk];
    let dm = unpack2x16float(hd.x);
    let k0 = hd.y; let k1 = hd.z; let k2 = hd.w;
    let sm = kscale3(k0, k1, k2, s);
    let d = dm.x * sm.x; let m = dm.y * sm.y;
    let q = blk + 1u + 2u * (s >> 1u);
    let qa = {W}v[q]; let qb = {W}v[q + 1u];
    let n = (s & 1u) * 4u;
    return V32(nib4(qa.x, n) * d - m, nib4(qa.y, n) * d - m, nib4(qa.z, n) * d - m, nib4(qa.w, n) * d - m,
               nib4(qb.x, n) * d - m, nib4(qb.y, n) * d - m, nib4(qb.z, n) * d - m, nib4(qb.w, n) * d - m);
""",
}


def vec_view(ggml_type: str) -> bool:
    """Whether matvec_blk(vec=True) binds a weight of this type a second time, as vec4."""
    return ggml_type in DQ32_VEC


def dq32_lib(ggml_type: str, var: str, binding: int, vec_binding: int = 0) -> str:
    """A weight's binding, its dq8 decoder and its dq32 decoder (32 elements at once);
    with ``vec_binding`` (a type of DQ32_VEC), the decoder reads the second, vec4 view."""
    src = weight_lib(ggml_type, var, binding) + WIN8.replace("{W}", var)
    body = DQ32.get(ggml_type, DQ32_GENERIC).replace("{W}", var)
    if vec_binding and ggml_type in DQ32_VEC:
        src += f"@group(0) @binding({vec_binding}) var<storage, read> {var}v: array<vec4<u32>>;\n"
        body = DQ32_VEC[ggml_type].replace("{W}", var)
    src += f"fn dq32_{var}(base: u32, c: u32) -> V32 {{{body}}}\n"
    return src


def vec_bindings(types: tuple[str, ...]) -> list[int]:
    """matvec_blk(vec=True): the binding of each weight's vec4 view (0: none), after the
    weights' own bindings (2 .. 1 + len(types))."""
    out, at = [], 2 + len(types)
    for t in types:
        if vec_view(t):
            out.append(at)
            at += 1
        else:
            out.append(0)
    return out


def matvec_blk(types: tuple[str, ...], glu: str | None = None, rows: int = 1, per: int = 1,
               norm: bool = False, lanes: int = 0, segments: bool = False, vec: bool = False) -> str:  # fmt: skip
    """`matvec_sg` (a subgroup per output feature, several features a workgroup, no
    barrier) with each lane taking 32 consecutive columns a step, decoded at once
    (dq32: Q4_1, Q5_0, Q8_0, Q4_K and Q6_K read their blocks with whole-word loads, each
    once; the other types as four groups of 8). Needs subgroups and K a multiple of 32.
    Parameters, ``rows``, ``glu``, ``norm``: as `matvec_sg`; each row's sum runs in the same
    order whatever ``rows`` and M.

    ``lanes`` (a power of two, at most the subgroup size; 0: the whole subgroup): that
    many lanes per feature, MV_WG / lanes features a workgroup (``per`` is then
    ignored), summed by a butterfly of `subgroupShuffleXor` (every lane of a feature adds
    the same pairs, so the same bits): for short rows (K = 576: 18 steps of 32 columns, a
    32-lane subgroup would leave 14 lanes idle).

    ``vec``: Q4_K weights are also bound a second time (`vec_bindings`) and read with
    16-byte loads (DQ32_VEC).

    ``segments``: the products of one input (Q, K, V) in one dispatch, parameters and
    layout as `matvec_segments` (each weight's features padded to a multiple of the
    features a workgroup holds); ``types`` are then the segments' weights, not a glu pair."""
    vb = vec_bindings(types) if vec else [0] * len(types)
    libs = V32 + BYTES4 + "".join(dq32_lib(t, f"W{i}", 2 + i, vb[i]) for i, t in enumerate(types))
    n_w = 1 if segments else len(types)
    R = rows
    decl = "".join(f"        var a{i}_{r} = 0.0;\n" for i in range(n_w) for r in range(R))
    deq = "".join(f"            let w{i} = dq32_W{i}(n * P({11 + i}u), c);\n" for i in range(n_w))
    if segments:
        cases = "".join(f"        case {i}u: {{ return dq32_W{i}(base, c); }}\n" for i in range(len(types) - 1))
        libs += f"""
fn dq32_seg(seg: u32, base: u32, c: u32) -> V32 {{
    switch seg {{
{cases}        default: {{ return dq32_W{len(types) - 1}(base, c); }}
    }}
}}
"""
        deq = "            let w0 = dq32_seg(seg, nl * P(sb + 5u), c);\n"
    nw_load = ""
    if norm:
        nw_load = "            let hasnw = P(13u) != 0u;\n            let no = P(13u) - 1u + c * 32u;\n"
    fma = ""
    for r in range(R):
        fma += f"            if ({r}u < nr) {{\n"
        fma += f"                let xo = P(3u) + (m0 + {r}u) * P(4u) + c * 32u;\n"
        for q in range(8):
            o = 4 * q
            x = f"vec4<f32>(A[xo + {o}u], A[xo + {o + 1}u], A[xo + {o + 2}u], A[xo + {o + 3}u])"
            if norm:
                nw = f"select(vec4<f32>(1.0), vec4<f32>(A[no + {o}u], A[no + {o + 1}u], A[no + {o + 2}u], A[no + {o + 3}u]), hasnw)"
                fma += f"                let x{q} = {x} * {nw};\n"
            else:
                fma += f"                let x{q} = {x};\n"
        for i in range(n_w):
            terms = " + ".join(f"dot(x{q}, w{i}.v{q})" for q in range(8))
            fma += f"                a{i}_{r} += {terms};\n"
        fma += "            }\n"
    act = {"swiglu": "silu_(s0) * s1", "geglu": "gelu_(s0) * s1", None: "s0"}[glu]
    L = lanes

    def red(v: str) -> str:
        if not L:
            return f"subgroupAdd({v})"
        return f"bfly({v})"

    reduce = "".join(f"        a{i}_{r} = {red(f'a{i}_{r}')};\n" for i in range(n_w) for r in range(R))
    prologue = ""
    if norm:
        for r in range(R):
            prologue += f"""        var inv{r} = 1.0;
        if ({r}u < nr) {{
            var q = 0.0;
            for (var g = lane; g < K / 8u; g += sgs) {{
                let xo = P(3u) + (m0 + {r}u) * P(4u) + g * 8u;
                let xa = vec4<f32>(A[xo], A[xo + 1u], A[xo + 2u], A[xo + 3u]);
                let xb = vec4<f32>(A[xo + 4u], A[xo + 5u], A[xo + 6u], A[xo + 7u]);
                q += dot(xa, xa) + dot(xb, xb);
            }}
            q = {red("q")};
            inv{r} = inverseSqrt(q / f32(K) + PF(14u));
        }}
"""
    stores = ""
    for r in range(R):
        sc = f" * inv{r}" if norm else ""
        if segments:
            stores += f"""        if ({r}u < nr && lane == 0u && nl < P(sb + 1u)) {{
            var y = a0_{r}{sc};
            if (P(sb + 4u) != 0u) {{ y += A[P(sb + 4u) - 1u + nl]; }}
            if (P(sb + 6u) != 0u) {{ y += A[P(sb + 6u) - 1u + (m0 + {r}u) * P(sb + 7u) + nl]; }}
            A[P(sb + 2u) + (m0 + {r}u) * P(sb + 3u) + nl] = y;
        }}
"""
            continue
        s1 = f"let s1 = a1_{r}{sc};" if n_w > 1 else ""
        stores += f"""        if ({r}u < nr && lane == 0u) {{
            var s0 = a0_{r}{sc};
            {s1}
            if (P(7u) != 0u) {{ s0 += A[P(7u) - 1u + col]; }}
            var y = {act};
            if (P(8u) != 0u) {{ y += A[P(8u) - 1u + (m0 + {r}u) * P(9u) + col]; }}
            A[P(5u) + (m0 + {r}u) * P(6u) + col] = y;
        }}
"""
    segsel = ""
    if segments:
        # the segment of feature n (the last whose first feature is <= n), its local index
        segsel = "    var seg = 0u;\n"
        segsel += "".join(f"    if (n >= P({SEG_BASE + 8 * i}u)) {{ seg = {i}u; }}\n" for i in range(1, len(types)))
        segsel += f"    let sb = {SEG_BASE}u + 8u * seg;\n    let nl = n - P(sb);\n"
    if not L:
        head = f"""
@compute @workgroup_size({MV_WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32,
        @builtin(subgroup_size) sgs: u32, @builtin(subgroup_invocation_id) lane: u32) {{
  for (var f = t / sgs; f < {per}u; f += {MV_WG}u / sgs) {{
    let n = wg_linear(wid, nwg) * {per}u + f;
    if (n >= P(1u)) {{ break; }}
"""
    else:
        bfly = "".join(
            f"    v += subgroupShuffleXor(v, {o}u);\n" for o in (1 << k for k in range(L.bit_length() - 2, -1, -1))
        )
        head = f"""
fn bfly(x: f32) -> f32 {{
    var v = x;
{bfly}    return v;
}}
@compute @workgroup_size({MV_WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  let sgs = {L}u;
  let lane = t % {L}u;
  {{
    let n = wg_linear(wid, nwg) * {MV_WG // L}u + t / {L}u;
    if (n >= P(1u)) {{ return; }}
"""
    return (
        HEADER
        + ARENA_F32
        + GRID
        + ACTIVATIONS
        + libs
        + f"""
{head}{segsel}    let K = P(0u); let M = P(2u);
    let col = n + P(10u);
    for (var m0 = 0u; m0 < M; m0 += {R}u) {{
        let nr = min({R}u, M - m0);
{decl}{prologue}        for (var c = lane; c < K / 32u; c += sgs) {{
{deq}{nw_load}{fma}        }}
{reduce}{stores}    }}
  }}
}}
"""
    )
