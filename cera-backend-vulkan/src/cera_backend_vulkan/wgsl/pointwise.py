"""Element-wise ops and the norms."""

from __future__ import annotations

from .common import ACTIVATIONS, ARENA_F32, GRID, HEADER, workgroup_sum


def elementwise() -> str:
    """One kernel for the elementwise ops, by opcode P(0): 0 unary (P(6) kind), 1 glu
    (P(6) 0 swiglu / 1 geglu), 2 add, 3 mul, 4 scale (P(7) s), 5 softcap (P(7) cap),
    6 copy of a row-strided view, 7 mul by one value per row of P(8). P: 1 count, 2 out offset, 3 a offset, 4 b offset,
    5 b length (b broadcast: index mod its length), 8 row length, 9 a row stride
    (copy)."""
    return (
        HEADER
        + ARENA_F32
        + GRID
        + ACTIVATIONS
        + """
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = wg_linear(wid, nwg) * 256u + t;
    if (i >= P(1u)) { return; }
    let op = P(0u);
    let a = A[P(3u) + i];
    var y = 0.0;
    switch op {
        case 0u: { y = act_(P(6u), a); }
        case 1u: {
            let u = A[P(4u) + i];
            if (P(6u) == 0u) { y = silu_(a) * u; } else { y = gelu_(a) * u; }
        }
        case 2u: { y = a + A[P(4u) + i % P(5u)]; }
        case 3u: { y = a * A[P(4u) + i % P(5u)]; }
        case 4u: { y = a * PF(7u); }
        case 5u: {
            let c = PF(7u);
            let u = a / c;
            y = c * select(1.0 - 2.0 / (exp(2.0 * u) + 1.0), sign(u), abs(u) > 15.0);
        }
        case 7u: { y = a * A[P(4u) + i / P(8u)]; }
        default: {
            let n = P(8u);
            y = A[P(3u) + (i / n) * P(9u) + i % n];
        }
    }
    A[P(2u) + i] = y;
}
"""
    )


NORM_WG = 256


def norm(subgroups: bool = False) -> str:
    """rms_norm (P(0) = 0) and layer_norm (1) of rows: one workgroup a row. P: 1 rows,
    2 row length, 3 x offset, 4 out offset, 5 weight offset + 1, 6 bias offset + 1, 7 eps,
    8 residual offset + 1 (rows added to the result: an add fused in; 0 none). Sums in f32
    over the workgroup: with ``subgroups``, `subgroupAdd` and one shared-memory step (two
    barriers a sum instead of nine); else a tree. Rows of at most 4 x NORM_WG values stay
    in registers between the passes, and the weight, bias and residual of a thread's
    values are loaded before the sums (their loads in flight while the row is summed)."""
    reducer, call, builtins = workgroup_sum(NORM_WG, subgroups)
    C = 4  # values a thread keeps in registers (rows of at most C x NORM_WG)
    keep = "".join(
        f"""        let i{j} = t + {j * NORM_WG}u;
        if (i{j} < n) {{
            x{j} = A[x + i{j}];
            if (P(5u) != 0u) {{ w{j} = A[P(5u) - 1u + i{j}]; }}
            if (P(6u) != 0u) {{ b{j} = A[P(6u) - 1u + i{j}]; }}
            if (P(8u) != 0u) {{ z{j} = A[P(8u) - 1u + r * n + i{j}]; }}
        }}
"""
        for j in range(C)
    )
    decl = "".join(f"    var x{j} = 0.0; var w{j} = 1.0; var b{j} = 0.0; var z{j} = 0.0;\n" for j in range(C))
    mean_small = " + ".join(f"x{j}" for j in range(C))
    q_small = " + ".join(f"select(0.0, (x{j} - mean) * (x{j} - mean), t + {j * NORM_WG}u < n)" for j in range(C))
    out_small = "".join(
        f"        if (t + {j * NORM_WG}u < n) {{ A[o + t + {j * NORM_WG}u] = (x{j} - mean) * inv * w{j} + b{j} + z{j}; }}\n"
        for j in range(C)
    )
    return (
        HEADER
        + ARENA_F32
        + GRID
        + reducer
        + f"""
@compute @workgroup_size({NORM_WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32{builtins}) {{
    let r = wg_linear(wid, nwg);
    if (r >= P(1u)) {{ return; }}
    let n = P(2u);
    let x = P(3u) + r * n;
    let o = P(4u) + r * n;
    var mean = 0.0;
{decl}    if (n <= {C * NORM_WG}u) {{
{keep}        if (P(0u) == 1u) {{ mean = {call.format(v=f"({mean_small})")} / f32(n); }}
        let inv = inverseSqrt({call.format(v=f"({q_small})")} / f32(n) + PF(7u));
{out_small}        return;
    }}
    if (P(0u) == 1u) {{
        var s = 0.0;
        for (var i = t; i < n; i += {NORM_WG}u) {{ s += A[x + i]; }}
        mean = {call.format(v="s")} / f32(n);
    }}
    var q = 0.0;
    for (var i = t; i < n; i += {NORM_WG}u) {{ let d = A[x + i] - mean; q += d * d; }}
    let inv = inverseSqrt({call.format(v="q")} / f32(n) + PF(7u));
    for (var i = t; i < n; i += {NORM_WG}u) {{
        var y = (A[x + i] - mean) * inv;
        if (P(5u) != 0u) {{ y *= A[P(5u) - 1u + i]; }}
        if (P(6u) != 0u) {{ y += A[P(6u) - 1u + i]; }}
        if (P(8u) != 0u) {{ y += A[P(8u) - 1u + r * n + i]; }}
        A[o + i] = y;
    }}
}}
"""
    )
