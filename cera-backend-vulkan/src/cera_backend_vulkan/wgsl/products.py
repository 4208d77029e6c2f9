"""Products: the row kernels of a few activation rows (decode) and the tiled kernel of many (prefill)."""

from __future__ import annotations

from .blocks import weight_lib
from .common import ACTIVATIONS, ARENA_F32, GRID, HEADER, WG, workgroup_sum

MV_ROWS = 8  # activation rows a matvec dispatch multiplies per pass over the weights
MV_WG = 128  # threads of a matvec workgroup


# A fused rms_norm (the row kernels' ``norm``): the norm weight's 8 values at group g of
# the row (1 without a weight), and each row's 1/rms summed before the products.
NORM_WEIGHT_LOAD = """            var nwa = vec4<f32>(1.0); var nwb = vec4<f32>(1.0);
            if (P(13u) != 0u) {
                let no = P(13u) - 1u + g * 8u;
                nwa = vec4<f32>(A[no], A[no + 1u], A[no + 2u], A[no + 3u]);
                nwb = vec4<f32>(A[no + 4u], A[no + 5u], A[no + 6u], A[no + 7u]);
            }
"""


def _norm_prologue(R: int, first: str, step: str, reduced: str) -> str:
    """``inv<r>``, 1/rms of each of the R rows from m0 (P 14: eps), each thread summing
    the squares of the groups of 8 from ``first`` every ``step``, ``reduced`` (WGSL of
    ``q``) their sum over the threads."""
    out = ""
    for r in range(R):
        out += f"""        var inv{r} = 1.0;
        if ({r}u < nr) {{
            var q = 0.0;
            for (var g = {first}; g < K / 8u; g += {step}) {{
                let xo = P(3u) + (m0 + {r}u) * P(4u) + g * 8u;
                let xa = vec4<f32>(A[xo], A[xo + 1u], A[xo + 2u], A[xo + 3u]);
                let xb = vec4<f32>(A[xo + 4u], A[xo + 5u], A[xo + 6u], A[xo + 7u]);
                q += dot(xa, xa) + dot(xb, xb);
            }}
            q = {reduced};
            inv{r} = inverseSqrt(q / f32(K) + PF(14u));
        }}
"""
    return out


def _reduce_onepass(names: list[str]) -> tuple[str, str]:
    """The workgroup sums of several accumulators with two barriers in all (instead of
    two per accumulator): each subgroup's `subgroupAdd` of every accumulator goes to
    shared memory, then every thread adds the subgroups' parts in subgroup order (the
    same sums in the same order as `wsum`, so the same bits). Returns (declaration,
    code). Needs subgroups of at least 4 lanes (WGSL's minimum)."""
    n = len(names)
    decl = f"var<workgroup> part1: array<f32, {n * 32}>;\n"
    code = "        let sgi = t / sgs;\n"
    for k, v in enumerate(names):
        code += f"        let r{k}_ = subgroupAdd({v});\n"
        code += f"        if (t % sgs == 0u) {{ part1[{k * 32}u + sgi] = r{k}_; }}\n"
    code += "        workgroupBarrier();\n"
    for k, v in enumerate(names):
        code += f"        {{ var s = 0.0; for (var i = 0u; i < {MV_WG}u / sgs; i++) {{ s += part1[{k * 32}u + i]; }} {v} = s; }}\n"
    code += "        workgroupBarrier();\n"
    return decl, code


