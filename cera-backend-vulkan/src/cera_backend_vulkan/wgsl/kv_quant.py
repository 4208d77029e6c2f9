"""Quantized KV cache rows (q8_0, q4_0): the store kernel and the readers the attention
kernel decodes them with.

Rows are ggml's blocks of 32 values, as the CPU backend and llama.cpp keep them
(`cera.kv_types`): q8_0 an f16 scale and 32 int8 (34 bytes), q4_0 an f16 scale and 16
bytes of 4-bit codes, value j in the low nibble of byte j and value j + 16 in its high
nibble (18 bytes). A row is ``dim / 32`` blocks, rows packed one after another, so the
value e of the row starting at value ``base`` is value ``base + e`` of the buffer: block
``(base + e) / 32``. Where `cera.kv_types.hadamard_block` says so, rows are kept turned by
the orthonormal Walsh-Hadamard matrix before they are quantized; the attention kernel
turns the query the same way and its output back (`hadamard`).

A row's bytes need not start at a multiple of 4 (34 bytes a block): the store writes
the words it shares with a neighbouring row with atomics on its own bytes only, so two
workgroups storing neighbouring rows in one dispatch never lose each other's bytes.
"""

from __future__ import annotations

import numpy as np

from cera.kv_types import BLOCK_TYPES, hadamard_block

from .common import ARENA_U32, GRID, HEADER, SEQ_FN

QUANT_KV = tuple(BLOCK_TYPES)  # "q8_0", "q4_0"
MAX_DIM = 512  # the longest row the store and attention kernels hold in shared memory


def hadamard(arr: str, dim: int, n: int) -> str:
    """WGSL turning ``arr[0:dim]`` (workgroup memory, 64 threads, ``t`` the thread) by the
    Walsh-Hadamard matrix of order ``n`` block by block, as ggml's CPU transform and
    `cera.kv_types.hadamard_turn` compute it: scaled by 1/sqrt(n) first, then the
    butterflies. Ends with a barrier; empty for ``n`` = 0."""
    if not n:
        return ""
    scale = repr(float(np.float32(1.0) / np.sqrt(np.float32(n))))
    return f"""    workgroupBarrier();
    for (var e = t; e < {dim}u; e += 64u) {{ {arr}[e] = {arr}[e] * {scale}; }}
    workgroupBarrier();
    for (var hl = 1u; hl < {n}u; hl <<= 1u) {{
        for (var p = t; p < {dim // 2}u; p += 64u) {{
            let j = (p / hl) * 2u * hl + p % hl;
            let u = {arr}[j]; let w = {arr}[j + hl];
            {arr}[j] = u + w; {arr}[j + hl] = u - w;
        }}
        workgroupBarrier();
    }}
"""


def readers(kind: str) -> str:
    """``kval(base, e)`` (values e, e + 1 of a key row; e even) and ``vval(base, e)`` (value
    e of a value row) over the K and V bindings of ``kind`` rows, ``base`` the row's first
    value (the row index times its length)."""
    bb = BLOCK_TYPES[kind][1]
    out = ""
    for buf in ("K", "V"):
        out += f"""fn {buf}_u16(o: u32) -> u32 {{ return ({buf}[o >> 2u] >> ((o & 2u) * 8u)) & 0xffffu; }}
fn {buf}_d(o: u32) -> f32 {{ return unpack2x16float({buf}_u16(o)).x; }}
"""
    if kind == "q8_0":
        out += f"""fn kval(base: u32, e: u32) -> vec2<f32> {{
    let i = base + e; let o = (i / 32u) * {bb}u; let j = i % 32u;
    let w = K_u16(o + 2u + j);
    return K_d(o) * vec2<f32>(f32(i32(w << 24u) >> 24u), f32(i32(w << 16u) >> 24u));
}}
fn vval(base: u32, e: u32) -> f32 {{
    let i = base + e; let o = (i / 32u) * {bb}u; let j = i % 32u;
    let w = V_u16(o + 2u + (j & ~1u));
    return V_d(o) * f32(i32(w << (24u - 8u * (j & 1u))) >> 24u);
}}
"""
    else:
        out += f"""fn kval(base: u32, e: u32) -> vec2<f32> {{
    let i = base + e; let o = (i / 32u) * {bb}u; let j = i % 32u;
    let w = K_u16(o + 2u + (j % 16u)) >> select(0u, 4u, j >= 16u);
    return K_d(o) * vec2<f32>(f32(i32(w & 15u) - 8), f32(i32((w >> 8u) & 15u) - 8));
}}
fn vval(base: u32, e: u32) -> f32 {{
    let i = base + e; let o = (i / 32u) * {bb}u; let j = i % 32u;
    let w = V_u16(o + 2u + ((j % 16u) & ~1u)) >> (select(0u, 4u, j >= 16u) + 8u * (j & 1u));
    return V_d(o) * f32(i32(w & 15u) - 8);
}}
"""
    return out


