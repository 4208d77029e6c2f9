"""Attention of a prompt pass's rows over an f16 cache in tiles (`attention_tiles`)."""

from __future__ import annotations

from .attention_lanes import F16_CACHE
from .common import ARENA_U32, GRID, HEADER

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
