"""The parameters, the arena and the helpers every kernel shares (see the package's docstring)."""

from __future__ import annotations

# -- parameters and small helpers ------------------------------------------------------------

HEADER = """
@group(0) @binding(0) var<uniform> prm: array<vec4<u32>, 16>;
fn P(i: u32) -> u32 { return prm[i >> 2u][i & 3u]; }
fn PI(i: u32) -> i32 { return bitcast<i32>(P(i)); }
fn PF(i: u32) -> f32 { return bitcast<f32>(P(i)); }
struct V8 { a: vec4<f32>, b: vec4<f32> }
"""

ARENA_F32 = "@group(0) @binding(1) var<storage, read_write> A: array<f32>;\n"
ARENA_U32 = "@group(0) @binding(1) var<storage, read_write> A: array<u32>;\n"

# Workgroups are laid out on a 2-D grid (a dimension holds at most 65535 groups);
# kernels recover the linear index from it.
GRID = """
fn wg_linear(wid: vec3<u32>, nwg: vec3<u32>) -> u32 { return wid.x + wid.y * nwg.x; }
"""

ACTIVATIONS = """
fn silu_(x: f32) -> f32 { return x / (1.0 + exp(-x)); }
fn gelu_(x: f32) -> f32 {
    let u = 0.7978845608028654 * x * (1.0 + 0.044715 * x * x);
    // tanh through exp, clamped where f32 exp overflows
    let t = select(1.0 - 2.0 / (exp(2.0 * u) + 1.0), sign(u), abs(u) > 15.0);
    return 0.5 * x * (1.0 + t);
}
fn erf_(x: f32) -> f32 {
    let a = abs(x);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-a * a);
    return sign(x) * y;
}
fn gelu_erf_(x: f32) -> f32 { return 0.5 * x * (1.0 + erf_(x * 0.7071067811865476)); }
fn act_(kind: u32, x: f32) -> f32 {
    switch kind {
        case 0u: { return silu_(x); }
        case 1u: { return gelu_(x); }
        case 2u: { return gelu_erf_(x); }
        case 4u: { return 1.0 / (1.0 + exp(-x)); }
        case 5u: { return select(log(1.0 + exp(min(x, 20.0))), x, x > 20.0); }
        default: { return max(x, 0.0); }
    }
}
"""


SEQ_FN = """
fn seq_of(r: u32, seq: u32, n_seq: u32) -> u32 {
    var s = 0u;
    for (var i = 0u; i < n_seq; i++) {
        if (r >= A[seq + 2u * n_seq + i]) { s = i; }
    }
    return s;
}
"""

WG = 64  # threads of the row-wise kernels


def workgroup_sum(threads: int, subgroups: bool, array: str = "part") -> tuple[str, str, str]:
    """``wsum``, the sum of one f32 over a workgroup of ``threads``, for the kernels that
    need it: (its WGSL, the call with ``{v}`` for the value, the builtins ``main`` must
    declare for it). With subgroups: `subgroupAdd`, then the subgroups' sums added in
    subgroup order through shared memory (two barriers); else a shared-memory tree.
    ``array``: the name of its shared array."""
    if subgroups:
        src = f"""
var<workgroup> {array}: array<f32, {threads}>;
fn wsum(v: f32, t: u32, sgs: u32) -> f32 {{
    let s = subgroupAdd(v);
    if (t % sgs == 0u) {{ {array}[t / sgs] = s; }}
    workgroupBarrier();
    var r = 0.0;
    for (var i = 0u; i < {threads}u / sgs; i++) {{ r += {array}[i]; }}
    workgroupBarrier();
    return r;
}}
"""
        return src, "wsum({v}, t, sgs)", ", @builtin(subgroup_size) sgs: u32"
    src = f"""
var<workgroup> {array}: array<f32, {threads}>;
fn wsum(v: f32, t: u32) -> f32 {{
    {array}[t] = v;
    workgroupBarrier();
    for (var s = {threads // 2}u; s > 0u; s >>= 1u) {{
        if (t < s) {{ {array}[t] += {array}[t + s]; }}
        workgroupBarrier();
    }}
    let r = {array}[0];
    workgroupBarrier();
    return r;
}}
"""
    return src, "wsum({v}, t)", ""
