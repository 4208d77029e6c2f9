"""WGSL source of the kernels, generated per variant (tensor type, head size, ...).

Conventions shared by every kernel (compile.py relies on them):

- binding 0 is the dispatch's parameters, a uniform block of up to 64 32-bit words read
  with ``P(i)`` (u32), ``PI(i)`` (i32) and ``PF(i)`` (f32); a dispatch's parameters are
  fixed when the graph is compiled, so nothing is written per dispatch at run time;
- binding 1 is the executable's arena: every activation, the graph's inputs (token ids,
  positions) and the per-run table of sequences (slots, starts, first rows, lengths)
  live in it, at element offsets given in the parameters. A kernel declares it as
  ``array<f32>`` or, when it also moves integers, ``array<u32>`` (floats through
  ``bitcast``), so integer data never passes through float arithmetic;
- further bindings are weights (``array<u32>``: the GGUF bytes as they are in the file,
  read with the unaligned loads below), the KV cache of a state, its cell positions, its
  recurrent state or its cross-attention memories.

Weights are read in their GGUF block layout. Every type is decoded by one function,
``dq8_<W>(row_byte_offset, g) -> V8``, giving elements 8g..8g+7 of a row: all block sizes
are multiples of 8, so products, row gathers and tiles all go through that one function.
"""

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

# -- reading GGUF blocks ------------------------------------------------------------------

WEIGHT_BINDING = "@group(0) @binding({b}) var<storage, read> {W}: array<u32>;\n"

READERS = """
fn rd8_{W}(off: u32) -> u32 { return ({W}[off >> 2u] >> ((off & 3u) * 8u)) & 0xffu; }
fn rd16_{W}(off: u32) -> u32 { return ({W}[off >> 2u] >> ((off & 2u) * 8u)) & 0xffffu; }
fn rd32_{W}(off: u32) -> u32 {
    let i = off >> 2u;
    let s = (off & 3u) * 8u;
    if (s == 0u) { return {W}[i]; }
    return ({W}[i] >> s) | ({W}[i + 1u] << (32u - s));
}
fn f16_{W}(off: u32) -> f32 { return unpack2x16float(rd16_{W}(off)).x; }
"""

