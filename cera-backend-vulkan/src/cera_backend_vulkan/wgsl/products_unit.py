"""The unit row kernel: 32 weights a lane a step, x in 16-byte loads (compile.ROW_KERNELS unit)."""

from __future__ import annotations

import re

from .blocks import weight_lib
from .common import ACTIVATIONS, GRID, HEADER, workgroup_sum
from .products import MV_WG, SEG_BASE, _reduce_onepass

# -- the unit kernel: 32 weights a lane, x in 16-byte loads ------------------------------------

# A "unit" is 32 elements of a row that one lane decodes with one read of their block's
# header: a whole block of the 32-element types, an eighth of a K-quant super-block. Each
# layout says which 8 runs of 4 elements (x's 16-byte loads) a unit takes, and each type
# with a layout of its own has a decoder ``unit_<W>(row_byte_offset, u, x) -> f32`` that
# returns the unit's dot product with those 8 vectors of x. Types without one go through
# their dq8 decoder four times (the "lin" layout: 32 consecutive elements).
UNIT_LAYOUT = {"Q4_K": "k4", "Q6_K": "k6", "Q4_0": "lin", "Q4_1": "lin", "Q5_0": "lin", "Q5_1": "lin", "Q8_0": "lin"}
# types whose unit decoder reads the weight as 16-byte words (array<vec4<u32>>: rows and
# blocks at multiples of 16 bytes, as Q4_K's 144-byte blocks are)
UNIT_VEC4 = {"Q4_K"}
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
# Small integers to f32 (the decoders' values: nibbles, 6-bit scales, signed bytes),
# through WGSL's conversions.
INT_FLOAT = """
fn u2f4(v: vec4<u32>) -> vec4<f32> { return vec4<f32>(v); }
fn u2f2(v: vec2<u32>) -> vec2<f32> { return vec2<f32>(v); }
fn i2f4(v: vec4<i32>) -> vec4<f32> { return vec4<f32>(v); }
"""