def _quantize(kind: str, dim: int) -> str:
    """WGSL: the row in ``xs[0:dim]`` quantized into ``qb`` (a byte a word), a thread per
    block, as the CPU backend quantizes (q8_0: ggml's activation quantizer, amax / 127 and
    round to nearest even; q4_0: ggml's quantize_row_q4_0_ref)."""
    bb = BLOCK_TYPES[kind][1]
    if kind == "q8_0":
        body = f"""        var amax = 0.0;
        for (var j = 0u; j < 32u; j++) {{ amax = max(amax, abs(xs[x0 + j])); }}
        let d = amax / 127.0;
        let id = select(0.0, 127.0 / amax, amax != 0.0);
        let dh = pack2x16float(vec2<f32>(d, 0.0));
        qb[b * {bb}u] = dh & 0xffu; qb[b * {bb}u + 1u] = (dh >> 8u) & 0xffu;
        for (var j = 0u; j < 32u; j++) {{
            qb[b * {bb}u + 2u + j] = bitcast<u32>(i32(round(xs[x0 + j] * id))) & 0xffu;
        }}
"""
    else:
        body = f"""        var amax = 0.0; var mx = 0.0;
        for (var j = 0u; j < 32u; j++) {{
            let a = xs[x0 + j];
            if (amax < abs(a)) {{ amax = abs(a); mx = a; }}
        }}
        let d = mx / -8.0;
        let id = select(0.0, 1.0 / d, d != 0.0);
        let dh = pack2x16float(vec2<f32>(d, 0.0));
        qb[b * {bb}u] = dh & 0xffu; qb[b * {bb}u + 1u] = (dh >> 8u) & 0xffu;
        for (var j = 0u; j < 16u; j++) {{
            let a = min(u32(i32(xs[x0 + j] * id + 8.5)), 15u);
            let c = min(u32(i32(xs[x0 + 16u + j] * id + 8.5)), 15u);
            qb[b * {bb}u + 2u + j] = a | (c << 4u);
        }}
"""
    return f"""    for (var b = t; b < {dim // 32}u; b += 64u) {{
        let x0 = b * 32u;
{body}    }}
    workgroupBarrier();
"""


def _store_row(kind: str, buf: str, src: str, dim: int, n_rot: int) -> str:
    """WGSL: row (r, h) of this pass's activations at offset ``src`` turned, quantized and
    written into the cache row ``base`` of ``buf``."""
    rb = dim // 32 * BLOCK_TYPES[kind][1]
    return f"""    for (var e = t; e < {dim}u; e += 64u) {{ xs[e] = bitcast<f32>(A[{src} + (r * nh + h) * {dim}u + e]); }}
{hadamard("xs", dim, n_rot) or "    workgroupBarrier();"}
{_quantize(kind, dim)}    {{
        let b0 = base * {rb}u; let b1 = b0 + {rb}u; let w1 = (b1 + 3u) >> 2u;
        for (var w = (b0 >> 2u) + t; w < w1; w += 64u) {{
            var val = 0u; var mask = 0u;
            for (var k = 0u; k < 4u; k++) {{
                let y = w * 4u + k;
                if (y >= b0 && y < b1) {{ val |= qb[y - b0] << (8u * k); mask |= 0xffu << (8u * k); }}
            }}
            if (mask == 0xffffffffu) {{
                atomicStore(&{buf}[w], val);
            }} else {{
                atomicAnd(&{buf}[w], ~mask);
                atomicOr(&{buf}[w], val);
            }}
        }}
    }}
    workgroupBarrier();
"""


def kv_store_q(kind: str, dk: int, dv: int) -> str:
    """`kv_store` for a quantized cache: a workgroup of 64 per (row, kv head) turns its key
    and value rows (where `hadamard_block` says so), quantizes them a thread per block and
    writes their bytes (module docstring). P as `kv_store`: 0 rows, 1 kv heads, 2 dk, 3 dv,
    4 k offset, 5 v offset, 6 capacity, 7 seq table offset, 8 n_seq, 9 positions offset,
    10 n_ctx, 11 write positions."""
    nk, nv = hadamard_block(kind, dk, True), hadamard_block(kind, dv, False)
    qbytes = max(dk, dv) // 32 * BLOCK_TYPES[kind][1]
    return (
        HEADER
        + ARENA_U32
        + GRID
        + SEQ_FN
        + f"""
@group(0) @binding(2) var<storage, read_write> K: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read_write> V: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read_write> POS: array<i32>;
var<workgroup> xs: array<f32, {max(dk, dv)}>;
var<workgroup> qb: array<u32, {qbytes}>;
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
{_store_row(kind, "K", "P(4u)", dk, nk)}{_store_row(kind, "V", "P(5u)", dv, nv)}    if (P(11u) != 0u && h == 0u && t == 0u) {{
        POS[slot * P(10u) + cell] = bitcast<i32>(A[P(9u) + r]);
    }}
}}
"""
    )


__all__ = ["MAX_DIM", "QUANT_KV", "hadamard", "kv_store_q", "readers"]