# Per type: the body of dq8_<W>(base, g). ``base`` is the byte offset of the row in the
# binding, ``g`` the index of the group of 8 elements in the row.
DQ8 = {
    "F32": """
    let o = (base >> 2u) + g * 8u;
    return V8(vec4<f32>(bitcast<f32>({W}[o]), bitcast<f32>({W}[o + 1u]), bitcast<f32>({W}[o + 2u]), bitcast<f32>({W}[o + 3u])),
              vec4<f32>(bitcast<f32>({W}[o + 4u]), bitcast<f32>({W}[o + 5u]), bitcast<f32>({W}[o + 6u]), bitcast<f32>({W}[o + 7u])));
""",
    "F16": """
    let o = base + g * 16u;
    let a = unpack2x16float(rd32_{W}(o)); let b = unpack2x16float(rd32_{W}(o + 4u));
    let c = unpack2x16float(rd32_{W}(o + 8u)); let d = unpack2x16float(rd32_{W}(o + 12u));
    return V8(vec4<f32>(a, b), vec4<f32>(c, d));
""",
    "BF16": """
    let o = base + g * 16u;
    var v: array<f32, 8>;
    for (var i = 0u; i < 4u; i++) {
        let w = rd32_{W}(o + 4u * i);
        v[2u * i] = bitcast<f32>(w << 16u);
        v[2u * i + 1u] = bitcast<f32>(w & 0xffff0000u);
    }
    return V8(vec4<f32>(v[0], v[1], v[2], v[3]), vec4<f32>(v[4], v[5], v[6], v[7]));
""",
    # 18 bytes: f16 d, 16 bytes of nibbles (element j: low nibble of byte j, j+16: high)
    "Q4_0": """
    let blk = base + (g >> 2u) * 18u;
    let j = g & 3u;
    let d = f16_{W}(blk);
    let q = blk + 2u + 8u * (j & 1u);
    let sh = (j >> 1u) * 4u;
    let u0 = rd32_{W}(q) >> sh; let u1 = rd32_{W}(q + 4u) >> sh;
    let m = vec4<u32>(0u, 8u, 16u, 24u);
    let a = vec4<f32>((vec4<u32>(u0) >> m) & vec4<u32>(15u)) - 8.0;
    let b = vec4<f32>((vec4<u32>(u1) >> m) & vec4<u32>(15u)) - 8.0;
    return V8(a * d, b * d);
""",
    # 20 bytes: f16 d, f16 m, 16 bytes of nibbles
    "Q4_1": """
    let blk = base + (g >> 2u) * 20u;
    let j = g & 3u;
    let d = f16_{W}(blk); let mn = f16_{W}(blk + 2u);
    let q = blk + 4u + 8u * (j & 1u);
    let sh = (j >> 1u) * 4u;
    let u0 = rd32_{W}(q) >> sh; let u1 = rd32_{W}(q + 4u) >> sh;
    let m = vec4<u32>(0u, 8u, 16u, 24u);
    let a = vec4<f32>((vec4<u32>(u0) >> m) & vec4<u32>(15u));
    let b = vec4<f32>((vec4<u32>(u1) >> m) & vec4<u32>(15u));
    return V8(a * d + mn, b * d + mn);
""",
    # 22 bytes: f16 d, 32 high bits, 16 bytes of nibbles; element e's fifth bit is bit e
    "Q5_0": """
    let blk = base + (g >> 2u) * 22u;
    let j = g & 3u;
    let d = f16_{W}(blk);
    let qh = rd32_{W}(blk + 2u) >> (8u * j);
    let q = blk + 6u + 8u * (j & 1u);
    let sh = (j >> 1u) * 4u;
    let u0 = rd32_{W}(q) >> sh; let u1 = rd32_{W}(q + 4u) >> sh;
    let m = vec4<u32>(0u, 8u, 16u, 24u);
    let hb = vec4<u32>(0u, 1u, 2u, 3u);
    let a = vec4<f32>(((vec4<u32>(u0) >> m) & vec4<u32>(15u)) | (((vec4<u32>(qh) >> hb) & vec4<u32>(1u)) << vec4<u32>(4u))) - 16.0;
    let b = vec4<f32>(((vec4<u32>(u1) >> m) & vec4<u32>(15u)) | (((vec4<u32>(qh) >> (hb + 4u)) & vec4<u32>(1u)) << vec4<u32>(4u))) - 16.0;
    return V8(a * d, b * d);
""",
    # 24 bytes: f16 d, f16 m, 32 high bits, 16 bytes of nibbles
    "Q5_1": """
    let blk = base + (g >> 2u) * 24u;
    let j = g & 3u;
    let d = f16_{W}(blk); let mn = f16_{W}(blk + 2u);
    let qh = rd32_{W}(blk + 4u) >> (8u * j);
    let q = blk + 8u + 8u * (j & 1u);
    let sh = (j >> 1u) * 4u;
    let u0 = rd32_{W}(q) >> sh; let u1 = rd32_{W}(q + 4u) >> sh;
    let m = vec4<u32>(0u, 8u, 16u, 24u);
    let hb = vec4<u32>(0u, 1u, 2u, 3u);
    let a = vec4<f32>(((vec4<u32>(u0) >> m) & vec4<u32>(15u)) | (((vec4<u32>(qh) >> hb) & vec4<u32>(1u)) << vec4<u32>(4u)));
    let b = vec4<f32>(((vec4<u32>(u1) >> m) & vec4<u32>(15u)) | (((vec4<u32>(qh) >> (hb + 4u)) & vec4<u32>(1u)) << vec4<u32>(4u)));
    return V8(a * d + mn, b * d + mn);
""",
    # 34 bytes: f16 d, 32 signed bytes
    "Q8_0": """
    let blk = base + (g >> 2u) * 34u;
    let d = f16_{W}(blk);
    let q = blk + 2u + 8u * (g & 3u);
    let u0 = rd32_{W}(q); let u1 = rd32_{W}(q + 4u);
    let m = vec4<u32>(24u, 16u, 8u, 0u);
    let a = vec4<f32>((bitcast<vec4<i32>>(vec4<u32>(u0) << m)) >> vec4<u32>(24u));
    let b = vec4<f32>((bitcast<vec4<i32>>(vec4<u32>(u1) << m)) >> vec4<u32>(24u));
    return V8(a * d, b * d);
""",
    # 18 bytes as Q4_0, the nibble indexing a table of 16 values
    "IQ4_NL": """
    let blk = base + (g >> 2u) * 18u;
    let j = g & 3u;
    let d = f16_{W}(blk);
    let q = blk + 2u + 8u * (j & 1u);
    let sh = (j >> 1u) * 4u;
    let u0 = rd32_{W}(q) >> sh; let u1 = rd32_{W}(q + 4u) >> sh;
    var v: array<f32, 8>;
    for (var i = 0u; i < 4u; i++) {
        v[i] = f32(IQ4NL_{W}[(u0 >> (8u * i)) & 15u]);
        v[i + 4u] = f32(IQ4NL_{W}[(u1 >> (8u * i)) & 15u]);
    }
    return V8(vec4<f32>(v[0], v[1], v[2], v[3]) * d, vec4<f32>(v[4], v[5], v[6], v[7]) * d);
""",
    # 84 bytes per 256: 16 bytes of 4-bit scales (low) and mins (high), 64 bytes of 2-bit
    # quants, f16 d, f16 dmin. Halves of 128; in a half, quarter j of 32 takes bits 2j of
    # byte t of the half's 32, each 16 elements their own scale byte (8 half + 2 j + t / 16).
    "Q2_K": """
    let blk = base + (g >> 5u) * 84u;
    let e = (g & 31u) * 8u;
    let n = e >> 7u;
    let j = (e & 127u) >> 5u;
    let t = e & 31u;
    let sc = rd8_{W}(blk + 8u * n + 2u * j + (t >> 4u));
    let dl = f16_{W}(blk + 80u) * f32(sc & 15u);
    let ml = f16_{W}(blk + 82u) * f32(sc >> 4u);
    let q = blk + 16u + 32u * n + t;
    let u0 = rd32_{W}(q) >> (2u * j); let u1 = rd32_{W}(q + 4u) >> (2u * j);
    let m = vec4<u32>(0u, 8u, 16u, 24u);
    let a = vec4<f32>((vec4<u32>(u0) >> m) & vec4<u32>(3u));
    let b = vec4<f32>((vec4<u32>(u1) >> m) & vec4<u32>(3u));
    return V8(a * dl - ml, b * dl - ml);
""",
    # 110 bytes per 256: 32 bytes of high bits, 64 bytes of 2-bit quants (laid out as
    # Q2_K's), 12 bytes of 6-bit signed scales, f16 d. Element t of quarter j of half n
    # has its high bit at bit 4n + j of byte t, and subtracts 4 when that bit is clear.
    # Scale s: low 4 bits from byte s & 7 (high nibble for s >= 8), top 2 bits from byte
    # 8 + (s & 3), bits 2 (s >> 2) (ggml's kmask unpacking), minus 32.
    "Q3_K": """
    let blk = base + (g >> 5u) * 110u;
    let e = (g & 31u) * 8u;
    let n = e >> 7u;
    let j = (e & 127u) >> 5u;
    let t = e & 31u;
    let s = 8u * n + 2u * j + (t >> 4u);
    let lo = (rd8_{W}(blk + 96u + (s & 7u)) >> (4u * (s >> 3u))) & 15u;
    let hi = (rd8_{W}(blk + 104u + (s & 3u)) >> (2u * (s >> 2u))) & 3u;
    let dl = f16_{W}(blk + 108u) * f32(i32(lo | (hi << 4u)) - 32);
    let q = blk + 32u + 32u * n + t;
    let u0 = rd32_{W}(q) >> (2u * j); let u1 = rd32_{W}(q + 4u) >> (2u * j);
    let hs = 4u * n + j;
    let h0 = rd32_{W}(blk + t) >> hs; let h1 = rd32_{W}(blk + t + 4u) >> hs;
    let m = vec4<u32>(0u, 8u, 16u, 24u);
    let a = vec4<f32>(((vec4<u32>(u0) >> m) & vec4<u32>(3u)) | (((vec4<u32>(h0) >> m) & vec4<u32>(1u)) << vec4<u32>(2u))) - 4.0;
    let b = vec4<f32>(((vec4<u32>(u1) >> m) & vec4<u32>(3u)) | (((vec4<u32>(h1) >> m) & vec4<u32>(1u)) << vec4<u32>(2u))) - 4.0;
    return V8(a * dl, b * dl);
""",
    # 144 bytes per 256: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of
    # nibbles (each 32 bytes hold two sub-blocks of 32: low nibbles then high)
    "Q4_K": """
    let blk = base + (g >> 5u) * 144u;
    let e = (g & 31u) * 8u;
    let s = e >> 5u;
    let l = e & 31u;
    let d = f16_{W}(blk); let dmin = f16_{W}(blk + 2u);
    let sm = kscale_{W}(blk + 4u, s);
    let q = blk + 16u + 32u * (s >> 1u) + l;
    let sh = (s & 1u) * 4u;
    let u0 = rd32_{W}(q) >> sh; let u1 = rd32_{W}(q + 4u) >> sh;
    let m = vec4<u32>(0u, 8u, 16u, 24u);
    let a = vec4<f32>((vec4<u32>(u0) >> m) & vec4<u32>(15u));
    let b = vec4<f32>((vec4<u32>(u1) >> m) & vec4<u32>(15u));
    let sc = d * sm.x; let mn = dmin * sm.y;
    return V8(a * sc - mn, b * sc - mn);
""",
    # 176 bytes per 256: d, dmin, scales as Q4_K, 32 bytes of fifth bits (bit s of byte l
    # for sub-block s), 128 bytes of nibbles
    "Q5_K": """
    let blk = base + (g >> 5u) * 176u;
    let e = (g & 31u) * 8u;
    let s = e >> 5u;
    let l = e & 31u;
    let d = f16_{W}(blk); let dmin = f16_{W}(blk + 2u);
    let sm = kscale_{W}(blk + 4u, s);
    let q = blk + 48u + 32u * (s >> 1u) + l;
    let sh = (s & 1u) * 4u;
    let u0 = rd32_{W}(q) >> sh; let u1 = rd32_{W}(q + 4u) >> sh;
    let h0 = rd32_{W}(blk + 16u + l) >> s; let h1 = rd32_{W}(blk + 20u + l) >> s;
    let m = vec4<u32>(0u, 8u, 16u, 24u);
    let a = vec4<f32>(((vec4<u32>(u0) >> m) & vec4<u32>(15u)) | (((vec4<u32>(h0) >> m) & vec4<u32>(1u)) << vec4<u32>(4u)));
    let b = vec4<f32>(((vec4<u32>(u1) >> m) & vec4<u32>(15u)) | (((vec4<u32>(h1) >> m) & vec4<u32>(1u)) << vec4<u32>(4u)));
    let sc = d * sm.x; let mn = dmin * sm.y;
    return V8(a * sc - mn, b * sc - mn);
""",
    # 210 bytes per 256: 128 bytes of low nibbles, 64 bytes of 2-bit highs, 16 signed
    # scales, f16 d. Halves of 128; in a half, quarter k of 32 takes nibble (k >> 1) of
    # byte l + 32 (k & 1) and bits 2k of the high byte l.
    "Q6_K": """
    let blk = base + (g >> 5u) * 210u;
    let e = (g & 31u) * 8u;
    let n = e >> 7u;
    let r = e & 127u;
    let k = r >> 5u;
    let l = r & 31u;
    let d = f16_{W}(blk + 208u);
    let sc = f32(bitcast<i32>(rd8_{W}(blk + 192u + 8u * n + (l >> 4u) + 2u * k) << 24u) >> 24u) * d;
    let ql = blk + 64u * n + l + 32u * (k & 1u);
    let sh = (k >> 1u) * 4u;
    let u0 = rd32_{W}(ql) >> sh; let u1 = rd32_{W}(ql + 4u) >> sh;
    let qh = blk + 128u + 32u * n + l;
    let h0 = rd32_{W}(qh) >> (2u * k); let h1 = rd32_{W}(qh + 4u) >> (2u * k);
    let m = vec4<u32>(0u, 8u, 16u, 24u);
    let a = vec4<f32>(((vec4<u32>(u0) >> m) & vec4<u32>(15u)) | (((vec4<u32>(h0) >> m) & vec4<u32>(3u)) << vec4<u32>(4u))) - 32.0;
    let b = vec4<f32>(((vec4<u32>(u1) >> m) & vec4<u32>(15u)) | (((vec4<u32>(h1) >> m) & vec4<u32>(3u)) << vec4<u32>(4u))) - 32.0;
    return V8(a * sc, b * sc);
""",
}

# The 6-bit scale and min of sub-block s of a Q4_K/Q5_K super-block (ggml's
# get_scale_min_k4), from the 12 bytes at ``off``.
KSCALE = """
fn kscale_{W}(off: u32, s: u32) -> vec2<f32> {
    if (s < 4u) {
        return vec2<f32>(f32(rd8_{W}(off + s) & 63u), f32(rd8_{W}(off + s + 4u) & 63u));
    }
    let sc = (rd8_{W}(off + s + 4u) & 15u) | ((rd8_{W}(off + s - 4u) >> 6u) << 4u);
    let mn = (rd8_{W}(off + s + 4u) >> 4u) | ((rd8_{W}(off + s) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(mn));
}
"""

# One table per weight binding: a kernel reading two IQ4_NL weights (gate and up in one
# dispatch) would otherwise define the constant twice, which WGSL refuses.
IQ4NL_TABLE = (
    "const IQ4NL_{W} = array<i32, 16>(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);\n"
)

# block size (elements) and bytes per block of each type served
BLOCKS = {
    "F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22),
    "Q5_1": (32, 24), "Q8_0": (32, 34), "IQ4_NL": (32, 18), "Q2_K": (256, 84), "Q3_K": (256, 110),
    "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210),
}  # fmt: skip