# Each decoder's reads of its unit (the words of its block, the scales), shared by its
# float form (UNIT_DECODERS) and its integer form (UNIT_INT_DECODERS)
UNIT_READS = {
    "Q4_K": """    // the weight bound as 16-byte words (UNIT_VEC4): the header (d, dmin, 12 bytes of
    // scales) in one load, the unit's 16 bytes of nibbles in another
    let b = u >> 3u; let p = u & 7u; let j = p >> 1u;
    let o = (rb + 144u * b) >> 4u;
    let h = {W}[o];
    let dm = unpack2x16float(h.x);
    let s0 = h.y; let s1 = h.z; let s2 = h.w;
    let qv = {W}[o + 1u + 2u * j + (p & 1u)];
""",
    "Q6_K": """    let b = u >> 3u; let p = u & 7u; let n = p >> 2u; let l = 8u * (p & 3u);
    let blk = rb + 210u * b; let i = blk >> 2u; let odd = (blk & 2u) != 0u;
    let qa = i + 16u * n + (l >> 2u); let qc = qa + 8u; let qh = i + 32u + 8u * n + (l >> 2u);
    let qs = i + 48u + 2u * n;
    let wa0 = {W}[qa]; let wa1 = {W}[qa + 1u]; let wa2 = {W}[qa + 2u];
    let wc0 = {W}[qc]; let wc1 = {W}[qc + 1u]; let wc2 = {W}[qc + 2u];
    let wh0 = {W}[qh]; let wh1 = {W}[qh + 1u]; let wh2 = {W}[qh + 2u];
    let ws0 = {W}[qs]; let ws1 = {W}[qs + 1u]; let ws2 = {W}[qs + 2u];
    let wd = {W}[i + 52u];
    let a0 = fa_{W}(wa0, wa1, odd); let a1 = fa_{W}(wa1, wa2, odd);
    let c0 = fa_{W}(wc0, wc1, odd); let c1 = fa_{W}(wc1, wc2, odd);
    let h0 = fa_{W}(wh0, wh1, odd); let h1 = fa_{W}(wh1, wh2, odd);
    // the half's 8 scale bytes; this unit's four are bytes l / 16 + 0, 2, 4, 6 of them
    let sw0 = fa_{W}(ws0, ws1, odd) >> (8u * (l >> 4u)); let sw1 = fa_{W}(ws1, ws2, odd) >> (8u * (l >> 4u));
    let d = unpack2x16float(select(wd, wd >> 16u, odd)).x;
    let sc = i2f4(vec4<i32>(vec4<u32>(sw0, sw0 >> 16u, sw1, sw1 >> 16u) << vec4<u32>(24u)) >> vec4<u32>(24u));
""",
    # 18 bytes: f16 d, 16 bytes of nibbles (element j: low nibble of byte j, j + 16: high)
    "Q4_0": """    let o = rb + 18u * u; let i = o >> 2u; let odd = (o & 2u) != 0u;
    let w0 = {W}[i]; let w1 = {W}[i + 1u]; let w2 = {W}[i + 2u]; let w3 = {W}[i + 3u]; let w4 = {W}[i + 4u];
    let d = unpack2x16float(select(w0, w0 >> 16u, odd)).x;
    let q0 = fw(w0, w1, odd); let q1 = fw(w1, w2, odd); let q2 = fw(w2, w3, odd); let q3 = fw(w3, w4, odd);
""",
    # 20 bytes: f16 d, f16 m, 16 bytes of nibbles
    "Q4_1": """    let i = (rb + 20u * u) >> 2u;
    let dm = unpack2x16float({W}[i]);
    let q0 = {W}[i + 1u]; let q1 = {W}[i + 2u]; let q2 = {W}[i + 3u]; let q3 = {W}[i + 4u];
""",
    # 22 bytes: f16 d, 32 high bits (element e's fifth bit is bit e), 16 bytes of nibbles
    "Q5_0": """    let o = rb + 22u * u; let i = o >> 2u; let odd = (o & 2u) != 0u;
    let w0 = {W}[i]; let w1 = {W}[i + 1u]; let w2 = {W}[i + 2u]; let w3 = {W}[i + 3u]; let w4 = {W}[i + 4u];
    let w5 = {W}[i + 5u];
    let d = unpack2x16float(select(w0, w0 >> 16u, odd)).x;
    let h = fw(w0, w1, odd);
    let q0 = fw(w1, w2, odd); let q1 = fw(w2, w3, odd); let q2 = fw(w3, w4, odd); let q3 = fw(w4, w5, odd);
""",
    # 24 bytes: f16 d, f16 m, 32 high bits, 16 bytes of nibbles
    "Q5_1": """    let i = (rb + 24u * u) >> 2u;
    let dm = unpack2x16float({W}[i]); let h = {W}[i + 1u];
    let q0 = {W}[i + 2u]; let q1 = {W}[i + 3u]; let q2 = {W}[i + 4u]; let q3 = {W}[i + 5u];
""",
    # 34 bytes: f16 d, 32 signed bytes. Written out: no private arrays, which the H200's
    # compiler kept in local memory (a loop over `var w: array<u32, 9>` made the Q8_0
    # outputs 6x slower)
    "Q8_0": """    let o = rb + 34u * u; let i = o >> 2u; let odd = (o & 2u) != 0u;
    let w0 = {W}[i]; let w1 = {W}[i + 1u]; let w2 = {W}[i + 2u]; let w3 = {W}[i + 3u]; let w4 = {W}[i + 4u];
    let w5 = {W}[i + 5u]; let w6 = {W}[i + 6u]; let w7 = {W}[i + 7u]; let w8 = {W}[i + 8u];
    let d = unpack2x16float(select(w0, w0 >> 16u, odd)).x;
""",
}
# functions a decoder's reads or both its forms call, before them
UNIT_HELPERS = {
    "Q4_K": """
fn kbyte_{W}(s0: u32, s1: u32, s2: u32, i: u32) -> u32 {
    let w = select(select(s2, s1, i < 8u), s0, i < 4u);
    return (w >> (8u * (i & 3u))) & 255u;
}
fn ksm_{W}(s0: u32, s1: u32, s2: u32, s: u32) -> vec2<f32> {
    if (s < 4u) {
        return u2f2(vec2<u32>(kbyte_{W}(s0, s1, s2, s) & 63u, kbyte_{W}(s0, s1, s2, s + 4u) & 63u));
    }
    let hi = kbyte_{W}(s0, s1, s2, s + 4u);
    return u2f2(vec2<u32>((hi & 15u) | ((kbyte_{W}(s0, s1, s2, s - 4u) >> 6u) << 4u),
                          (hi >> 4u) | ((kbyte_{W}(s0, s1, s2, s) >> 6u) << 4u)));
}
""",
    # Q6_K: a 210-byte block starts 2 bytes into a word every other block; each 8-byte
    # span is read as the three words from its 4-byte floor and a select, not through rd32,
    # which branches per lane on the alignment (on the H200 this took Qwen2.5 1.5B's Q6_K
    # output product in 175 us, not 209, and its Q6_K down products in 28.5 us, not 35.6)
    "Q6_K": """
// four values: low nibbles of ql from bit sl, two high bits of qh from bit sh
fn q6v_{W}(ql: u32, qh: u32, sl: u32, sh: u32) -> vec4<f32> {
    let m = vec4<u32>(0u, 8u, 16u, 24u);
    return u2f4(((vec4<u32>(ql) >> (m + vec4<u32>(sl))) & vec4<u32>(15u))
                | (((vec4<u32>(qh) >> (m + vec4<u32>(sh))) & vec4<u32>(3u)) << vec4<u32>(4u))) - 32.0;
}
fn fa_{W}(a: u32, b: u32, odd: bool) -> u32 { return select(a, (a >> 16u) | (b << 16u), odd); }
""",
}
# the float forms' arithmetic, after the reads
_FLOAT_BODY = {
    "Q4_K": """    let q0 = qv.x; let q1 = qv.y; let q2 = qv.z; let q3 = qv.w;
    let lo = ksm_{W}(s0, s1, s2, 2u * j); let hi = ksm_{W}(s0, s1, s2, 2u * j + 1u);
    let m = vec4<u32>(0u, 8u, 16u, 24u); let f = vec4<u32>(15u);
    let dl = dot(x[0], u2f4((vec4<u32>(q0) >> m) & f)) + dot(x[1], u2f4((vec4<u32>(q1) >> m) & f))
           + dot(x[2], u2f4((vec4<u32>(q2) >> m) & f)) + dot(x[3], u2f4((vec4<u32>(q3) >> m) & f));
    let m4 = m + vec4<u32>(4u);
    let dh = dot(x[4], u2f4((vec4<u32>(q0) >> m4) & f)) + dot(x[5], u2f4((vec4<u32>(q1) >> m4) & f))
           + dot(x[6], u2f4((vec4<u32>(q2) >> m4) & f)) + dot(x[7], u2f4((vec4<u32>(q3) >> m4) & f));
    let one = vec4<f32>(1.0);
    let xl = dot(x[0] + x[1] + x[2] + x[3], one); let xh = dot(x[4] + x[5] + x[6] + x[7], one);
    return dm.x * (lo.x * dl + hi.x * dh) - dm.y * (lo.y * xl + hi.y * xh);
""",
    "Q6_K": """    let d0 = dot(x[0], q6v_{W}(a0, h0, 0u, 0u)) + dot(x[1], q6v_{W}(a1, h1, 0u, 0u));
    let d1 = dot(x[2], q6v_{W}(c0, h0, 0u, 2u)) + dot(x[3], q6v_{W}(c1, h1, 0u, 2u));
    let d2 = dot(x[4], q6v_{W}(a0, h0, 4u, 4u)) + dot(x[5], q6v_{W}(a1, h1, 4u, 4u));
    let d3 = dot(x[6], q6v_{W}(c0, h0, 4u, 6u)) + dot(x[7], q6v_{W}(c1, h1, 4u, 6u));
    return d * dot(sc, vec4<f32>(d0, d1, d2, d3));
""",
    "Q4_0": """    let s = dot_nib(x, q0, q1, q2, q3);
    return d * (s - 8.0 * xsum(x));
""",
    "Q4_1": """    let s = dot_nib(x, q0, q1, q2, q3);
    return dm.x * s + dm.y * xsum(x);
""",
    "Q5_0": """    let s = dot_nib5(x, q0, q1, q2, q3, h);
    return d * (s - 16.0 * xsum(x));
""",
    "Q5_1": """    let s = dot_nib5(x, q0, q1, q2, q3, h);
    return dm.x * s + dm.y * xsum(x);
""",
    "Q8_0": """    return d * (dot(x[0], i8x4(fw(w0, w1, odd))) + dot(x[1], i8x4(fw(w1, w2, odd)))
              + dot(x[2], i8x4(fw(w2, w3, odd))) + dot(x[3], i8x4(fw(w3, w4, odd)))
              + dot(x[4], i8x4(fw(w4, w5, odd))) + dot(x[5], i8x4(fw(w5, w6, odd)))
              + dot(x[6], i8x4(fw(w6, w7, odd))) + dot(x[7], i8x4(fw(w7, w8, odd))));
""",
}
_SIGNATURE = "fn unit_{W}(rb: u32, u: u32, x: array<vec4<f32>, 8>) -> f32 {\n"
UNIT_DECODERS = {
    t: UNIT_HELPERS.get(t, "\n") + _SIGNATURE + UNIT_READS[t] + body + "}\n" for t, body in _FLOAT_BODY.items()
}
# The 32-element block types: a unit is a whole block, read once as the fewest aligned
# words that cover it. Blocks of 18, 22 and 34 bytes start at 2-byte offsets every other
# block: the words are read from the block's 4-byte floor and the block's own bytes taken
# with a funnel shift where it starts half-way into the first word (``odd``).
UNIT_BLOCK_WORDS = """
// bytes 2 + 4i .. 5 + 4i of a block (the words after its 2-byte f16), from words i and
// i + 1 counted from the block's 4-byte floor; odd: the block starts 2 bytes into it
fn fw(a: u32, b: u32, odd: bool) -> u32 { return select((a >> 16u) | (b << 16u), b, odd); }
fn nib4(q: u32, s: u32) -> vec4<f32> {
    return u2f4((vec4<u32>(q) >> (vec4<u32>(0u, 8u, 16u, 24u) + vec4<u32>(s))) & vec4<u32>(15u));
}
fn bits4(h: u32, s: u32) -> vec4<f32> {
    return u2f4(((vec4<u32>(h) >> (vec4<u32>(0u, 1u, 2u, 3u) + vec4<u32>(s))) & vec4<u32>(1u)) << vec4<u32>(4u));
}
fn i8x4(q: u32) -> vec4<f32> {
    return i2f4(bitcast<vec4<i32>>(vec4<u32>(q) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
}
// x against 32 nibbles (low nibbles of q0..q3, then high), with a fifth bit from h
fn dot_nib(x: array<vec4<f32>, 8>, q0: u32, q1: u32, q2: u32, q3: u32) -> f32 {
    return dot(x[0], nib4(q0, 0u)) + dot(x[1], nib4(q1, 0u)) + dot(x[2], nib4(q2, 0u)) + dot(x[3], nib4(q3, 0u))
         + dot(x[4], nib4(q0, 4u)) + dot(x[5], nib4(q1, 4u)) + dot(x[6], nib4(q2, 4u)) + dot(x[7], nib4(q3, 4u));
}
fn dot_nib5(x: array<vec4<f32>, 8>, q0: u32, q1: u32, q2: u32, q3: u32, h: u32) -> f32 {
    return dot(x[0], nib4(q0, 0u) + bits4(h, 0u)) + dot(x[1], nib4(q1, 0u) + bits4(h, 4u))
         + dot(x[2], nib4(q2, 0u) + bits4(h, 8u)) + dot(x[3], nib4(q3, 0u) + bits4(h, 12u))
         + dot(x[4], nib4(q0, 4u) + bits4(h, 16u)) + dot(x[5], nib4(q1, 4u) + bits4(h, 20u))
         + dot(x[6], nib4(q2, 4u) + bits4(h, 24u)) + dot(x[7], nib4(q3, 4u) + bits4(h, 28u));
}
fn xsum(x: array<vec4<f32>, 8>) -> f32 {
    return dot(x[0] + x[1] + x[2] + x[3] + x[4] + x[5] + x[6] + x[7], vec4<f32>(1.0));
}
"""
# The integer forms of the decoders (matvec_unit's ``dot`` "i8"): x's unit quantized to
# 8 bits (xq_0..xq_7, four values a word, and its step dx: matvec_unit's xload), the
# weights' small integers taken four at a time as bytes of a word, and dot4I8Packed for
# the products (one instruction for four where the float form converts and multiplies
# each). The weights' offsets and minimums (Q4_0's 8, Q5_0's 16, Q6_K's 32, Q4_1's and
# Q4_K's minimums) take the quantized x's sums, not the exact ones: the rounding errors
# then cancel as they do in the centred weights (with exact sums the error on the
# 32-element types was three times the CPU backend's, which rounds x the same way; with
# them it is the same). Other values than the float form's (x rounded to 8 bits a unit,
# as llama.cpp's integer products round it); the same whatever the batch. The types
# without one run their float decoder.
_INT_BODY = {
    "Q4_K": """    let lo = ksm_{W}(s0, s1, s2, 2u * j); let hi = ksm_{W}(s0, s1, s2, 2u * j + 1u);
    let f = 0x0F0F0F0Fu;
    let il = dot4I8Packed(qv.x & f, xq[0]) + dot4I8Packed(qv.y & f, xq[1])
           + dot4I8Packed(qv.z & f, xq[2]) + dot4I8Packed(qv.w & f, xq[3]);
    let ih = dot4I8Packed((qv.x >> 4u) & f, xq[4]) + dot4I8Packed((qv.y >> 4u) & f, xq[5])
           + dot4I8Packed((qv.z >> 4u) & f, xq[6]) + dot4I8Packed((qv.w >> 4u) & f, xq[7]);
    let sl = isum4(xq[0], xq[1], xq[2], xq[3]); let sh = isum4(xq[4], xq[5], xq[6], xq[7]);
    return dm.x * dx * (lo.x * f32(il) + hi.x * f32(ih)) - dm.y * dx * (lo.y * f32(sl) + hi.y * f32(sh));
""",
    "Q6_K": """    // each value less 32: the quantized x's sums over the same eight
    let i0 = dot4I8Packed(q6b_{W}(a0, h0, 0u, 0u), xq[0]) + dot4I8Packed(q6b_{W}(a1, h1, 0u, 0u), xq[1])
           - 32 * isum2(xq[0], xq[1]);
    let i1 = dot4I8Packed(q6b_{W}(c0, h0, 0u, 2u), xq[2]) + dot4I8Packed(q6b_{W}(c1, h1, 0u, 2u), xq[3])
           - 32 * isum2(xq[2], xq[3]);
    let i2 = dot4I8Packed(q6b_{W}(a0, h0, 4u, 4u), xq[4]) + dot4I8Packed(q6b_{W}(a1, h1, 4u, 4u), xq[5])
           - 32 * isum2(xq[4], xq[5]);
    let i3 = dot4I8Packed(q6b_{W}(c0, h0, 4u, 6u), xq[6]) + dot4I8Packed(q6b_{W}(c1, h1, 4u, 6u), xq[7])
           - 32 * isum2(xq[6], xq[7]);
    return d * dx * dot(sc, vec4<f32>(f32(i0), f32(i1), f32(i2), f32(i3)));
""",
    "Q8_0": """    let s = dot4I8Packed(fw(w0, w1, odd), xq[0]) + dot4I8Packed(fw(w1, w2, odd), xq[1])
          + dot4I8Packed(fw(w2, w3, odd), xq[2]) + dot4I8Packed(fw(w3, w4, odd), xq[3])
          + dot4I8Packed(fw(w4, w5, odd), xq[4]) + dot4I8Packed(fw(w5, w6, odd), xq[5])
          + dot4I8Packed(fw(w6, w7, odd), xq[6]) + dot4I8Packed(fw(w7, w8, odd), xq[7]);
    return d * dx * f32(s);
""",
    "Q4_0": """    return d * dx * f32(idot_nib(xq, q0, q1, q2, q3) - 8 * isum8(xq));
""",
    "Q4_1": """    return dx * (dm.x * f32(idot_nib(xq, q0, q1, q2, q3)) + dm.y * f32(isum8(xq)));
""",
    "Q5_0": """    return d * dx * f32(idot_nib5(xq, q0, q1, q2, q3, h) - 16 * isum8(xq));
""",
    "Q5_1": """    return dx * (dm.x * f32(idot_nib5(xq, q0, q1, q2, q3, h)) + dm.y * f32(isum8(xq)));
""",
}
# Q6_K's values as bytes (its UNIT_HELPERS come with the float form, which the integer
# form's wrapper keeps in the kernel)
_INT_HELPERS = {
    "Q6_K": """
// four 6-bit values as bytes: low nibbles of ql from bit sl, two high bits of qh from bit sh
fn q6b_{W}(ql: u32, qh: u32, sl: u32, sh: u32) -> u32 {
    return ((ql >> sl) & 0x0F0F0F0Fu) | (((qh >> sh) & 0x03030303u) << 4u);
}
""",
}
_INT_SIGNATURE = "fn unit_{W}(rb: u32, u: u32, x: array<vec4<f32>, 8>, xq: array<u32, 8>, dx: f32) -> f32 {\n"
UNIT_INT_DECODERS = {
    t: _INT_HELPERS.get(t, "\n") + _INT_SIGNATURE + UNIT_READS[t] + body + "}\n" for t, body in _INT_BODY.items()
}
# the quantized x's sums (every integer decoder's offsets), emitted once under "i8"
UNIT_INT_SUMS = """
fn isum2(a: u32, b: u32) -> i32 { return dot4I8Packed(0x01010101u, a) + dot4I8Packed(0x01010101u, b); }
fn isum4(a: u32, b: u32, c: u32, d: u32) -> i32 { return isum2(a, b) + isum2(c, d); }
fn isum8(xq: array<u32, 8>) -> i32 { return isum4(xq[0], xq[1], xq[2], xq[3]) + isum4(xq[4], xq[5], xq[6], xq[7]); }
"""
# the 32-element block types' integer helpers (after UNIT_BLOCK_WORDS)
UNIT_INT_BLOCK_WORDS = """
// the quantized x against 32 nibbles (low nibbles of q0..q3, then high), four a word
fn idot_nib(xq: array<u32, 8>, q0: u32, q1: u32, q2: u32, q3: u32) -> i32 {
    let f = 0x0F0F0F0Fu;
    return dot4I8Packed(q0 & f, xq[0]) + dot4I8Packed(q1 & f, xq[1]) + dot4I8Packed(q2 & f, xq[2])
         + dot4I8Packed(q3 & f, xq[3]) + dot4I8Packed((q0 >> 4u) & f, xq[4]) + dot4I8Packed((q1 >> 4u) & f, xq[5])
         + dot4I8Packed((q2 >> 4u) & f, xq[6]) + dot4I8Packed((q3 >> 4u) & f, xq[7]);
}
// bits s .. s + 3 of h as bit 4 of four bytes (the shifted copies do not overlap: no carries)
fn hbytes(h: u32, s: u32) -> u32 { return ((((h >> s) & 15u) * 0x00204081u) & 0x01010101u) << 4u; }
fn idot_nib5(xq: array<u32, 8>, q0: u32, q1: u32, q2: u32, q3: u32, h: u32) -> i32 {
    let f = 0x0F0F0F0Fu;
    return dot4I8Packed((q0 & f) | hbytes(h, 0u), xq[0]) + dot4I8Packed((q1 & f) | hbytes(h, 4u), xq[1])
         + dot4I8Packed((q2 & f) | hbytes(h, 8u), xq[2]) + dot4I8Packed((q3 & f) | hbytes(h, 12u), xq[3])
         + dot4I8Packed(((q0 >> 4u) & f) | hbytes(h, 16u), xq[4]) + dot4I8Packed(((q1 >> 4u) & f) | hbytes(h, 20u), xq[5])
         + dot4I8Packed(((q2 >> 4u) & f) | hbytes(h, 24u), xq[6]) + dot4I8Packed(((q3 >> 4u) & f) | hbytes(h, 28u), xq[7]);
}
"""
# a float decoder under ``dot`` "i8": the integer form's signature, the float form's body
UNIT_FLOAT_IN_INT = """
fn unit_{W}(rb: u32, u: u32, x: array<vec4<f32>, 8>, xq: array<u32, 8>, dx: f32) -> f32 { return unitf_{W}(rb, u, x); }
"""
UNIT_GENERIC = """
fn unit_{W}(rb: u32, u: u32, x: array<vec4<f32>, 8>) -> f32 {
    let w0 = dq8_{W}(rb, 4u * u); let w1 = dq8_{W}(rb, 4u * u + 1u);
    let w2 = dq8_{W}(rb, 4u * u + 2u); let w3 = dq8_{W}(rb, 4u * u + 3u);
    return dot(x[0], w0.a) + dot(x[1], w0.b) + dot(x[2], w1.a) + dot(x[3], w1.b)
         + dot(x[4], w2.a) + dot(x[5], w2.b) + dot(x[6], w3.a) + dot(x[7], w3.b);
}
"""


