"""Attention over an f16 cache, latency first (`attention_lanes`, a decode step's
kernel), its rotating form that does a rope pair's work itself, and the join of a split
attention's parts (`attention_combine`)."""

from __future__ import annotations

from .common import ARENA_U32, GRID, HEADER, SEQ_FN
from .rope import _ROPE_SUBGROUPS, _ROPE_TREE, ROPE_FNS

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