def weight_lib(ggml_type: str, var: str, binding: int) -> str:
    """The binding of one weight and its decoder ``dq8_<var>``."""
    src = WEIGHT_BINDING.format(b=binding, W=var) + READERS.replace("{W}", var)
    if ggml_type in ("Q4_K", "Q5_K"):
        src += KSCALE.replace("{W}", var)
    if ggml_type == "IQ4_NL":
        src += IQ4NL_TABLE.replace("{W}", var)
    body = DQ8[ggml_type].replace("{W}", var)
    src += f"fn dq8_{var}(base: u32, g: u32) -> V8 {{{body}}}\n"
    return src


def row_bytes(ggml_type: str, k: int) -> int:
    block, size = BLOCKS[ggml_type]
    return k // block * size


# -- kernels -------------------------------------------------------------------------------------

WG = 64  # threads of the row-wise kernels


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


MV_ROWS = 8  # activation rows a matvec dispatch multiplies per pass over the weights
MV_WG = 128  # threads of a matvec workgroup


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
    if subgroups:
        # the subgroups' sums meet in shared memory, added in subgroup order
        reducer = f"""
var<workgroup> part: array<f32, {MV_WG}>;
fn wsum(v: f32, t: u32, sgs: u32) -> f32 {{
    let s = subgroupAdd(v);
    if (t % sgs == 0u) {{ part[t / sgs] = s; }}
    workgroupBarrier();
    var r = 0.0;
    for (var i = 0u; i < {MV_WG}u / sgs; i++) {{ r += part[i]; }}
    workgroupBarrier();
    return r;
}}
"""
        builtins = ", @builtin(subgroup_size) sgs: u32"
        call = "wsum({v}, t, sgs)"
    else:
        reducer = f"""
var<workgroup> part: array<f32, {MV_WG}>;
fn wsum(v: f32, t: u32) -> f32 {{
    part[t] = v;
    workgroupBarrier();
    for (var s = {MV_WG // 2}u; s > 0u; s >>= 1u) {{
        if (t < s) {{ part[t] += part[t + s]; }}
        workgroupBarrier();
    }}
    let r = part[0];
    workgroupBarrier();
    return r;
}}
"""
        builtins = ""
        call = "wsum({v}, t)"
    reduce = "".join(
        f"        a{i}_{r}_{j} = {call.format(v=f'a{i}_{r}_{j}')};\n"
        for i in range(n_w)
        for r in range(R)
        for j in range(F)
    )
    if onepass and subgroups:
        decl1, reduce = _reduce_onepass([f"a{i}_{r}_{j}" for i in range(n_w) for r in range(R) for j in range(F)])
        reducer += decl1
    prologue = ""
    nw_load = ""
    if norm:
        for r in range(R):
            prologue += f"""        var inv{r} = 1.0;
        if ({r}u < nr) {{
            var q = 0.0;
            for (var g = t; g < K / 8u; g += {MV_WG}u) {{
                let xo = P(3u) + (m0 + {r}u) * P(4u) + g * 8u;
                let xa = vec4<f32>(A[xo], A[xo + 1u], A[xo + 2u], A[xo + 3u]);
                let xb = vec4<f32>(A[xo + 4u], A[xo + 5u], A[xo + 6u], A[xo + 7u]);
                q += dot(xa, xa) + dot(xb, xb);
            }}
            q = {call.format(v="q")};
            inv{r} = inverseSqrt(q / f32(K) + PF(14u));
        }}
"""
        nw_load = """            var nwa = vec4<f32>(1.0); var nwb = vec4<f32>(1.0);
            if (P(13u) != 0u) {
                let no = P(13u) - 1u + g * 8u;
                nwa = vec4<f32>(A[no], A[no + 1u], A[no + 2u], A[no + 3u]);
                nwb = vec4<f32>(A[no + 4u], A[no + 5u], A[no + 6u], A[no + 7u]);
            }
"""
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
    if subgroups:
        reducer = f"""
var<workgroup> part: array<f32, {MV_WG}>;
fn wsum(v: f32, t: u32, sgs: u32) -> f32 {{
    let s = subgroupAdd(v);
    if (t % sgs == 0u) {{ part[t / sgs] = s; }}
    workgroupBarrier();
    var r = 0.0;
    for (var i = 0u; i < {MV_WG}u / sgs; i++) {{ r += part[i]; }}
    workgroupBarrier();
    return r;
}}
"""
        builtins, call = ", @builtin(subgroup_size) sgs: u32", "wsum({v}, t, sgs)"
    else:
        reducer = f"""
var<workgroup> part: array<f32, {MV_WG}>;
fn wsum(v: f32, t: u32) -> f32 {{
    part[t] = v;
    workgroupBarrier();
    for (var s = {MV_WG // 2}u; s > 0u; s >>= 1u) {{
        if (t < s) {{ part[t] += part[t + s]; }}
        workgroupBarrier();
    }}
    let r = part[0];
    workgroupBarrier();
    return r;
}}
"""
        builtins, call = "", "wsum({v}, t)"
    reduce = "".join(f"        a{r}_{j} = {call.format(v=f'a{r}_{j}')};\n" for r in range(R) for j in range(F))
    if onepass and subgroups:
        decl1, reduce = _reduce_onepass([f"a{r}_{j}" for r in range(R) for j in range(F)])
        reducer += decl1
    prologue, nw_load = "", ""
    if norm:
        for r in range(R):
            prologue += f"""        var inv{r} = 1.0;
        if ({r}u < nr) {{
            var q = 0.0;
            for (var g = t; g < K / 8u; g += {MV_WG}u) {{
                let xo = P(3u) + (m0 + {r}u) * P(4u) + g * 8u;
                let xa = vec4<f32>(A[xo], A[xo + 1u], A[xo + 2u], A[xo + 3u]);
                let xb = vec4<f32>(A[xo + 4u], A[xo + 5u], A[xo + 6u], A[xo + 7u]);
                q += dot(xa, xa) + dot(xb, xb);
            }}
            q = {call.format(v="q")};
            inv{r} = inverseSqrt(q / f32(K) + PF(14u));
        }}
"""
        nw_load = """            var nwa = vec4<f32>(1.0); var nwb = vec4<f32>(1.0);
            if (P(13u) != 0u) {
                let no = P(13u) - 1u + g * 8u;
                nwa = vec4<f32>(A[no], A[no + 1u], A[no + 2u], A[no + 3u]);
                nwb = vec4<f32>(A[no + 4u], A[no + 5u], A[no + 6u], A[no + 7u]);
            }
"""
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
        head = f"""
var<workgroup> red: array<f32, {WG}>;
fn wsum(v: f32, t: u32) -> f32 {{
    red[t] = v;
    workgroupBarrier();
    for (var s = {WG // 2}u; s > 0u; s >>= 1u) {{
        if (t < s) {{ red[t] += red[t + s]; }}
        workgroupBarrier();
    }}
    let r = red[0];
    workgroupBarrier();
    return r;
}}
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let n = wg_linear(wid, nwg);
    if (n >= P(1u)) {{ return; }}
    let step = {WG}u;
    let first = t == 0u;
"""
        lane0 = "t"
    red_fn = "subgroupAdd(q)" if subgroups else "wsum(q, t)"
    prologue = ""
    nw_load = ""
    if norm:
        for r in range(R):
            prologue += f"""        var inv{r} = 1.0;
        if ({r}u < nr) {{
            var q = 0.0;
            for (var g = {lane0}; g < K / 8u; g += step) {{
                let xo = P(3u) + (m0 + {r}u) * P(4u) + g * 8u;
                let xa = vec4<f32>(A[xo], A[xo + 1u], A[xo + 2u], A[xo + 3u]);
                let xb = vec4<f32>(A[xo + 4u], A[xo + 5u], A[xo + 6u], A[xo + 7u]);
                q += dot(xa, xa) + dot(xb, xb);
            }}
            q = {red_fn};
            inv{r} = inverseSqrt(q / f32(K) + PF(14u));
        }}
"""
        nw_load = """            var nwa = vec4<f32>(1.0); var nwb = vec4<f32>(1.0);
            if (P(13u) != 0u) {
                let no = P(13u) - 1u + g * 8u;
                nwa = vec4<f32>(A[no], A[no + 1u], A[no + 2u], A[no + 3u]);
                nwb = vec4<f32>(A[no + 4u], A[no + 5u], A[no + 6u], A[no + 7u]);
            }
"""
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


# -- the unit kernel: 32 weights a lane, x in 16-byte loads ------------------------------------