def _eight_vectors(src: str) -> str:
    """The decoders as written (x: array<vec4<f32>, 8>, x[k]) with x as eight vectors
    x_0 .. x_7: the H200's compiler kept private arrays in local memory (a Q8_0 decoder
    that looped over one made the outputs 6x slower), so no kernel holds one."""
    for name, kind in (("x", "vec4<f32>"), ("xq", "u32")):  # x, and its 8-bit form (dot "i8")
        parts = [f"{name}_{k}" for k in range(8)]
        src = src.replace(f"{name}: array<{kind}, 8>", ", ".join(f"{p}: {kind}" for p in parts))
        # passed whole to a helper (xsum(x), dot_nib(x, ...), unitf_W0(rb, u, x))
        src = re.sub(rf"(?:(?<=\()|(?<=, )){name}(?=[,)])", ", ".join(parts), src)
        src = re.sub(rf"\b{name}\[([0-7])\]", rf"{name}_\1", src)
    return src


def _load_unit(x: list[str], xoff: str, src: str, sumsq: str) -> str:
    """WGSL that loads a unit of x into the eight vec4 variables ``x`` (row at ``xo``,
    from the arena A or shared XS), each element times the fused norm's weight and its
    square added to ``sumsq`` where one is given. Written out, k by k: a loop over a
    private array left it in local memory on the H200 (see the Q8_0 decoder)."""
    out = ""
    for k, v in enumerate(x):
        load = f"{src}[(xo + {xoff}u, {k}u)) >> 2u]"
        if sumsq:
            out += f"                let e{k} = {xoff}u, {k}u);\n"
            out += (
                f"                let v{k} = {src}[(xo + e{k}) >> 2u];\n                {sumsq} += dot(v{k}, v{k});\n"
            )
            out += f"                {v} = v{k} * nw(e{k});\n"
        else:
            out += f"                {v} = {load};\n"
    return out