def matvec(types: tuple[str, ...], glu: str | None = None, subgroups: bool = True, rows: int = 1,
           norm: bool = False, feats: int = 1, onepass: bool = False) -> str:  # fmt: skip
    """y = x W^T for a few rows of x: one workgroup of 128 threads per output feature,
    thread t taking the groups of 8 columns t, t + 128, ... (several warps per row keep
    enough loads in flight to hide memory latency), then one sum over the workgroup
    (`subgroupAdd` and one shared-memory step with subgroups, a tree without). ``rows``
    activation rows share each decoded weight group; every row's sum runs in the same
    order whatever ``rows`` and M are, so a row of a batch is bit for bit its one-row
    product. With two weights and ``glu``, y = act(x Wg^T) * (x Wu^T).

    P: 0 K, 1 N (features in this chunk), 2 M rows, 3 x offset, 4 x row stride, 5 y
    offset, 6 y row stride, 7 bias offset + 1 (0: none), 8 residual offset + 1 (0: none),
    9 residual row stride, 10 first feature of the chunk (added to y's column), 11 weight
    row bytes, 12 second weight row bytes (glu).

    ``norm``: x is the input of an rms_norm that only these products read (fused: one
    dispatch less a layer): each row's 1/rms is summed first, x is multiplied by the norm
    weight (P 13: its offset + 1; 0 none) as it is read, and the sums are scaled by 1/rms
    (P 14: eps).

    ``feats`` output features per workgroup share each load of x (decode: x would
    otherwise be read once per feature, several times the weights' bytes).

    ``onepass`` (with subgroups): all the accumulators summed over the workgroup at once,
    two barriers in all instead of two per accumulator (`_reduce_onepass`)."""
    libs = "".join(weight_lib(t, f"W{i}", 2 + i) for i, t in enumerate(types))
    n_w = len(types)
    R = rows
    F = feats
    decl = "".join(f"        var a{i}_{r}_{j} = 0.0;\n" for i in range(n_w) for r in range(R) for j in range(F))
    deq = "".join(
        f"            let w{i}_{j} = dq8_W{i}(n{j} * P({11 + i}u), g);\n" for i in range(n_w) for j in range(F)
    )
    fma = ""
    for r in range(R):
        xa, xb = ("xa0", "xb0") if norm else ("xa", "xb")
        fma += f"            if ({r}u < nr) {{\n"
        fma += f"                let xo = P(3u) + (m0 + {r}u) * P(4u) + g * 8u;\n"
        fma += f"                let {xa} = vec4<f32>(A[xo], A[xo + 1u], A[xo + 2u], A[xo + 3u]);\n"
        fma += f"                let {xb} = vec4<f32>(A[xo + 4u], A[xo + 5u], A[xo + 6u], A[xo + 7u]);\n"
        if norm:
            fma += "                let xa = xa0 * nwa; let xb = xb0 * nwb;\n"
        for i in range(n_w):
            for j in range(F):
                fma += f"                a{i}_{r}_{j} += dot(xa, w{i}_{j}.a) + dot(xb, w{i}_{j}.b);\n"
        fma += "            }\n"
    act = {"swiglu": "silu_(s0) * s1", "geglu": "gelu_(s0) * s1", None: "s0"}[glu]
    # the subgroups' sums meet in shared memory, added in subgroup order
    reducer, call, builtins = workgroup_sum(MV_WG, subgroups)
    reduce = "".join(
        f"        a{i}_{r}_{j} = {call.format(v=f'a{i}_{r}_{j}')};\n"
        for i in range(n_w)
        for r in range(R)
        for j in range(F)
    )
    if onepass and subgroups:
        decl1, reduce = _reduce_onepass([f"a{i}_{r}_{j}" for i in range(n_w) for r in range(R) for j in range(F)])
        reducer += decl1
    prologue, nw_load = (
        (_norm_prologue(R, "t", f"{MV_WG}u", call.format(v="q")), NORM_WEIGHT_LOAD) if norm else ("", "")
    )
    stores = ""
    for r in range(R):
        for j in range(F):
            sc = f" * inv{r}" if norm else ""
            s1 = f"let s1 = a1_{r}_{j}{sc};" if n_w > 1 else ""
            stores += f"""        if ({r}u < nr && t == 0u && nn{j} < P(1u)) {{
            let col = nn{j} + P(10u);
            var s0 = a0_{r}_{j}{sc};
            {s1}
            if (P(7u) != 0u) {{ s0 += A[P(7u) - 1u + col]; }}
            var y = {act};
            if (P(8u) != 0u) {{ y += A[P(8u) - 1u + (m0 + {r}u) * P(9u) + col]; }}
            A[P(5u) + (m0 + {r}u) * P(6u) + col] = y;
        }}
"""
    # features past the end are decoded at the last one (in bounds) and not stored
    nn = "".join(f"    let nn{j} = nbase + {j}u;\n    let n{j} = min(nn{j}, P(1u) - 1u);\n" for j in range(F))
    return (
        HEADER
        + ARENA_F32
        + GRID
        + ACTIVATIONS
        + libs
        + reducer
        + f"""
@compute @workgroup_size({MV_WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32{builtins}) {{
    let nbase = wg_linear(wid, nwg) * {F}u;
    if (nbase >= P(1u)) {{ return; }}
{nn}    let K = P(0u); let M = P(2u);
    for (var m0 = 0u; m0 < M; m0 += {R}u) {{
        let nr = min({R}u, M - m0);
{decl}{prologue}        for (var g = t; g < K / 8u; g += {MV_WG}u) {{
{deq}{nw_load}{fma}        }}
{reduce}{stores}    }}
}}
"""
    )