# A "unit" is 32 elements of a row that one lane decodes with one read of their block's
# header: a whole block of the 32-element types, an eighth of a K-quant super-block. Each
# layout says which 8 runs of 4 elements (x's 16-byte loads) a unit takes, and each type
# with a layout of its own has a decoder ``unit_<W>(row_byte_offset, u, x) -> f32`` that
# returns the unit's dot product with those 8 vectors of x. Types without one go through
# their dq8 decoder four times (the "lin" layout: 32 consecutive elements).
UNIT_LAYOUT = {"Q4_K": "k4", "Q6_K": "k6"}
UNIT_XOFF = {
    # 32 consecutive elements
    "lin": "return 32u * u + 4u * k;",
    # Q4_K: sub-blocks 2j and 2j + 1 share 32 bytes of nibbles (low, high); part p = 2j + h
    # of super-block b takes bytes 16h..16h+15 of them: elements 64j + 16h .. + 15 (low)
    # and 64j + 32 + 16h .. + 15 (high)
    "k4": """let b = u >> 3u; let p = u & 7u;
    return 256u * b + 64u * (p >> 1u) + 16u * (p & 1u) + 32u * (k >> 2u) + 4u * (k & 3u);""",
    # Q6_K: half n (128 elements) of super-block b, bytes l = lq .. lq + 7 of its low
    # nibbles, which hold elements l, l + 32, l + 64, l + 96 (quarters q = k >> 1)
    "k6": """let b = u >> 3u; let p = u & 7u;
    return 256u * b + 128u * (p >> 2u) + 8u * (p & 3u) + 32u * (k >> 1u) + 4u * (k & 1u);""",
}
UNIT_DECODERS = {
    "Q4_K": """
fn kbyte_{W}(s0: u32, s1: u32, s2: u32, i: u32) -> u32 {
    let w = select(select(s2, s1, i < 8u), s0, i < 4u);
    return (w >> (8u * (i & 3u))) & 255u;
}
fn ksm_{W}(s0: u32, s1: u32, s2: u32, s: u32) -> vec2<f32> {
    if (s < 4u) {
        return vec2<f32>(f32(kbyte_{W}(s0, s1, s2, s) & 63u), f32(kbyte_{W}(s0, s1, s2, s + 4u) & 63u));
    }
    let hi = kbyte_{W}(s0, s1, s2, s + 4u);
    return vec2<f32>(f32((hi & 15u) | ((kbyte_{W}(s0, s1, s2, s - 4u) >> 6u) << 4u)),
                     f32((hi >> 4u) | ((kbyte_{W}(s0, s1, s2, s) >> 6u) << 4u)));
}
fn unit_{W}(rb: u32, u: u32, x: array<vec4<f32>, 8>) -> f32 {
    let b = u >> 3u; let p = u & 7u; let j = p >> 1u;
    let o = (rb + 144u * b) >> 2u;
    let dm = unpack2x16float({W}[o]);
    let s0 = {W}[o + 1u]; let s1 = {W}[o + 2u]; let s2 = {W}[o + 3u];
    let q = o + 4u + 8u * j + 4u * (p & 1u);
    let q0 = {W}[q]; let q1 = {W}[q + 1u]; let q2 = {W}[q + 2u]; let q3 = {W}[q + 3u];
    let lo = ksm_{W}(s0, s1, s2, 2u * j); let hi = ksm_{W}(s0, s1, s2, 2u * j + 1u);
    let m = vec4<u32>(0u, 8u, 16u, 24u); let f = vec4<u32>(15u);
    let dl = dot(x[0], vec4<f32>((vec4<u32>(q0) >> m) & f)) + dot(x[1], vec4<f32>((vec4<u32>(q1) >> m) & f))
           + dot(x[2], vec4<f32>((vec4<u32>(q2) >> m) & f)) + dot(x[3], vec4<f32>((vec4<u32>(q3) >> m) & f));
    let m4 = m + vec4<u32>(4u);
    let dh = dot(x[4], vec4<f32>((vec4<u32>(q0) >> m4) & f)) + dot(x[5], vec4<f32>((vec4<u32>(q1) >> m4) & f))
           + dot(x[6], vec4<f32>((vec4<u32>(q2) >> m4) & f)) + dot(x[7], vec4<f32>((vec4<u32>(q3) >> m4) & f));
    let one = vec4<f32>(1.0);
    let xl = dot(x[0] + x[1] + x[2] + x[3], one); let xh = dot(x[4] + x[5] + x[6] + x[7], one);
    return dm.x * (lo.x * dl + hi.x * dh) - dm.y * (lo.y * xl + hi.y * xh);
}
""",
    "Q6_K": """
fn q6v_{W}(ql: u32, qh: u32, sl: u32, sh: u32) -> vec4<f32> {
    let m = vec4<u32>(0u, 8u, 16u, 24u);
    return vec4<f32>(((vec4<u32>(ql) >> (m + vec4<u32>(sl))) & vec4<u32>(15u))
                     | (((vec4<u32>(qh) >> (m + vec4<u32>(sh))) & vec4<u32>(3u)) << vec4<u32>(4u))) - 32.0;
}
fn unit_{W}(rb: u32, u: u32, x: array<vec4<f32>, 8>) -> f32 {
    let b = u >> 3u; let p = u & 7u; let n = p >> 2u; let l = 8u * (p & 3u);
    let blk = rb + 210u * b;
    let a0 = rd32_{W}(blk + 64u * n + l); let a1 = rd32_{W}(blk + 64u * n + l + 4u);
    let c0 = rd32_{W}(blk + 64u * n + 32u + l); let c1 = rd32_{W}(blk + 64u * n + 36u + l);
    let h0 = rd32_{W}(blk + 128u + 32u * n + l); let h1 = rd32_{W}(blk + 132u + 32u * n + l);
    let sw0 = rd32_{W}(blk + 192u + 8u * n + (l >> 4u)); let sw1 = rd32_{W}(blk + 196u + 8u * n + (l >> 4u));
    let d = f16_{W}(blk + 208u);
    let sc = vec4<f32>(vec4<i32>(vec4<u32>(sw0, sw0 >> 16u, sw1, sw1 >> 16u) << vec4<u32>(24u)) >> vec4<u32>(24u));
    let d0 = dot(x[0], q6v_{W}(a0, h0, 0u, 0u)) + dot(x[1], q6v_{W}(a1, h1, 0u, 0u));
    let d1 = dot(x[2], q6v_{W}(c0, h0, 0u, 2u)) + dot(x[3], q6v_{W}(c1, h1, 0u, 2u));
    let d2 = dot(x[4], q6v_{W}(a0, h0, 4u, 4u)) + dot(x[5], q6v_{W}(a1, h1, 4u, 4u));
    let d3 = dot(x[6], q6v_{W}(c0, h0, 4u, 6u)) + dot(x[7], q6v_{W}(c1, h1, 4u, 6u));
    return d * dot(sc, vec4<f32>(d0, d1, d2, d3));
}
""",
}
UNIT_GENERIC = """
fn unit_{W}(rb: u32, u: u32, x: array<vec4<f32>, 8>) -> f32 {
    var s = 0.0;
    for (var i = 0u; i < 4u; i++) {
        let w = dq8_{W}(rb, 4u * u + i);
        s += dot(x[2u * i], w.a) + dot(x[2u * i + 1u], w.b);
    }
    return s;
}
"""


def unit_layout(types: tuple[str, ...]) -> str:
    """The unit layout a product of these weight types runs with: their own when they
    share one, else "lin" (every type's dq8 decoder)."""
    kinds = {UNIT_LAYOUT.get(t, "lin") for t in types}
    return kinds.pop() if len(kinds) == 1 else "lin"