def _quantize_unit(x: list[str], xq: list[str], dx: str, tag: str) -> str:
    """WGSL that rounds a unit of x (the eight vec4 variables ``x``) to 8 bits: four
    values a word in ``xq``, the step (max |x| / 127) in ``dx``. v + 1.5 x 2^23 holds
    round(v) in its low bits (|v| <= 127), whose low byte pack4xI8 takes."""
    ab = [f"abs({v})" for v in x]
    out = (
        f"                let am{tag} = max(max(max({ab[0]}, {ab[1]}), max({ab[2]}, {ab[3]})), "
        f"max(max({ab[4]}, {ab[5]}), max({ab[6]}, {ab[7]})));\n"
        f"                let ax{tag} = max(max(am{tag}.x, am{tag}.y), max(am{tag}.z, am{tag}.w));\n"
        f"                {dx} = ax{tag} / 127.0;\n"
        f"                let iq{tag} = select(0.0, 127.0 / ax{tag}, ax{tag} > 0.0);\n"
    )
    return out + "".join(
        f"                {q} = pack4xI8(bitcast<vec4<i32>>({v} * iq{tag} + vec4<f32>(12582912.0)));\n"
        for v, q in zip(x, xq, strict=True)
    )


def int_unit_types(types: tuple[str, ...], segments: bool = False) -> bool:
    """Every weight of these types has an integer unit decoder in the layout it runs
    with (matvec_unit's ``quant_k`` needs it: no float decoder reads x there)."""
    lay = unit_layout(types)
    return all(t in UNIT_INT_DECODERS and (segments or UNIT_LAYOUT[t] == lay) for t in types)