SEG_BASE = 20  # matvec_segments: parameters of segment s start at P(SEG_BASE + 8 s)


def matvec_segments(types: tuple[str, ...], subgroups: bool = True, rows: int = 1, norm: bool = False,
                    feats: int = 4, onepass: bool = False) -> str:  # fmt: skip
    """Several products of one input in one dispatch (a layer's Q, K and V): the weights'
    output features laid end to end, each weight's run starting at a multiple of
    ``feats`` so a workgroup never straddles two. As `matvec` otherwise (per feature the
    same sums in the same order). P: 0 K, 1 features in all (padded), 2 M, 3 x offset, 4 x
    row stride, 13/14 norm as `matvec`; per segment s at P(20 + 8 s): first feature, N, y
    offset, y row stride, bias offset + 1, weight row bytes, residual offset + 1,
    residual row stride. ``onepass``: as `matvec`'s."""
    libs = "".join(weight_lib(t, f"W{i}", 2 + i) for i, t in enumerate(types))
    R, F = rows, feats
    cases = "".join(f"        case {i}u: {{ return dq8_W{i}(base, g); }}\n" for i in range(len(types) - 1))
    last = len(types) - 1
    pick = f"""
fn dq8_seg(seg: u32, base: u32, g: u32) -> V8 {{
    switch seg {{
{cases}        default: {{ return dq8_W{last}(base, g); }}
    }}
}}
"""
    decl = "".join(f"        var a{r}_{j} = 0.0;\n" for r in range(R) for j in range(F))
    deq = "".join(f"            let w{j} = dq8_seg(seg, n{j} * P(sb + 5u), g);\n" for j in range(F))
    fma = ""
    for r in range(R):
        xa, xb = ("xa0", "xb0") if norm else ("xa", "xb")
        fma += f"            if ({r}u < nr) {{\n"
        fma += f"                let xo = P(3u) + (m0 + {r}u) * P(4u) + g * 8u;\n"
        fma += f"                let {xa} = vec4<f32>(A[xo], A[xo + 1u], A[xo + 2u], A[xo + 3u]);\n"
        fma += f"                let {xb} = vec4<f32>(A[xo + 4u], A[xo + 5u], A[xo + 6u], A[xo + 7u]);\n"
        if norm:
            fma += "                let xa = xa0 * nwa; let xb = xb0 * nwb;\n"
        for j in range(F):
            fma += f"                a{r}_{j} += dot(xa, w{j}.a) + dot(xb, w{j}.b);\n"
        fma += "            }\n"
    reducer, call, builtins = workgroup_sum(MV_WG, subgroups)
    reduce = "".join(f"        a{r}_{j} = {call.format(v=f'a{r}_{j}')};\n" for r in range(R) for j in range(F))
    if onepass and subgroups:
        decl1, reduce = _reduce_onepass([f"a{r}_{j}" for r in range(R) for j in range(F)])
        reducer += decl1
    prologue, nw_load = (
        (_norm_prologue(R, "t", f"{MV_WG}u", call.format(v="q")), NORM_WEIGHT_LOAD) if norm else ("", "")
    )
    stores = ""
    for r in range(R):
        for j in range(F):
            sc = f" * inv{r}" if norm else ""
            stores += f"""        if ({r}u < nr && t == 0u && nn{j} < P(sb + 1u)) {{
            var y = a{r}_{j}{sc};
            if (P(sb + 4u) != 0u) {{ y += A[P(sb + 4u) - 1u + nn{j}]; }}
            if (P(sb + 6u) != 0u) {{ y += A[P(sb + 6u) - 1u + (m0 + {r}u) * P(sb + 7u) + nn{j}]; }}
            A[P(sb + 2u) + (m0 + {r}u) * P(sb + 3u) + nn{j}] = y;
        }}
"""
    segsel = "".join(f"    if (nbase >= P({SEG_BASE + 8 * i}u)) {{ seg = {i}u; }}\n" for i in range(1, len(types)))
    nn = "".join(f"    let nn{j} = nloc + {j}u;\n    let n{j} = min(nn{j}, P(sb + 1u) - 1u);\n" for j in range(F))
    return (
        HEADER
        + ARENA_F32
        + GRID
        + libs
        + pick
        + reducer
        + f"""
@compute @workgroup_size({MV_WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32{builtins}) {{
    let nbase = wg_linear(wid, nwg) * {F}u;
    if (nbase >= P(1u)) {{ return; }}
    var seg = 0u;
{segsel}    let sb = {SEG_BASE}u + 8u * seg;
    let nloc = nbase - P(sb);
{nn}    let K = P(0u); let M = P(2u);
    for (var m0 = 0u; m0 < M; m0 += {R}u) {{
        let nr = min({R}u, M - m0);
{decl}{prologue}        for (var g = t; g < K / 8u; g += {MV_WG}u) {{
{deq}{nw_load}{fma}        }}
{reduce}{stores}    }}
}}
"""
    )