def matvec_unit(types: tuple[str, ...], glu: str | None = None, rows: int = 1, per: int = 1, feats: int = 2,
                norm: bool = False) -> str:  # fmt: skip
    """y = x W^T for a few rows of x, bandwidth first: each subgroup computes ``feats``
    output features, lane l taking units l, l + lanes, ... of 32 weights (see
    UNIT_LAYOUT): x read as eight 16-byte loads a unit (the arena bound as vec4s; x's
    offset, row stride and K multiples of 4), shared by the features, and each weight
    decoded with one read of its block header per 32 values; `subgroupAdd` sums the lanes
    (no barrier). A workgroup holds ``per`` features (its subgroups loop over them, so
    the result is right whatever subgroup size the driver picks). Every row's sum runs
    in the same order whatever ``rows`` and M, so a row of a batch is bit for bit its
    one-row product. Parameters, ``glu`` and ``norm`` as `matvec` (the norm weight's
    offset a multiple of 4 too)."""
    layout = unit_layout(types)
    libs = ""
    for i, t in enumerate(types):
        var = f"W{i}"
        libs += weight_lib(t, var, 2 + i)
        libs += (UNIT_DECODERS[t] if layout != "lin" else UNIT_GENERIC).replace("{W}", var)
    n_w, R, F = len(types), rows, feats
    decl = "".join(f"        var a{i}_{r}_{j} = 0.0;\n" for i in range(n_w) for r in range(R) for j in range(F))
    xload = ""
    for r in range(R):
        xload += f"            var x{r}: array<vec4<f32>, 8>;\n"
        xload += f"            if ({r}u < nr) {{\n"
        xload += f"                let xo = P(3u) + (m0 + {r}u) * P(4u);\n"
        xload += "                for (var k = 0u; k < 8u; k++) {\n"
        if norm:
            xload += f"                    let e = xoff(u, k);\n                    x{r}[k] = A[(xo + e) >> 2u] * nw(e) * inv{r};\n"
        else:
            xload += f"                    x{r}[k] = A[(xo + xoff(u, k)) >> 2u];\n"
        xload += "                }\n            }\n"
    fma = "".join(f"            let rb{i}_{j} = n{j} * P({11 + i}u);\n" for i in range(n_w) for j in range(F))
    for r in range(R):
        fma += f"            if ({r}u < nr) {{\n"
        for i in range(n_w):
            for j in range(F):
                fma += f"                a{i}_{r}_{j} += unit_W{i}(rb{i}_{j}, u, x{r});\n"
        fma += "            }\n"
    reduce = "".join(
        f"        a{i}_{r}_{j} = subgroupAdd(a{i}_{r}_{j});\n" for i in range(n_w) for r in range(R) for j in range(F)
    )
    prologue = ""
    if norm:
        # each row's 1/rms first (the subgroup's sum of squares), folded into x as it is read
        for r in range(R):
            prologue += f"""        var inv{r} = 1.0;
        if ({r}u < nr) {{
            var q = 0.0;
            for (var e = 4u * lane; e < K; e += 4u * sgs) {{
                let v = A[(P(3u) + (m0 + {r}u) * P(4u) + e) >> 2u];
                q += dot(v, v);
            }}
            inv{r} = inverseSqrt(subgroupAdd(q) / f32(K) + PF(14u));
        }}
"""
    act = {"swiglu": "silu_(s0) * s1", "geglu": "gelu_(s0) * s1", None: "s0"}[glu]
    stores = ""
    for r in range(R):
        for j in range(F):
            s1 = f"let s1 = a1_{r}_{j};" if n_w > 1 else ""
            stores += f"""        if ({r}u < nr && lane == 0u && nn{j} < P(1u)) {{
            let col = nn{j} + P(10u);
            var s0 = a0_{r}_{j};
            {s1}
            if (P(7u) != 0u) {{ s0 += As(P(7u) - 1u + col); }}
            var y = {act};
            if (P(8u) != 0u) {{ y += As(P(8u) - 1u + (m0 + {r}u) * P(9u) + col); }}
            let yo = P(5u) + (m0 + {r}u) * P(6u) + col;
            A[yo >> 2u][yo & 3u] = y;
        }}
"""
    nn = "".join(f"    let nn{j} = nb + {j}u;\n    let n{j} = min(nn{j}, P(1u) - 1u);\n" for j in range(F))
    nw = ""
    if norm:
        nw = """fn nw(e: u32) -> vec4<f32> {
    if (P(13u) == 0u) { return vec4<f32>(1.0); }
    return A[(P(13u) - 1u + e) >> 2u];
}
"""
    return (
        HEADER
        + "@group(0) @binding(1) var<storage, read_write> A: array<vec4<f32>>;\n"
        + "fn As(i: u32) -> f32 { return A[i >> 2u][i & 3u]; }\n"
        + GRID
        + ACTIVATIONS
        + libs
        + f"fn xoff(u: u32, k: u32) -> u32 {{\n    {UNIT_XOFF[layout]}\n}}\n"
        + nw
        + f"""
@compute @workgroup_size({MV_WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32,
        @builtin(subgroup_size) sgs: u32, @builtin(subgroup_invocation_id) lane: u32) {{
  for (var fb = (t / sgs) * {F}u; fb < {per}u; fb += ({MV_WG}u / sgs) * {F}u) {{
    let nb = wg_linear(wid, nwg) * {per}u + fb;
    if (nb >= P(1u)) {{ break; }}
{nn}    let K = P(0u); let M = P(2u);
    let units = K / 32u;
    for (var m0 = 0u; m0 < M; m0 += {R}u) {{
        let nr = min({R}u, M - m0);
{decl}{prologue}        for (var u = lane; u < units; u += sgs) {{
{xload}{fma}        }}
{reduce}{stores}    }}
  }}
}}
"""
    )


TM, TN, TK = 64, 64, 32  # the tiled product's tile: rows x features x depth


def matmul(ggml_type: str) -> str:
    """y = x W^T (+ bias) (+ residual) for many rows: a 64x64 tile of y per workgroup of
    256 threads, each computing 4x4 of it; x and the decoded weights pass through shared
    memory 32 columns at a time. The 4x4 accumulators and the operands are named scalars
    (generated unrolled): an indexed private array would go to local memory on some GPUs.
    P as `matvec` (0-11); K must be a multiple of 32."""
    S = TK + 1
    acc_decl = "".join(f"    var c{i}{j} = 0.0;\n" for i in range(4) for j in range(4))
    inner = "".join(f"            let x{i} = xs[(ty * 4u + {i}u) * {S}u + k];\n" for i in range(4))
    inner += "".join(f"            let w{j} = ws[(tx * 4u + {j}u) * {S}u + k];\n" for j in range(4))
    inner += "".join(f"            c{i}{j} = fma(x{i}, w{j}, c{i}{j});\n" for i in range(4) for j in range(4))
    stores = ""
    for i in range(4):
        for j in range(4):
            stores += f"    store(m0 + ty * 4u + {i}u, n0 + tx * 4u + {j}u, c{i}{j});\n"
    return (
        HEADER
        + ARENA_F32
        + weight_lib(ggml_type, "W0", 2)
        + f"""
var<workgroup> xs: array<f32, {TM * S}>;
var<workgroup> ws: array<f32, {TN * S}>;
fn store(m: u32, n: u32, v: f32) {{
    if (m >= P(2u) || n >= P(1u)) {{ return; }}
    let col = n + P(10u);
    var y = v;
    if (P(7u) != 0u) {{ y += A[P(7u) - 1u + col]; }}
    if (P(8u) != 0u) {{ y += A[P(8u) - 1u + m * P(9u) + col]; }}
    A[P(5u) + m * P(6u) + col] = y;
}}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let K = P(0u); let N = P(1u); let M = P(2u);
    let xo = P(3u); let xstride = P(4u); let wrow = P(11u);
    let n0 = wid.x * {TN}u; let m0 = wid.y * {TM}u;
    let tx = t & 15u; let ty = t >> 4u;
{acc_decl}
    // the weight group this thread decodes: feature n0 + (t >> 2), columns 8 (t & 3)
    let wn = t >> 2u; let wg = t & 3u;
    let wvalid = n0 + wn < N;
    let wbase = (n0 + wn) * wrow;
    // the x values this thread loads: column t & 31, rows (t >> 5) + 8 i
    let xc = t & 31u; let xr = t >> 5u;
    for (var k0 = 0u; k0 < K; k0 += {TK}u) {{
        for (var i = 0u; i < 8u; i++) {{
            let r = xr + 8u * i;
            var v = 0.0;
            if (m0 + r < M) {{ v = A[xo + (m0 + r) * xstride + k0 + xc]; }}
            xs[r * {S}u + xc] = v;
        }}
        var w = V8(vec4<f32>(0.0), vec4<f32>(0.0));
        if (wvalid) {{ w = dq8_W0(wbase, k0 / 8u + wg); }}
        let wo = wn * {S}u + wg * 8u;
        ws[wo] = w.a.x; ws[wo + 1u] = w.a.y; ws[wo + 2u] = w.a.z; ws[wo + 3u] = w.a.w;
        ws[wo + 4u] = w.b.x; ws[wo + 5u] = w.b.y; ws[wo + 6u] = w.b.z; ws[wo + 7u] = w.b.w;
        workgroupBarrier();
        for (var k = 0u; k < {TK}u; k++) {{
{inner}        }}
        workgroupBarrier();
    }}
{stores}}}
"""
    )


# The activations, in f32: silu and the tanh GELU as ggml defines them (ggml's CPU
# path rounds GELU through an f16 table; the suite's tolerance for it says so), the erf
# GELU through a rational approximation of erf (|error| < 1.5e-7, Abramowitz & Stegun
# 7.1.26), as WGSL has no erf.
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
        default: { return max(x, 0.0); }
    }
}
"""


def elementwise() -> str:
    """One kernel for the elementwise ops, by opcode P(0): 0 unary (P(6) kind), 1 glu
    (P(6) 0 swiglu / 1 geglu), 2 add, 3 mul, 4 scale (P(7) s), 5 softcap (P(7) cap),
    6 copy of a row-strided view. P: 1 count, 2 out offset, 3 a offset, 4 b offset,
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