def group_lanes(group: str) -> int:
    """The lanes of a "sub<C>" group of `matvec_unit` (C); 0 for "sub" (a whole subgroup)
    and "wg"."""
    return int(group[3:]) if group.startswith("sub") and group != "sub" else 0


def unit_layout(types: tuple[str, ...]) -> str:
    """The unit layout a product of these weight types runs with: their own when they
    share one, else "lin" (each type through its own "lin" decoder, else dq8's)."""
    kinds = {UNIT_LAYOUT.get(t, "lin") for t in types}
    return kinds.pop() if len(kinds) == 1 else "lin"


def unit_decoder(t: str, layout: str) -> str:
    """``unit_{W}`` of weight type ``t`` under ``layout``: its own, where it has one for
    that layout, else four of its dq8 decoder's groups (the "lin" layout)."""
    if UNIT_LAYOUT.get(t) == layout and t in UNIT_DECODERS:
        return UNIT_DECODERS[t]
    return UNIT_GENERIC


def matvec_unit(types: tuple[str, ...], glu: str | None = None, rows: int = 1, per: int = 1, feats: int = 2,
                norm: bool = False, group: str = "sub", shared_k: int = 0, segments: bool = False,
                pre_add: bool = False, dot: str = "f32", quant_k: int = 0) -> str:  # fmt: skip
    """y = x W^T for a few rows of x, bandwidth first: a group of lanes computes
    ``feats`` output features, lane l of the group taking units l, l + lanes, ... of 32
    weights (see UNIT_LAYOUT): x read as eight 16-byte loads a unit (the arena bound as
    vec4s; x's offset, row stride and K multiples of 4), shared by the features, and
    each weight decoded with one read of its block header per 32 values.

    ``group`` "sub": a subgroup is a group (`subgroupAdd` sums its lanes, no barrier); a
    workgroup holds ``per`` features, its subgroups looping over them, so the result is
    right whatever subgroup size the driver picks. "sub<C>" (C a power of two, at most the
    subgroup size): C lanes of a subgroup are a group, summed by a butterfly of
    `subgroupShuffleXor` (every lane adds the same pairs: the same bits), for rows whose
    units do not fill a subgroup's steps (48 units: a 32-lane subgroup's second step
    leaves half its lanes idle, 16 lanes take three full steps). "wg": the whole workgroup of MV_WG
    threads is one group of ``per`` = ``feats`` features (long rows: more lanes on each,
    fewer units a lane; the subgroups' sums meet in shared memory, two barriers in all).

    Every row's sum runs in the same order whatever ``rows`` and M, so a row of a batch
    is bit for bit its one-row product. Parameters, ``glu`` and ``norm`` as `matvec` (the
    norm weight's offset a multiple of 4 too). With ``norm`` the row's sum of squares is
    taken from the same loads of x as the products (the group's lanes read all of x
    between them) and 1/rms scales the sums at the end: no pass over x before the
    weights' loads start.

    ``shared_k`` (K, when ``rows`` x K values fit the workgroup's memory): the workgroup
    copies its rows of x to shared memory once, and its lanes read them there: x is read
    from memory once a workgroup instead of once a group (on the H200 it made no
    measurable difference to a token; compile.unit_plan's "unit-auto-gx" leaves it out).

    ``segments``: the weights are several products of one x (a layer's Q, K and V), their
    output features laid end to end as `matvec_segments` lays them (P: 0 K, 1 features in
    all, padded so that no workgroup straddles two products, 2 M, 3 x offset, 4 x row
    stride, 13/14 norm; per product s at P(20 + 8 s) its first feature, N, y offset, y row
    stride, bias offset + 1, weight row bytes, residual offset + 1, residual row stride).
    A workgroup finds its product, and reads x in that weight type's own unit layout.

    ``pre_add`` (with ``shared_k``): x is computed here, not read, as a sandwich norm's
    residual add makes it: x = z + rms_norm(a) * w (Gemma 2/3, OLMo2: the norm after
    attention or the FFN, then the residual add, then the norm these products fuse). Each
    workgroup computes its rows of x into shared memory; workgroup 0 also writes them at
    x's offset, where the rest of the graph reads them. P: 15 a's offset, 16 z's, 17 w's
    + 1 (0: none), 18 the norm's eps; a, z and x are rows of K values, end to end. One
    dispatch less a norm.

    ``dot`` "i8": each lane quantizes its unit of x to 8 bits (a step of max |x| / 127,
    rounded to nearest), and the decoders of UNIT_INT_DECODERS multiply with
    dot4I8Packed; "f32" (the default): x as loaded, in f32. ``quant_k`` (K, under "i8",
    where every type has an integer decoder in its layout: int_unit_types): the workgroup
    quantizes its rows of x once, into shared memory (XQ, DX), a fused norm's sum of
    squares with them, and its lanes read the 8-bit units there (the same values as each
    lane's own quantization, once a workgroup instead of once a group and feature group)."""
    layout = unit_layout(types)
    # segments: each weight in its own layout (one product a workgroup: uniform branches)
    lays = [UNIT_LAYOUT.get(t, "lin") if segments else layout for t in types]
    libs = ""
    for i, t in enumerate(types):
        var = f"W{i}"
        layout_i = lays[i]
        vec = UNIT_LAYOUT.get(t) == layout_i and t in UNIT_VEC4
        lib = weight_lib(t, var, 2 + i)
        if vec:
            lib = lib.replace(f"var<storage, read> {var}: array<u32>;", f"var<storage, read> {var}: array<vec4<u32>>;")
            lib = lib[: lib.index("fn rd8_")]  # the word readers do not apply to a vec4 view
        libs += lib
        dec = unit_decoder(t, layout_i)
        if dot == "i8":
            # the float form as unitf_W, called by a wrapper where no integer form exists
            dec = dec.replace("fn unit_{W}(", "fn unitf_{W}(")
            own = UNIT_LAYOUT.get(t) == layout_i and t in UNIT_INT_DECODERS
            dec += UNIT_INT_DECODERS[t] if own else UNIT_FLOAT_IN_INT
        libs += dec.replace("{W}", var)
    if "lin" in lays and any(UNIT_LAYOUT.get(t) == "lin" for t in types):
        libs += UNIT_BLOCK_WORDS + (UNIT_INT_BLOCK_WORDS if dot == "i8" else "")
    if dot == "i8":
        libs = UNIT_INT_SUMS + libs
    libs = INT_FLOAT + _eight_vectors(libs)
    R, F = rows, feats
    n_w = 1 if segments else len(types)  # accumulators a feature: one product's
    decl = "".join(f"        var a{i}_{r}_{j} = 0.0;\n" for i in range(n_w) for r in range(R) for j in range(F))
    if norm and not quant_k:
        decl += "".join(f"        var q{r} = 0.0;\n" for r in range(R))
    xload = ""
    xoff = "xoff_seg(seg, " if segments else "xoff("
    U = quant_k // 32
    for r in range(R):
        if quant_k:
            # the unit as the workgroup quantized it (xq_fill); x itself is not read: every
            # type has an integer decoder, which takes xq and dx only
            xload += "".join(f"            let x{r}_{k} = vec4<f32>(0.0);\n" for k in range(8))
            xload += "".join(f"            var xq{r}_{k} = 0u;\n" for k in range(8)) + f"            var dx{r} = 0.0;\n"
            xload += f"            if ({r}u < nr) {{\n                let qi = {r * U}u + u;\n"
            xload += "                let qa = XQ[2u * qi]; let qb = XQ[2u * qi + 1u];\n"
            xload += "".join(f"                xq{r}_{k} = q{'ab'[k // 4]}.{'xyzw'[k % 4]};\n" for k in range(8))
            xload += f"                dx{r} = DX[qi];\n            }}\n"
            continue
        xload += "".join(f"            var x{r}_{k}: vec4<f32>;\n" for k in range(8))
        if dot == "i8":
            xload += "".join(f"            var xq{r}_{k} = 0u;\n" for k in range(8)) + f"            var dx{r} = 0.0;\n"
        xload += f"            if ({r}u < nr) {{\n"
        xload += (
            f"                let xo = {r * shared_k}u;\n"
            if shared_k
            else f"                let xo = P(3u) + (m0 + {r}u) * P(4u);\n"
        )
        xload += _load_unit([f"x{r}_{k}" for k in range(8)], xoff, "XS" if shared_k else "A", f"q{r}" if norm else "")
        if dot == "i8":
            xload += _quantize_unit([f"x{r}_{k}" for k in range(8)], [f"xq{r}_{k}" for k in range(8)], f"dx{r}", str(r))
        xload += "            }\n"
    xq_fill = ""
    if quant_k:
        # the workgroup's rows of x, unit by unit in the product's layout, to 8 bits (and a
        # fused norm's sums of squares, summed over the workgroup: its barriers, or one,
        # before the lanes read XQ)
        assert dot == "i8" and quant_k % 32 == 0, (dot, quant_k)
        xq_fill = "".join(f"        var ss{r} = 0.0;\n" for r in range(R) if norm)
        fv, pv = [f"f_{k}" for k in range(8)], [f"p_{k}" for k in range(8)]
        for r in range(R):
            # row by row, thread t taking units t, t + MV_WG, ... of each: a row's sum of
            # squares in the same order whatever R (a batch row is its one-row product)
            xo = f"{r * shared_k}u" if shared_k else f"P(3u) + (m0 + {r}u) * P(4u)"
            xq_fill += f"""        for (var u = t; u < {U}u; u += {MV_WG}u) {{
            let i = {r * U}u + u;
{"".join(f"            var {v}: vec4<f32>;{chr(10)}" for v in fv)}{"".join(f"            var {v} = 0u;{chr(10)}" for v in pv)}            var dxv = 0.0;
            if ({r}u < nr) {{
                let xo = {xo};
{_load_unit(fv, xoff, "XS" if shared_k else "A", f"ss{r}" if norm else "")}{_quantize_unit(fv, pv, "dxv", "")}            }}
            XQ[2u * i] = vec4<u32>(p_0, p_1, p_2, p_3); XQ[2u * i + 1u] = vec4<u32>(p_4, p_5, p_6, p_7);
            DX[i] = dxv;
        }}
"""
        if norm:
            xq_fill += "".join(
                f"        let inv{r} = inverseSqrt(wsum(ss{r}, t, sgs) / f32(K) + PF(14u));\n" for r in range(R)
            )
        else:
            xq_fill += "        workgroupBarrier();\n"
    rbytes = ["P(sb + 5u)"] if segments else [f"P({11 + i}u)" for i in range(n_w)]
    fma = "".join(f"            let rb{i}_{j} = n{j} * {rbytes[i]};\n" for i in range(n_w) for j in range(F))
    for r in range(R):
        fma += f"            if ({r}u < nr) {{\n"
        for i in range(n_w):
            for j in range(F):
                xs = ", ".join(f"x{r}_{k}" for k in range(8))
                if dot == "i8":
                    xs += ", " + ", ".join(f"xq{r}_{k}" for k in range(8)) + f", dx{r}"
                fn = "unit_seg(seg, " if segments else f"unit_W{i}("
                fma += f"                a{i}_{r}_{j} += {fn}rb{i}_{j}, u, {xs});\n"
        fma += "            }\n"
    sums = [f"a{i}_{r}_{j}" for i in range(n_w) for r in range(R) for j in range(F)]
    if norm and not quant_k:
        sums += [f"q{r}" for r in range(R)]
    reducer = ""
    C = group_lanes(group)
    if group == "wg":
        decl1, reduce = _reduce_onepass(sums)
        reducer = decl1
        first = "t == 0u"
    elif C:
        assert C & (C - 1) == 0 and 2 <= C <= 64, group
        reducer = (
            "fn bfly(x: f32) -> f32 {\n    var v = x;\n"
            + "".join(
                f"    v += subgroupShuffleXor(v, {o}u);\n" for o in (1 << k for k in range(C.bit_length() - 2, -1, -1))
            )
            + "    return v;\n}\n"
        )
        reduce = "".join(f"        {v} = bfly({v});\n" for v in sums)
        first = f"t % {C}u == 0u"
    else:
        reduce = "".join(f"        {v} = subgroupAdd({v});\n" for v in sums)
        first = "lane == 0u"
    if norm and not quant_k:
        reduce += "".join(f"        let inv{r} = inverseSqrt(q{r} / f32(K) + PF(14u));\n" for r in range(R))
    act = {"swiglu": "silu_(s0) * s1", "geglu": "gelu_(s0) * s1", None: "s0"}[glu]
    # where a feature's result goes: the dispatch's parameters, or its product's (segments)
    q = {i: f"P({i}u)" for i in (1, 5, 6, 7, 8, 9)} | {10: " + P(10u)"}
    if segments:
        q = {
            1: "P(sb + 1u)",
            5: "P(sb + 2u)",
            6: "P(sb + 3u)",
            7: "P(sb + 4u)",
            8: "P(sb + 6u)",
            9: "P(sb + 7u)",
            10: "",
        }
    stores = ""
    for r in range(R):
        for j in range(F):
            sc = f" * inv{r}" if norm else ""
            s1 = f"let s1 = a1_{r}_{j}{sc};" if n_w > 1 else ""
            stores += f"""        if ({r}u < nr && {first} && nn{j} < {q[1]}) {{
            let col = nn{j}{q[10]};
            var s0 = a0_{r}_{j}{sc};
            {s1}
            if ({q[7]} != 0u) {{ s0 += As({q[7]} - 1u + col); }}
            var y = {act};
            if ({q[8]} != 0u) {{ y += As({q[8]} - 1u + (m0 + {r}u) * {q[9]} + col); }}
            let yo = {q[5]} + (m0 + {r}u) * {q[6]} + col;
            A[yo >> 2u][yo & 3u] = y;
        }}
"""
    nn = "".join(f"    let nn{j} = nb + {j}u;\n    let n{j} = min(nn{j}, P(1u) - 1u);\n" for j in range(F))
    seg_fns = ""
    if segments:
        # the product (seg, its parameters at sb) of the workgroup's first feature, and
        # the features from that product's first
        nn = "    let nl = nb - P(sb);\n" + "".join(
            f"    let nn{j} = nl + {j}u;\n    let n{j} = min(nn{j}, P(sb + 1u) - 1u);\n" for j in range(F)
        )
        xs8 = ", ".join(f"x_{k}: vec4<f32>" for k in range(8))
        xa8 = ", ".join(f"x_{k}" for k in range(8))
        if dot == "i8":
            xs8 += ", " + ", ".join(f"xq_{k}: u32" for k in range(8)) + ", dx: f32"
            xa8 += ", " + ", ".join(f"xq_{k}" for k in range(8)) + ", dx"
        cases = "".join(f"        case {i}u: {{ return unit_W{i}(rb, u, {xa8}); }}\n" for i in range(len(types) - 1))
        seg_fns = (
            f"fn unit_seg(seg: u32, rb: u32, u: u32, {xs8}) -> f32 {{\n    switch seg {{\n{cases}"
            f"        default: {{ return unit_W{len(types) - 1}(rb, u, {xa8}); }}\n    }}\n}}\n"
        )
        for lay in sorted(set(lays)):
            seg_fns += f"fn xoff_{lay}(u: u32, k: u32) -> u32 {{\n    {UNIT_XOFF[lay]}\n}}\n"
        cases = "".join(f"        case {i}u: {{ return xoff_{lays[i]}(u, k); }}\n" for i in range(len(types) - 1))
        seg_fns += (
            f"fn xoff_seg(seg: u32, u: u32, k: u32) -> u32 {{\n    switch seg {{\n{cases}"
            f"        default: {{ return xoff_{lays[-1]}(u, k); }}\n    }}\n}}\n"
        )
    nw = ""
    if norm:
        nw = """fn nw(e: u32) -> vec4<f32> {
    if (P(13u) == 0u) { return vec4<f32>(1.0); }
    return A[(P(13u) - 1u + e) >> 2u];
}
"""
    # the body for one feature group and R rows from m0 (sub: a subgroup's; wg: the workgroup's)
    body = f"""{nn}
        let units = K / 32u;
{decl}        for (var u = gl; u < units; u += gs) {{
{xload}{fma}        }}
{reduce}{stores}"""
    if group == "wg":
        feats_loop = f"""        let nb = wg_linear(wid, nwg) * {F}u;
        let gl = t; let gs = {MV_WG}u;
{body}"""
        guard = f"""    if (wg_linear(wid, nwg) * {F}u >= P(1u)) {{ return; }}\n"""
    else:
        # no `break` out of the loop (a barrier follows it with shared_k): the last
        # workgroup's extra features are skipped by a guard instead
        gid, glanes, gl = ("t / sgs", "sgs", "lane") if not C else (f"t / {C}u", f"{C}u", f"t % {C}u")
        feats_loop = f"""        for (var fb = ({gid}) * {F}u; fb < {per}u; fb += ({MV_WG}u / {glanes}) * {F}u) {{
          let nb = wg_linear(wid, nwg) * {per}u + fb;
          if (nb < P(1u)) {{
            let gl = {gl}; let gs = {glanes};
{body}          }}
        }}
"""
        guard = f"""    if (wg_linear(wid, nwg) * {per}u >= P(1u)) {{ return; }}\n"""
    xs_decl, xs_fill, xs_done = "", "", ""
    if shared_k:
        xs_decl = f"var<workgroup> XS: array<vec4<f32>, {R * shared_k // 4}>;\n"
        if not pre_add:
            xs_fill = f"""        for (var i = t; i < {R * shared_k // 4}u; i += {MV_WG}u) {{
            let r = i / {shared_k // 4}u;
            var v = vec4<f32>(0.0);
            if (r < nr) {{ v = A[(P(3u) + (m0 + r) * P(4u)) / 4u + i % {shared_k // 4}u]; }}
            XS[i] = v;
        }}
        workgroupBarrier();
"""
        else:
            # x = z + rms_norm(a) * w, row by row (the row's sum over the workgroup, the
            # same whatever the rows of the pass), as wgsl.norm computes it
            xs_fill = f"""        for (var r = 0u; r < {R}u; r++) {{
            let live = r < nr;
            let ao = P(15u) + (m0 + r) * K; let zo = P(16u) + (m0 + r) * K;
            var q = 0.0;
            if (live) {{ for (var i = t; i < K; i += {MV_WG}u) {{ let v = As(ao + i); q += v * v; }} }}
            let inv = inverseSqrt(wsum(q, t, sgs) / f32(K) + PF(18u));
            for (var i = t; i < K; i += {MV_WG}u) {{
                var y = 0.0;
                if (live) {{
                    var w = 1.0;
                    if (P(17u) != 0u) {{ w = As(P(17u) - 1u + i); }}
                    y = As(ao + i) * inv * w + As(zo + i);
                    if (wg_linear(wid, nwg) == 0u) {{
                        let xo = P(3u) + (m0 + r) * K + i;
                        A[xo >> 2u][xo & 3u] = y;
                    }}
                }}
                XS[(r * K + i) >> 2u][(r * K + i) & 3u] = y;
            }}
        }}
        workgroupBarrier();
"""
        xs_done = "        workgroupBarrier();\n"
    if quant_k:
        xs_decl += f"var<workgroup> XQ: array<vec4<u32>, {2 * R * U}>;\nvar<workgroup> DX: array<f32, {R * U}>;\n"
        xs_done = "        workgroupBarrier();\n"
    seg_sel = ""
    if segments:
        wg_per = F if group == "wg" else per
        seg_sel = f"    let nbase = wg_linear(wid, nwg) * {wg_per}u;\n    var seg = 0u;\n"
        seg_sel += "".join(
            f"    if (nbase >= P({SEG_BASE + 8 * i}u)) {{ seg = {i}u; }}\n" for i in range(1, len(types))
        )
        seg_sel += f"    let sb = {SEG_BASE}u + 8u * seg;\n"
    main_body = f"""{guard}{seg_sel}    let K = P(0u); let M = P(2u);
    for (var m0 = 0u; m0 < M; m0 += {R}u) {{
        let nr = min({R}u, M - m0);
{xs_fill}{xq_fill}{feats_loop}{xs_done}    }}
"""
    return (
        HEADER
        + "@group(0) @binding(1) var<storage, read_write> A: array<vec4<f32>>;\n"
        + "fn As(i: u32) -> f32 { return A[i >> 2u][i & 3u]; }\n"
        + GRID
        + ACTIVATIONS
        + libs
        + (seg_fns if segments else f"fn xoff(u: u32, k: u32) -> u32 {{\n    {UNIT_XOFF[layout]}\n}}\n")
        + nw
        + reducer
        + (workgroup_sum(MV_WG, True, "pre_part")[0] if pre_add or (quant_k and norm) else "")
        + xs_decl
        + f"""
@compute @workgroup_size({MV_WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32,
        @builtin(subgroup_size) sgs: u32, @builtin(subgroup_invocation_id) lane: u32) {{
{main_body}}}
"""
    )