def matvec_sg(types: tuple[str, ...], glu: str | None = None, subgroups: bool = True, rows: int = 1, per: int = 1,
              norm: bool = False, span: int = 1) -> str:  # fmt: skip
    """The matvec for software adapters (lavapipe), where a workgroup barrier is a switch
    between fibres: each subgroup computes one output feature alone, no barrier at all.
    Otherwise as `matvec`.

    With subgroups, each subgroup computes one output
    feature (lane l takes groups of 8 columns l, l + lanes, ...; `subgroupAdd` sums the
    lanes) and a workgroup holds several: no barrier anywhere. Without, a workgroup per
    feature sums through shared memory. ``rows`` activation rows share each decoded
    weight group; every row's sum runs in the same order whatever ``rows`` and M are, so
    a row of a batch is bit for bit its one-row product. With two weights and ``glu``,
    y = act(x Wg^T) * (x Wu^T).

    P: 0 K, 1 N (features in this chunk), 2 M rows, 3 x offset, 4 x row stride, 5 y
    offset, 6 y row stride, 7 bias offset + 1 (0: none), 8 residual offset + 1 (0: none),
    9 residual row stride, 10 first feature of the chunk (added to y's column), 11 weight
    row bytes, 12 second weight row bytes (glu).

    ``norm``: x is the input of an rms_norm that only these products read (fused: one
    dispatch less a layer): each row's 1/rms is summed by the subgroup first, x is
    multiplied by the norm weight (P 13: its offset + 1; 0 none) as it is read, and the
    sums are scaled by 1/rms (P 14: eps).

    ``span``: each lane takes ``span`` consecutive groups of 8 columns per step (lane l:
    groups span l .. span l + span - 1, then span (l + lanes) ...), unrolled: more loads
    in flight per lane and, for the block types, neighbouring groups of one block (its
    scales read once from cache). Each row's sum still runs in the same order whatever
    ``rows`` and M."""
    libs = "".join(weight_lib(t, f"W{i}", 2 + i) for i, t in enumerate(types))
    n_w = len(types)
    R = rows
    decl = "".join(f"        var a{i}_{r} = 0.0;\n" for i in range(n_w) for r in range(R))
    deq = "".join(f"            let w{i} = dq8_W{i}(n * P({11 + i}u), g);\n" for i in range(n_w))
    fma = ""
    for r in range(R):
        fma += f"            if ({r}u < nr) {{\n"
        fma += f"                let xo = P(3u) + (m0 + {r}u) * P(4u) + g * 8u;\n"
        fma += "                let xa = vec4<f32>(A[xo], A[xo + 1u], A[xo + 2u], A[xo + 3u]);\n"
        fma += "                let xb = vec4<f32>(A[xo + 4u], A[xo + 5u], A[xo + 6u], A[xo + 7u]);\n"
        if norm:
            fma += "                let xa = xa0 * nwa; let xb = xb0 * nwb;\n"
            fma = fma.replace("let xa = vec4<f32>(A[xo]", "let xa0 = vec4<f32>(A[xo]").replace(
                "let xb = vec4<f32>(A[xo + 4u]", "let xb0 = vec4<f32>(A[xo + 4u]"
            )
        for i in range(n_w):
            fma += f"                a{i}_{r} += dot(xa, w{i}.a) + dot(xb, w{i}.b);\n"
        fma += "            }\n"
    act = {"swiglu": "silu_(s0) * s1", "geglu": "gelu_(s0) * s1", None: "s0"}[glu]
    if subgroups:
        reduce = "".join(f"        a{i}_{r} = subgroupAdd(a{i}_{r});\n" for i in range(n_w) for r in range(R))
        # ``per`` features per workgroup (MV_WG / the subgroup size measured on this
        # adapter); each subgroup loops over them, so the result is right whatever size
        # the driver picks for this pipeline
        head = f"""
@compute @workgroup_size({MV_WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32,
        @builtin(subgroup_size) sgs: u32, @builtin(subgroup_invocation_id) lane: u32) {{
  for (var f = t / sgs; f < {per}u; f += {MV_WG}u / sgs) {{
    let n = wg_linear(wid, nwg) * {per}u + f;
    if (n >= P(1u)) {{ break; }}
    let step = sgs;
    let first = lane == 0u;
"""
        lane0 = "lane"
    else:
        reduce = ""
        for i in range(n_w):
            for r in range(R):
                reduce += f"        a{i}_{r} = wsum(a{i}_{r}, t);\n"
        head = (
            workgroup_sum(WG, False, "red")[0]
            + f"""@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let n = wg_linear(wid, nwg);
    if (n >= P(1u)) {{ return; }}
    let step = {WG}u;
    let first = t == 0u;
"""
        )
        lane0 = "t"
    red_fn = "subgroupAdd(q)" if subgroups else "wsum(q, t)"
    prologue, nw_load = (_norm_prologue(R, lane0, "step", red_fn), NORM_WEIGHT_LOAD) if norm else ("", "")
    stores = ""
    for r in range(R):
        s1 = f"let s1 = a1_{r}{f' * inv{r}' if norm else ''};" if n_w > 1 else ""
        stores += f"""        if ({r}u < nr && first) {{
            var s0 = a0_{r}{f" * inv{r}" if norm else ""};
            {s1}
            if (P(7u) != 0u) {{ s0 += A[P(7u) - 1u + col]; }}
            var y = {act};
            if (P(8u) != 0u) {{ y += A[P(8u) - 1u + (m0 + {r}u) * P(9u) + col]; }}
            A[P(5u) + (m0 + {r}u) * P(6u) + col] = y;
        }}
"""
    body = f"{deq}{nw_load}{fma}"
    if span == 1:
        loop = f"""        for (var g = {lane0}; g < K / 8u; g += step) {{
{body}        }}"""
    else:
        unrolled = "".join(f"          {{\n            let g = g0 + {u}u;\n{body}          }}\n" for u in range(span))
        loop = f"""        let gn = K / 8u;
        for (var g0 = {lane0} * {span}u; g0 < gn; g0 += step * {span}u) {{
          if (g0 + {span}u <= gn) {{
{unrolled}          }} else {{
            for (var g = g0; g < gn; g++) {{
{body}            }}
          }}
        }}"""
    return (
        HEADER
        + ARENA_F32
        + GRID
        + ACTIVATIONS
        + libs
        + head
        + f"""    let K = P(0u); let M = P(2u);
    let col = n + P(10u);
    for (var m0 = 0u; m0 < M; m0 += {R}u) {{
        let nr = min({R}u, M - m0);
{decl}{prologue}{loop}
{reduce}{stores}    }}
{"  }" if subgroups else ""}
}}
"""
    )