def norm() -> str:
    """rms_norm (P(0) = 0) and layer_norm (1) of rows: one workgroup a row. P: 1 rows,
    2 row length, 3 x offset, 4 out offset, 5 weight offset + 1, 6 bias offset + 1, 7 eps,
    8 residual offset + 1 (rows added to the result: an add fused in; 0 none). Sums in f32
    over the workgroup's tree."""
    return (
        HEADER
        + ARENA_F32
        + GRID
        + f"""
var<workgroup> red: array<f32, {NORM_WG}>;
fn wsum(v: f32, t: u32) -> f32 {{
    red[t] = v;
    workgroupBarrier();
    for (var s = {NORM_WG // 2}u; s > 0u; s >>= 1u) {{
        if (t < s) {{ red[t] += red[t + s]; }}
        workgroupBarrier();
    }}
    let r = red[0];
    workgroupBarrier();
    return r;
}}
@compute @workgroup_size({NORM_WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let r = wg_linear(wid, nwg);
    if (r >= P(1u)) {{ return; }}
    let n = P(2u);
    let x = P(3u) + r * n;
    var mean = 0.0;
    if (P(0u) == 1u) {{
        var s = 0.0;
        for (var i = t; i < n; i += {NORM_WG}u) {{ s += A[x + i]; }}
        mean = wsum(s, t) / f32(n);
    }}
    var q = 0.0;
    for (var i = t; i < n; i += {NORM_WG}u) {{ let d = A[x + i] - mean; q += d * d; }}
    let inv = inverseSqrt(wsum(q, t) / f32(n) + PF(7u));
    let o = P(4u) + r * n;
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


ROPE_BODY = """
fn corr_dim(beta: f32, n_dims: f32, n_orig: f32, base: f32) -> f32 {
    return n_dims * log(n_orig / (beta * 6.283185307179586)) / (2.0 * log(base));
}
var<workgroup> rred: array<f32, 64>;
fn xin(x: u32, j: u32, inv: f32, nw: u32) -> f32 {
    var v = bitcast<f32>(A[x + j]);
    if (inv != 1.0) { v *= inv; }
    if (nw != 0u) { v *= bitcast<f32>(A[nw - 1u + j]); }
    return v;
}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
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
        rred[t] = q;
        workgroupBarrier();
        for (var s = 32u; s > 0u; s >>= 1u) {
            if (t < s) { rred[t] += rred[t + s]; }
            workgroupBarrier();
        }
        inv = inverseSqrt(rred[0] / f32(dim) + PF(select(33u, 35u, second)));
        nw = P(select(32u, 34u, second));
    }
    var osc = 1.0;
    if (!second && P(36u) != 0u) { osc = PF(36u); }
    let nd = P(6u);
    for (var j = nd + t; j < dim; j += 64u) { A[o + j] = bitcast<u32>(xin(x, j, inv, nw) * osc); }
    let pos = f32(bitcast<i32>(A[P(5u) + row]));
    let ndf = f32(nd);
    let base = PF(8u); let fs = PF(9u); let ext = PF(10u);
    var mscale = PF(11u);
    var low = 0.0; var high = 0.0;
    if (ext != 0.0) {
        low = max(0.0, floor(corr_dim(PF(12u), ndf, f32(P(14u)), base)));
        high = min(ndf - 1.0, ceil(corr_dim(PF(13u), ndf, f32(P(14u)), base)));
        mscale *= 1.0 + 0.1 * log(1.0 / fs);
    }
    for (var i = t; i < nd / 2u; i += 64u) {
        var ff = 1.0;
        if (P(15u) != 0u) { ff = bitcast<f32>(A[P(15u) - 1u + i]); }
        let extrap = pos * pow(base, -2.0 * f32(i) / ndf) / ff;
        var theta = fs * extrap;
        if (ext != 0.0) {
            let ramp = 1.0 - clamp((f32(i) - low) / max(0.001, high - low), 0.0, 1.0);
            let mix = ramp * ext;
            theta = theta * (1.0 - mix) + extrap * mix;
        }
        let c = cos(theta) * mscale; let s = sin(theta) * mscale;
        var i0 = 2u * i; var i1 = 2u * i + 1u;
        if (P(7u) != 0u) { i0 = i; i1 = i + nd / 2u; }
        let x0 = xin(x, i0, inv, nw); let x1 = xin(x, i1, inv, nw);
        A[o + i0] = bitcast<u32>((x0 * c - x1 * s) * osc);
        A[o + i1] = bitcast<u32>((x0 * s + x1 * c) * osc);
    }
{KEYS}}
"""


def rope() -> str:
    """Rotary embedding of x [n, heads, dim]: a thread per rotated pair. P: 0 n*heads,
    1 heads, 2 dim, 3 x offset, 4 out offset, 5 positions offset, 6 n_dims, 7 neox,
    8 base, 9 freq_scale, 10 ext_factor, 11 attn_factor, 12 beta_fast, 13 beta_slow,
    14 n_ctx_orig, 15 freq_factors offset + 1. Dimensions past n_dims are copied."""
    return HEADER + ARENA_U32 + GRID + ROPE_BODY.replace("{TAIL}", "").replace("{KEYS}", "")


# The per-run sequence table in the arena (compile.py writes it): at P(seq) offset,
# n_seq entries each of slots, starts, first rows, row counts.
SEQ_FN = """
fn seq_of(r: u32, seq: u32, n_seq: u32) -> u32 {
    var s = 0u;
    for (var i = 0u; i < n_seq; i++) {
        if (r >= A[seq + 2u * n_seq + i]) { s = i; }
    }
    return s;
}
"""


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


def rope_kv(kv_f16: bool) -> str:
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
        + ROPE_BODY.replace("{TAIL}", tail).replace("{KEYS}", keys)
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


ATT_WG = 128  # threads of attention_lanes: cells a chunk


def attention_lanes(dv: int, dk: int) -> str:
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

    Parameters as `attention` ("f16")."""
    lanes = dv // 8
    subs = ATT_WG // lanes
    return (
        HEADER
        + ARENA_U32
        + GRID
        + SEQ_FN
        + f"""
@group(0) @binding(2) var<storage, read> K4: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> V4: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read> POS: array<i32>;
fn h8(w: vec4<u32>) -> V8 {{
    return V8(vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)), vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w)));
}}
var<workgroup> qs: array<vec4<f32>, {dk // 4}>;
var<workgroup> sc: array<f32, {ATT_WG}>;
var<workgroup> red: array<f32, {ATT_WG}>;
var<workgroup> part: array<vec4<f32>, {2 * ATT_WG}>;
var<workgroup> u_lo: u32;
var<workgroup> u_hi: u32;
var<workgroup> u_r: f32;
fn tree_max(v: f32, t: u32) -> f32 {{
    red[t] = v;
    workgroupBarrier();
    for (var s = {ATT_WG // 2}u; s > 0u; s >>= 1u) {{
        if (t < s) {{ red[t] = max(red[t], red[t + s]); }}
        workgroupBarrier();
    }}
    if (t == 0u) {{ u_r = red[0]; }}
    return workgroupUniformLoad(&u_r);
}}
fn tree_sum(v: f32, t: u32) -> f32 {{
    red[t] = v;
    workgroupBarrier();
    for (var s = {ATT_WG // 2}u; s > 0u; s >>= 1u) {{
        if (t < s) {{ red[t] = red[t] + red[t + s]; }}
        workgroupBarrier();
    }}
    if (t == 0u) {{ u_r = red[0]; }}
    return workgroupUniformLoad(&u_r);
}}
@compute @workgroup_size({ATT_WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let rh = wg_linear(wid, nwg);
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
    let qo = P(5u) + (r * nh + h) * {dk}u;
    for (var e = t; e < {dk // 4}u; e += {ATT_WG}u) {{
        qs[e] = vec4<f32>(bitcast<f32>(A[qo + 4u * e]), bitcast<f32>(A[qo + 4u * e + 1u]),
                          bitcast<f32>(A[qo + 4u * e + 2u]), bitcast<f32>(A[qo + 4u * e + 3u]));
    }}
    if (t == 0u) {{
        let c_hi = start + n;
        u_lo = select(0u, c_hi - cap, c_hi > cap); u_hi = c_hi;
    }}
    let lo = workgroupUniformLoad(&u_lo);
    let hi = workgroupUniformLoad(&u_hi);
    let head = (slot * nkv + g) * cap;
    let lane = t % {lanes}u; let sub = t / {lanes}u;
    var m = -3.0e38;
    var l = 0.0;
    var acc = V8(vec4<f32>(0.0), vec4<f32>(0.0));
    for (var c0 = lo; c0 < hi; c0 += {ATT_WG}u) {{
        let c = c0 + t;
        var score = -3.0e38;
        if (c < hi) {{
            let p = POS[slot * P(11u) + c];
            var vis = p >= 0 && p <= qpos;
            if (window > 0) {{ vis = vis && (qpos - p < window) && (p - qpos < window); }}
            if (vis) {{
                let kb = (head + c % cap) * {dk // 8}u;
                var d = 0.0;
                for (var e = 0u; e < {dk // 8}u; e++) {{
                    let k = h8(K4[kb + e]);
                    d += dot(qs[2u * e], k.a) + dot(qs[2u * e + 1u], k.b);
                }}
                d *= scale;
                if (cap_s > 0.0) {{
                    let u = d / cap_s;
                    d = cap_s * select(1.0 - 2.0 / (exp(2.0 * u) + 1.0), sign(u), abs(u) > 15.0);
                }}
                score = d;
            }}
        }}
        // a chunk without a visible cell changes nothing: its weights are 0, alpha 1
        let cm = tree_max(score, t);
        let mn = max(m, cm);
        let alpha = exp(m - mn);
        let pw = select(0.0, exp(score - mn), score > -1.0e38);
        sc[t] = pw;
        let ps = tree_sum(pw, t);
        l = l * alpha + ps;
        acc.a *= alpha; acc.b *= alpha;
        let cnt = min({ATT_WG}u, hi - c0);
        var j = sub;
        for (; j + {3 * subs}u < cnt; j += {4 * subs}u) {{
            let p0 = sc[j]; let p1 = sc[j + {subs}u]; let p2 = sc[j + {2 * subs}u]; let p3 = sc[j + {3 * subs}u];
            let v0 = h8(V4[(head + (c0 + j) % cap) * {lanes}u + lane]);
            let v1 = h8(V4[(head + (c0 + j + {subs}u) % cap) * {lanes}u + lane]);
            let v2 = h8(V4[(head + (c0 + j + {2 * subs}u) % cap) * {lanes}u + lane]);
            let v3 = h8(V4[(head + (c0 + j + {3 * subs}u) % cap) * {lanes}u + lane]);
            // a masked cell (weight 0) adds nothing even if its values are not finite
            if (p0 != 0.0) {{ acc.a += p0 * v0.a; acc.b += p0 * v0.b; }}
            if (p1 != 0.0) {{ acc.a += p1 * v1.a; acc.b += p1 * v1.b; }}
            if (p2 != 0.0) {{ acc.a += p2 * v2.a; acc.b += p2 * v2.b; }}
            if (p3 != 0.0) {{ acc.a += p3 * v3.a; acc.b += p3 * v3.b; }}
        }}
        for (; j < cnt; j += {subs}u) {{
            let pj = sc[j];
            let v = h8(V4[(head + (c0 + j) % cap) * {lanes}u + lane]);
            if (pj != 0.0) {{ acc.a += pj * v.a; acc.b += pj * v.b; }}
        }}
        m = mn;
        workgroupBarrier();
    }}
    part[2u * t] = acc.a; part[2u * t + 1u] = acc.b;
    workgroupBarrier();
    if (t < {lanes}u) {{
        var a = vec4<f32>(0.0); var b = vec4<f32>(0.0);
        for (var i = 0u; i < {subs}u; i++) {{ a += part[2u * (i * {lanes}u + t)]; b += part[2u * (i * {lanes}u + t) + 1u]; }}
        let inv = select(0.0, 1.0 / l, l > 0.0);
        let o = P(6u) + (r * nh + h) * {dv}u + 8u * t;
        a *= inv; b *= inv;
        A[o] = bitcast<u32>(a.x); A[o + 1u] = bitcast<u32>(a.y); A[o + 2u] = bitcast<u32>(a.z); A[o + 3u] = bitcast<u32>(a.w);
        A[o + 4u] = bitcast<u32>(b.x); A[o + 5u] = bitcast<u32>(b.y); A[o + 6u] = bitcast<u32>(b.z); A[o + 7u] = bitcast<u32>(b.w);
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
        + """
var<workgroup> bv: array<f32, 256>;
var<workgroup> bi: array<u32, 256>;
fn better(v: f32, i: u32, w: f32, j: u32) -> bool { return v > w || (v == w && i < j); }
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
        bv[t] = v; bi[t] = vi;
        workgroupBarrier();
        for (var s = 128u; s > 0u; s >>= 1u) {
            if (t < s) {
                let j = bi[t + s];
                if (j != 0xffffffffu && (bi[t] == 0xffffffffu || better(bv[t + s], j, bv[t], bi[t]))) {
                    bv[t] = bv[t + s]; bi[t] = j;
                }
            }
            workgroupBarrier();
        }
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


SELECT_WG = 256  # threads of the two-stage argmax's workgroups


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
        + f"""
var<workgroup> bv: array<f32, {SELECT_WG}>;
var<workgroup> bi: array<u32, {SELECT_WG}>;
fn better(v: f32, i: u32, w: f32, j: u32) -> bool {{ return v > w || (v == w && i < j); }}
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
        + f"""
var<workgroup> bv: array<f32, {SELECT_WG}>;
var<workgroup> bi: array<u32, {SELECT_WG}>;
fn better(v: f32, i: u32, w: f32, j: u32) -> bool {{ return v > w || (v == w && i < j); }}
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


# -- recurrent state and experts -------------------------------------------------------------------

CONV_MAX = 16  # conv1d_causal: the longest kernel (LFM2's is 3, Mamba-2's 4)


def conv_causal() -> str:
    """LFM2's / Mamba-2's depthwise causal convolution, ggml_ssm_conv: a thread per
    (sequence, channel) walks its sequence's rows in order, the window starting from the
    slot's carried ``kernel - 1`` inputs (binding 2: [slot, kernel - 1, channels]), and
    writes the last ``kernel - 1`` inputs back. Each output is the same sum in the same
    order whatever the other sequences of the batch, so a decode batch row is its one-row
    pass. P: 0 n_seq * channels, 1 channels, 2 kernel, 3 x offset, 4 x row stride, 5 out
    offset, 6 weight offset ([channels, kernel], f32 in the arena), 7 seq table offset,
    8 n_seq."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + f"""
@group(0) @binding(2) var<storage, read_write> S: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let i = wg_linear(wid, nwg) * 64u + t;
    if (i >= P(0u)) {{ return; }}
    let ch = P(1u); let d = P(2u);
    let s = i / ch; let c = i % ch;
    let seq = P(7u); let n_seq = P(8u);
    let slot = A[seq + s]; let r0 = A[seq + 2u * n_seq + s]; let n = A[seq + 3u * n_seq + s];
    let sb = slot * (d - 1u) * ch + c;
    var win: array<f32, {CONV_MAX}>;
    for (var j = 0u; j + 1u < d; j++) {{ win[j] = S[sb + j * ch]; }}
    var w: array<f32, {CONV_MAX}>;
    for (var j = 0u; j < d; j++) {{ w[j] = bitcast<f32>(A[P(6u) + c * d + j]); }}
    for (var r = r0; r < r0 + n; r++) {{
        win[d - 1u] = bitcast<f32>(A[P(3u) + r * P(4u) + c]);
        var y = 0.0;
        for (var j = 0u; j < d; j++) {{ y += w[j] * win[j]; }}
        A[P(5u) + r * ch + c] = bitcast<u32>(y);
        for (var j = 0u; j + 1u < d; j++) {{ win[j] = win[j + 1u]; }}
    }}
    for (var j = 0u; j + 1u < d; j++) {{ S[sb + j * ch] = win[j]; }}
}}
"""
    )


# Mixture of experts (cera.ops.moe, llama.cpp's build_moe_ffn) in four dispatches: router
# logits, routing (probabilities, top k, weights), the chosen experts' gated products, and
# their weighted sum through the down projections. Every output is one thread's sum over
# its row in a fixed order (no reduction across threads, no barriers), so a row of a batch
# is bit for bit its one-row pass whichever experts the other rows chose.


def moe_logits(ggml_type: str) -> str:
    """Router logits: a thread per (row, expert). P: 0 rows * experts, 1 experts, 2 K,
    3 x offset, 4 x row stride, 5 logits offset ([rows, experts]), 6 router row bytes."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + weight_lib(ggml_type, "W0", 2)
        + """
fn xv(o: u32) -> vec4<f32> { return vec4<f32>(bitcast<f32>(A[o]), bitcast<f32>(A[o + 1u]), bitcast<f32>(A[o + 2u]), bitcast<f32>(A[o + 3u])); }
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = wg_linear(wid, nwg) * 64u + t;
    if (i >= P(0u)) { return; }
    let r = i / P(1u); let e = i % P(1u);
    let xo = P(3u) + r * P(4u);
    var acc = 0.0;
    for (var g = 0u; g < P(2u) / 8u; g++) {
        let w = dq8_W0(e * P(6u), g);
        acc += dot(xv(xo + g * 8u), w.a) + dot(xv(xo + g * 8u + 4u), w.b);
    }
    A[P(5u) + i] = bitcast<u32>(acc);
}
"""
    )


