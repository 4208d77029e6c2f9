"""Reading GGUF blocks: one decoder per type, `dq8_<W>(row, g)`, eight elements at a time."""

from __future__ import annotations

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
    let w0 = rd32_{W}(o); let w1 = rd32_{W}(o + 4u); let w2 = rd32_{W}(o + 8u); let w3 = rd32_{W}(o + 12u);
    return V8(bitcast<vec4<f32>>(vec4<u32>(w0 << 16u, w0 & 0xffff0000u, w1 << 16u, w1 & 0xffff0000u)),
              bitcast<vec4<f32>>(vec4<u32>(w2 << 16u, w2 & 0xffff0000u, w3 << 16u, w3 & 0xffff0000u)));
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
    let a = vec4<f32>(f32(IQ4NL_{W}[u0 & 15u]), f32(IQ4NL_{W}[(u0 >> 8u) & 15u]),
                      f32(IQ4NL_{W}[(u0 >> 16u) & 15u]), f32(IQ4NL_{W}[(u0 >> 24u) & 15u]));
    let b = vec4<f32>(f32(IQ4NL_{W}[u1 & 15u]), f32(IQ4NL_{W}[(u1 >> 8u) & 15u]),
                      f32(IQ4NL_{W}[(u1 >> 16u) & 15u]), f32(IQ4NL_{W}[(u1 >> 24u) & 15u]));
    return V8(a * d, b * d);
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