# a tiled product's output (y of row m, feature n of the chunk; none past P 2 rows or
# P 1 features), its bias and residual added, by wgsl.matmul's parameters (P 5 the
# output's offset, 6 its row stride, 7 bias + 1, 8 residual + 1, 9 the residual's row
# stride, 10 the chunk's first feature); `matmul` and the join of a split one
# (`matmul_splits`) both end with it
MATMUL_OUT = """fn store(m: u32, n: u32, v: f32) {
    if (m >= P(2u) || n >= P(1u)) { return; }
    let col = n + P(10u);
    var y = v;
    if (P(7u) != 0u) { y += A[P(7u) - 1u + col]; }
    if (P(8u) != 0u) { y += A[P(8u) - 1u + m * P(9u) + col]; }
    A[P(5u) + m * P(6u) + col] = y;
}"""

TM, TK = 64, 32  # the tiled product's tile: rows (the default) and depth (features: MATMUL_TILES)
# features a thread computes (for each of its 4 rows) -> features a workgroup's tile has
MATMUL_TILES = {4: 64, 8: 128}


def matmul(ggml_type: str, feats: int = 4, tile_rows: int = TM, splits: int = 1, skew: bool = False) -> str:
    """y = x W^T (+ bias) (+ residual) for many rows: a tile of ``tile_rows`` (64 or 32)
    rows x 16 ``feats`` features (MATMUL_TILES) of y per workgroup of 4 ``tile_rows``
    threads, each computing 4 rows x ``feats`` features of it (32 rows: twice the
    workgroups, for products whose grid would leave multiprocessors idle). x and the decoded weights pass through shared memory 32
    columns at a time, stored depth-major (xs[k][m], ws[k][n]) so that a thread reads its
    4 rows and its features at one depth as 16-byte loads (1 + feats / 4 loads for 4
    feats FMAs). The next 32 columns' operands are loaded into registers while the
    current ones are multiplied (their loads in flight during the FMAs). ``feats`` 8
    gives each thread 32 independent FMAs a depth step (instruction-level parallelism
    where few warps fit a multiprocessor) at the price of half as many workgroups.

    The accumulators and operands are named scalars (generated unrolled): an indexed
    private array would go to local memory on some GPUs. Each output's sum runs over k
    in order, one fma a step: the same bits whatever ``feats`` and ``tile_rows``. P as
    `matvec` (0-11); K must be a multiple of 32. x's loads are written out row by row (a
    vector's components set by name, not by a loop's index) and the depth loop eight
    steps a pass: written as loops, the H200 ran the prompt pass 1.55x slower (Qwen2.5
    1.5B's pp512 3090 against 4780 tokens/s), its compiler keeping the indexed vectors
    in memory or the loop rolled.

    ``splits`` > 1 (split-K): the depth is cut into that many spans of whole 32-column
    steps, each taken by its own workgroups (the grid's x holds splits x feature tiles),
    which write their partial sums to scratch (P 12: its offset; [split][row][feature],
    no bias, no residual) for `matmul_splits`. A product of few feature tiles over a
    prompt (Qwen2.5 1.5B's 1536 features x 512 rows: 192 workgroups of 256 threads for
    132 multiprocessors) otherwise leaves most of the GPU's threads idle.

    ``skew``: each group of 8 depth rows of the decoded weights' tile starts 2 words of 16
    bytes further. Without it, a warp's scalar stores of the weights (4 threads a feature
    at depths 8 apart) fall in 8 of the 32 banks, 4 ways each, since a depth row is 17 x
    16 bytes and 8 of them are 32 x 17 words; with it, in all 32. Same arithmetic, same
    bits."""
    FN = feats
    TN = MATMUL_TILES[FN]
    T = 4 * tile_rows  # threads: 16 groups of features x tile_rows / 4 groups of rows
    G = TN // 4  # 16-byte groups of features in a depth row of ws
    SX, SW = tile_rows // 4 + 1, G + 1  # row strides (16-byte words), padded against bank conflicts
    NW = TN * 4 // T  # weight groups of 8 a thread decodes a step
    acc_decl = "".join(f"    var c{i}_{j} = 0.0;\n" for i in range(4) for j in range(FN))
    comps = "xyzw"
    inner = f"            let xv = xs[k * {SX}u + ty];\n"
    sk = " + sk" if skew else ""
    inner += "".join(f"            let wv{g} = ws[k * {SW}u{sk} + {FN // 4}u * tx + {g}u];\n" for g in range(FN // 4))
    inner += "".join(
        f"            c{i}_{j} = fma(xv.{comps[i]}, wv{j // 4}.{comps[j % 4]}, c{i}_{j});\n"
        for i in range(4)
        for j in range(FN)
    )
    stores = "".join(
        f"    store(m0 + ty * 4u + {i}u, n0 + tx * {FN}u + {j}u, c{i}_{j});\n" for i in range(4) for j in range(FN)
    )
    if splits == 1:
        span = f"    let n0 = wid.x * {TN}u;\n    let k_lo = 0u; let k_hi = K;\n"
        store_fn = MATMUL_OUT
    else:
        # this workgroup's span of the depth: whole steps, the last spans possibly empty
        span = f"""    let ntn = nwg.x / {splits}u;
    let sp = wid.x / ntn;
    let n0 = (wid.x % ntn) * {TN}u;
    let steps = K / {TK}u; let per = (steps + {splits - 1}u) / {splits}u;
    let k_lo = min(steps, sp * per) * {TK}u; let k_hi = min(steps, (sp + 1u) * per) * {TK}u;
"""
        store_fn = """var<private> sp_: u32;
fn store(m: u32, n: u32, v: f32) {
    if (m >= P(2u) || n >= P(1u)) { return; }
    A[P(12u) + (sp_ * P(2u) + m) * P(1u) + n] = v;
}"""
        span += "    sp_ = sp;\n"

    def xload(ind: str, col: str) -> str:
        out = f"{ind}{{ let m = m0 + 8u * xr;\n"
        for r in range(4):
            out += (
                f"{ind}  if (m + {r}u < M) {{ xr0.{comps[r]} = A[xo + (m + {r}u) * xstride + {col}]; }}\n"
                f"{ind}  if (m + {r + 4}u < M) {{ xr1.{comps[r]} = A[xo + (m + {r + 4}u) * xstride + {col}]; }}\n"
            )
        return out + f"{ind}}}\n"

    xload0, xload1 = xload("    ", "k_lo + xc"), xload("            ", "k1 + xc")
    steps = "".join(f"          {{ let k = k8 + {u}u;\n{inner}          }}\n" for u in range(8))
    skew_k8 = "          let sk = 2u * (k8 >> 3u);\n" if skew else ""
    depth = f"        for (var k8 = 0u; k8 < {TK}u; k8 += 8u) {{\n{skew_k8}{steps}        }}\n"
    wdecl = "".join(
        f"    let wn{h} = (t >> 2u) + {T // 4 * h}u;\n    let wvalid{h} = n0 + wn{h} < N;\n"
        f"    let wbase{h} = (n0 + wn{h}) * wrow;\n    var wr{h} = V8(vec4<f32>(0.0), vec4<f32>(0.0));\n"
        for h in range(NW)
    )
    wload = "".join(f"{{ind}}if (wvalid{h}) {{{{ wr{h} = dq8_W0(wbase{h}, {{g}} + wg); }}}}\n" for h in range(NW))
    wstore = ""
    for h in range(NW):
        wstore += f"        {{ let q = wn{h} >> 2u; let c = wn{h} & 3u;\n"
        for e in range(8):
            half, comp = ("a", "b")[e // 4], comps[e % 4]
            wstore += f"          ws[(kb + {e}u) * {SW}u{' + 2u * wg' if skew else ''} + q][c] = wr{h}.{half}.{comp};\n"
        wstore += "        }\n"
    return (
        HEADER
        + ARENA_F32
        + weight_lib(ggml_type, "W0", 2)
        + f"""
// depth k, then groups of 4 rows (features): element [k][4 q + c] at [k * stride + q].c
// (a padded stride: a depth's 16-byte stores of consecutive threads fall in different banks)
var<workgroup> xs: array<vec4<f32>, {TK * SX}>;
var<workgroup> ws: array<vec4<f32>, {TK * SW + (2 * TK // 8 if skew else 0)}>;
{store_fn}
@compute @workgroup_size({T})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let K = P(0u); let N = P(1u); let M = P(2u);
    let xo = P(3u); let xstride = P(4u); let wrow = P(11u);
{span}    let m0 = wid.y * {tile_rows}u;
    let tx = t & 15u; let ty = t >> 4u;
{acc_decl}
    // the weight groups this thread decodes: features n0 + wn (wn = t / 4, + T / 4 ...),
    // columns 8 wg .. 8 wg + 7 of the step
    let wg = t & 3u;
{wdecl}
    // the x values this thread loads: column xc (consecutive threads, consecutive
    // columns: coalesced), rows 8 xr .. 8 xr + 7, stored as two 16-byte words
    let xc = t & 31u; let xr = t >> 5u;
    var xr0 = vec4<f32>(0.0); var xr1 = vec4<f32>(0.0);
{xload0}{wload.format(ind="    ", g="k_lo / 8u")}    let kb = wg * 8u;
    for (var k0 = k_lo; k0 < k_hi; k0 += {TK}u) {{
        xs[xc * {SX}u + 2u * xr] = xr0; xs[xc * {SX}u + 2u * xr + 1u] = xr1;
{wstore}        workgroupBarrier();
        // the next step's operands, loaded while this step's are multiplied
        let k1 = k0 + {TK}u;
        if (k1 < k_hi) {{
{xload1}{wload.format(ind="            ", g="k1 / 8u")}        }}
{depth}
        workgroupBarrier();
    }}
{stores}}}
"""
    )


def matmul_splits(splits: int) -> str:
    """The partial sums of a split `matmul` joined: one thread per (row, feature) adds its
    ``splits`` parts in order, then the bias and the residual as `matmul` does
    (MATMUL_OUT). P: the split `matmul`'s own (1 the chunk's features, 2 rows, 12 the
    parts' offset, the output's at 5-10)."""
    parts = "".join(f"    v += A[P(12u) + ({s}u * M + m) * N + n];\n" for s in range(splits))
    return (
        HEADER
        + ARENA_F32
        + GRID
        + MATMUL_OUT
        + f"""
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let N = P(1u); let M = P(2u);
    let i = wg_linear(wid, nwg) * 64u + t;
    if (i >= N * M) {{ return; }}
    let m = i / N; let n = i % N;
    var v = 0.0;
{parts}    store(m, n, v);
}}
"""
    )


# The activations, in f32: silu and the tanh GELU as ggml defines them (ggml's CPU
# path rounds GELU through an f16 table; the suite's tolerance for it says so), the erf
# GELU through a rational approximation of erf (|error| < 1.5e-7, Abramowitz & Stegun
# 7.1.26), as WGSL has no erf.