def moe_route() -> str:
    """Routing, a thread per row: probabilities from the logits (softmax, or sigmoid),
    in place; the k experts of largest probability plus selection bias (ties to the lower
    index, as a stable sort), picked one after another each below the last in (value,
    index) order; their probabilities as weights, renormalised to sum 1 when asked and
    scaled. P: 0 rows, 1 experts, 2 k, 3 logits offset, 4 ids offset ([rows, k] u32),
    5 weights offset ([rows, k]), 6 gating (0 softmax, 1 sigmoid), 7 selection bias
    offset + 1 (0: none), 8 renormalise, 9 scale (f32)."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + """
fn F(o: u32) -> f32 { return bitcast<f32>(A[o]); }
fn sel(o: u32, e: u32) -> f32 {
    var v = F(o + e);
    if (P(7u) != 0u) { v += F(P(7u) - 1u + e); }
    return v;
}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r = wg_linear(wid, nwg) * 64u + t;
    if (r >= P(0u)) { return; }
    let E = P(1u); let k = P(2u);
    let lo = P(3u) + r * E;
    if (P(6u) == 0u) {
        var mx = F(lo);
        for (var e = 1u; e < E; e++) { mx = max(mx, F(lo + e)); }
        var sum = 0.0;
        for (var e = 0u; e < E; e++) { let p = exp(F(lo + e) - mx); A[lo + e] = bitcast<u32>(p); sum += p; }
        for (var e = 0u; e < E; e++) { A[lo + e] = bitcast<u32>(F(lo + e) / sum); }
    } else {
        for (var e = 0u; e < E; e++) { A[lo + e] = bitcast<u32>(1.0 / (1.0 + exp(-F(lo + e)))); }
    }
    var last_v = 0.0; var last_e = 0u;
    var total = 0.0;
    for (var j = 0u; j < k; j++) {
        var best = 0u; var best_v = 0.0; var found = false;
        for (var e = 0u; e < E; e++) {
            let v = sel(lo, e);
            let below = j == 0u || v < last_v || (v == last_v && e > last_e);
            if (below && (!found || v > best_v)) { best = e; best_v = v; found = true; }
        }
        last_v = best_v; last_e = best;
        A[P(4u) + r * k + j] = best;
        let w = F(lo + best);
        A[P(5u) + r * k + j] = bitcast<u32>(w);
        total += w;
    }
    for (var j = 0u; j < k; j++) {
        var w = F(P(5u) + r * k + j);
        if (P(8u) != 0u) { w = w / total; }
        A[P(5u) + r * k + j] = bitcast<u32>(w * PF(9u));
    }
}
"""
    )


def moe_up(gate_type: str, up_type: str) -> str:
    """The chosen experts' gated products, a thread per (row, choice, feature):
    h = act(x . gate_e[f]) * (x . up_e[f]), the expert's rows following one another in
    the [dim, ff, experts] tensors. P: 0 rows * k * ff, 1 ff, 2 K, 3 x offset, 4 x row
    stride, 5 ids offset, 6 h offset ([rows, k, ff]), 7 gate row bytes, 8 up row bytes,
    9 activation (act_'s code), 10 k."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + ACTIVATIONS
        + weight_lib(gate_type, "W0", 2)
        + weight_lib(up_type, "W1", 3)
        + """
fn xv(o: u32) -> vec4<f32> { return vec4<f32>(bitcast<f32>(A[o]), bitcast<f32>(A[o + 1u]), bitcast<f32>(A[o + 2u]), bitcast<f32>(A[o + 3u])); }
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = wg_linear(wid, nwg) * 64u + t;
    if (i >= P(0u)) { return; }
    let ff = P(1u);
    let rj = i / ff; let f = i % ff;
    let r = rj / P(10u);
    let row = A[P(5u) + rj] * ff + f;
    let xo = P(3u) + r * P(4u);
    var a = 0.0; var b = 0.0;
    for (var g = 0u; g < P(2u) / 8u; g++) {
        let xa = xv(xo + g * 8u); let xb = xv(xo + g * 8u + 4u);
        let wg = dq8_W0(row * P(7u), g);
        let wu = dq8_W1(row * P(8u), g);
        a += dot(xa, wg.a) + dot(xb, wg.b);
        b += dot(xa, wu.a) + dot(xb, wu.b);
    }
    A[P(6u) + i] = bitcast<u32>(act_(P(9u), a) * b);
}
"""
    )


def moe_down(ggml_type: str) -> str:
    """The experts' down projections summed with their weights, a thread per (row, output
    feature), the choices in order. P: 0 rows * D, 1 D, 2 ff, 3 k, 4 ids offset, 5 weights
    offset, 6 h offset, 7 out offset, 8 down row bytes."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + weight_lib(ggml_type, "W0", 2)
        + """
fn xv(o: u32) -> vec4<f32> { return vec4<f32>(bitcast<f32>(A[o]), bitcast<f32>(A[o + 1u]), bitcast<f32>(A[o + 2u]), bitcast<f32>(A[o + 3u])); }
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = wg_linear(wid, nwg) * 64u + t;
    if (i >= P(0u)) { return; }
    let D = P(1u); let ff = P(2u); let k = P(3u);
    let r = i / D; let o = i % D;
    var y = 0.0;
    for (var j = 0u; j < k; j++) {
        let row = A[P(4u) + r * k + j] * D + o;
        let ho = P(6u) + (r * k + j) * ff;
        var acc = 0.0;
        for (var g = 0u; g < ff / 8u; g++) {
            let w = dq8_W0(row * P(8u), g);
            acc += dot(xv(ho + g * 8u), w.a) + dot(xv(ho + g * 8u + 4u), w.b);
        }
        y += bitcast<f32>(A[P(5u) + r * k + j]) * acc;
    }
    A[P(7u) + i] = bitcast<u32>(y);
}
"""
    )


def ssm_scan(d_state: int) -> str:
    """Mamba-2's selective scan (ggml_ssm_scan, a scalar A per head): a thread per
    (sequence, head, head element) keeps its row of the state (``d_state`` values) in
    registers and walks the sequence's tokens in order: dt' = softplus(dt), state = state *
    exp(dt' A) + dt' x B, y = state . C; the row goes back to the slot (binding 2:
    [slot, heads, head_dim, d_state]) at the end. No thread reads another's values, so a
    decode batch row is its one-row pass. P: 0 n_seq * heads * head_dim, 1 heads,
    2 head_dim, 3 groups, 4 x offset, 5 dt offset, 6 A offset, 7 B offset, 8 C offset,
    9 y offset, 10 seq table offset, 11 n_seq."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + f"""
@group(0) @binding(2) var<storage, read_write> S: array<f32>;
fn F(o: u32) -> f32 {{ return bitcast<f32>(A[o]); }}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let i = wg_linear(wid, nwg) * 64u + t;
    if (i >= P(0u)) {{ return; }}
    let H = P(1u); let hd = P(2u); let G = P(3u);
    let p = i % hd; let h = (i / hd) % H; let s = i / (hd * H);
    let g = h / (H / G);
    let seq = P(10u); let n_seq = P(11u);
    let slot = A[seq + s]; let r0 = A[seq + 2u * n_seq + s]; let n = A[seq + 3u * n_seq + s];
    let sb = ((slot * H + h) * hd + p) * {d_state}u;
    var st: array<f32, {d_state}>;
    for (var j = 0u; j < {d_state}u; j++) {{ st[j] = S[sb + j]; }}
    let a = F(P(6u) + h);
    for (var r = r0; r < r0 + n; r++) {{
        let dt0 = F(P(5u) + r * H + h);
        let dt = select(log(1.0 + exp(min(dt0, 20.0))), dt0, dt0 > 20.0);
        let decay = exp(dt * a);
        let xd = dt * F(P(4u) + (r * H + h) * hd + p);
        let bo = P(7u) + (r * G + g) * {d_state}u;
        let co = P(8u) + (r * G + g) * {d_state}u;
        var y = 0.0;
        for (var j = 0u; j < {d_state}u; j++) {{
            st[j] = st[j] * decay + xd * F(bo + j);
            y += st[j] * F(co + j);
        }}
        A[P(9u) + (r * H + h) * hd + p] = bitcast<u32>(y);
    }}
    for (var j = 0u; j < {d_state}u; j++) {{ S[sb + j] = st[j]; }}
}}
"""
    )


# -- encoder-decoder families ---------------------------------------------------------------------


def im2col() -> str:
    """The columns of a full 1-D convolution (cera.ops.conv1d), a thread per value:
    cols[t, c * kernel + i] = x[t * stride + i - padding, c], zero outside x, so that the
    convolution is the product of cols with the weight as the file holds it ([out] rows
    of in * kernel values, c major). P: 0 out frames * in * kernel, 1 in * kernel,
    2 kernel, 3 stride, 4 padding, 5 in frames, 6 x offset, 7 x row stride, 8 cols
    offset."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + """
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = wg_linear(wid, nwg) * 256u + t;
    if (i >= P(0u)) { return; }
    let width = P(1u); let kernel = P(2u);
    let row = i / width; let j = i % width;
    let c = j / kernel; let tap = j % kernel;
    // the source frame, shifted by the padding so that it stays unsigned
    let src = row * P(3u) + tap;
    var v = 0u;
    if (src >= P(4u) && src - P(4u) < P(5u)) { v = A[P(6u) + (src - P(4u)) * P(7u) + c]; }
    A[P(8u) + i] = v;
}
"""
    )


def store_cross() -> str:
    """Each sequence's keys and values ([rows, kv heads, dim], rows from its first)
    into its slot of a cross-attention memory (bindings 2 and 3: f32 [slot, row, kv
    heads, dim]): a thread per (row, element) of the wider of the two rows. P: 0 rows *
    that width, 1 k row width (kv heads * dk), 2 v row width, 3 k offset, 4 v offset,
    5 memory rows per slot, 6 seq table offset, 7 n_seq."""
    return (
        HEADER
        + ARENA_U32
        + GRID
        + SEQ_FN
        + """
@group(0) @binding(2) var<storage, read_write> K: array<u32>;
@group(0) @binding(3) var<storage, read_write> V: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = wg_linear(wid, nwg) * 64u + t;
    if (i >= P(0u)) { return; }
    let kw = P(1u); let vw = P(2u);
    let w = max(kw, vw);
    let r = i / w; let e = i % w;
    let seq = P(6u); let n_seq = P(7u);
    let s = seq_of(r, seq, n_seq);
    let slot = A[seq + s]; let r0 = A[seq + 2u * n_seq + s];
    let cell = slot * P(5u) + r - r0;
    if (e < kw) { K[cell * kw + e] = A[P(3u) + r * kw + e]; }
    if (e < vw) { V[cell * vw + e] = A[P(4u) + r * vw + e]; }
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
