"""TurboQuant KV cache rows (tq3, tq2; `cera.kv_turboquant`, the one definition of the
format): the store kernel and what the attention kernel reads them with.

A row of D numbers is an f16 norm, then b bit planes of D/8 bytes (bit k of byte j of
plane p: bit p of coordinate 8j + k's centroid index), b the bits of the row's kind
(keys 4 and values 3 for tq3, 3 and 2 for tq2); rows are packed one after another, so a
row starts at any byte (34 bytes a tq3 key row of 64) and the store writes the words it
shares with a neighbouring row with atomics on its own bytes only (as `wgsl.kv_quant`).

The store (`kv_store_tq`) does what the CPU backend's tq_store does: the row (a key less
its head's offset, `VulkanState.key_offsets`), its norm (summed in order), the direction
turned by the rotation P (an arena constant, row-major D x D), each coordinate times
sqrt(D) given the index of the nearest centroid (the count of midpoints below it, as
numpy's searchsorted), and norm / (|c[idx]| / sqrt(D)) as the stored f16.

Attention (`wgsl.attention` with ``kv`` "tq3" / "tq2") never widens the rows: the query
is turned once per head (P q / sqrt(D), as the CPU's tq_query), a key's score is its norm
times the dot of that with the key's centroids; the values are summed in the rotated
space, each weighed by its softmax weight times its norm / sqrt(D), and the sum turned
back once (P^T y).
"""

from __future__ import annotations

import math

import numpy as np

from cera import kv_turboquant
from cera.kv_types import TURBOQUANT_BITS, row_size

from .common import ARENA_U32, GRID, HEADER, SEQ_FN

TQ_KV = tuple(TURBOQUANT_BITS)  # "tq3", "tq2"
MAX_DIM = 512  # the longest row the store and attention kernels hold in shared memory


def _f32(x) -> str:
    """A WGSL literal of the float32 ``x`` (its shortest decimal reads back exactly)."""
    v = float(np.float32(x))
    return repr(v) if v != int(v) else f"{v:.1f}"


def _list(xs) -> str:
    return ", ".join(_f32(x) for x in xs)


def codebook(name: str, kind: str, key: bool) -> str:
    """WGSL: the centroids of a ``kind`` key (``key``) or value row as a module constant."""
    b = kv_turboquant.bits(kind, key)
    cb = np.asarray(kv_turboquant.CODEBOOKS[b], np.float32)
    return f"const {name} = array<f32, {cb.size}>({_list(cb)});\n"


def byte_reader(buf: str) -> str:
    """``{buf}_b(o)``: byte o of a u32 binding; ``{buf}_w(o)``: the 4 bytes from byte o."""
    return f"""fn {buf}_b(o: u32) -> u32 {{ return ({buf}[o >> 2u] >> ((o & 3u) * 8u)) & 0xffu; }}
fn {buf}_w(o: u32) -> u32 {{
    let s = (o & 3u) * 8u; let a = {buf}[o >> 2u];
    if (s == 0u) {{ return a; }}
    return (a >> s) | ({buf}[(o >> 2u) + 1u] << (32u - s));
}}
fn {buf}_n(o: u32) -> f32 {{ return unpack2x16float({buf}_b(o) | ({buf}_b(o + 1u) << 8u)).x; }}
"""


def _turn(src: str, dst: str, dim: int, rot: str, transpose: bool, scale: str = "") -> str:
    """WGSL (64 threads): ``dst = P src`` (``transpose``: P^T src) for the row-major P at
    arena offset ``rot``, times ``scale`` where given; ends with a barrier."""
    at = f"{rot} + j * {dim}u + i" if transpose else f"{rot} + i * {dim}u + j"
    tail = f" * {scale}" if scale else ""
    return f"""    for (var i = t; i < {dim}u; i += 64u) {{
        var y = 0.0;
        for (var j = 0u; j < {dim}u; j++) {{ y += bitcast<f32>(A[{at}]) * {src}[j]; }}
        {dst}[i] = y{tail};
    }}
    workgroupBarrier();
"""


def _store_row(kind: str, key: bool, buf: str, src: str, dim: int, rot: str) -> str:
    """WGSL: row (r, h) of this pass's activations at offset ``src`` (a key less its
    head's offset) quantized and written into the cache row ``base`` of ``buf``."""
    b = kv_turboquant.bits(kind, key)
    rb = row_size(kind, dim, key)
    thr = kv_turboquant.thresholds(b)
    cb = "KCB" if key else "VCB"
    less = f" - KOFF[h * {dim}u + e]" if key else ""
    count = " + ".join(f"u32(v > {_f32(x)})" for x in thr)
    plane = dim // 8
    return f"""    for (var e = t; e < {dim}u; e += 64u) {{ xs[e] = bitcast<f32>(A[{src} + (r * nh + h) * {dim}u + e]){less}; }}
    workgroupBarrier();
    {{
        var nn = 0.0;
        for (var e = 0u; e < {dim}u; e++) {{ nn += xs[e] * xs[e]; }}
        let norm = sqrt(nn);
        let safe = select(1.0, norm, norm > 0.0);
        for (var e = t; e < {dim}u; e += 64u) {{ ys[e] = xs[e] / safe; }}
        workgroupBarrier();
{_turn("ys", "xs", dim, rot, False)}        for (var i = t; i < {dim}u; i += 64u) {{
            let v = xs[i] * {_f32(math.sqrt(dim))};
            ix[i] = {count};
        }}
        workgroupBarrier();
        var kept = 0.0;
        for (var i = 0u; i < {dim}u; i++) {{ let c = {cb}[ix[i]]; kept += c * c; }}
        kept = sqrt(kept) / {_f32(math.sqrt(dim))};
        let nh16 = pack2x16float(vec2<f32>(select(0.0, norm / select(1.0, kept, kept > 0.0), kept > 0.0), 0.0));
        if (t == 0u) {{ qb[0] = nh16 & 0xffu; qb[1] = (nh16 >> 8u) & 0xffu; }}
        for (var jj = t; jj < {b * plane}u; jj += 64u) {{
            let p = jj / {plane}u; let j = jj % {plane}u;
            var byte = 0u;
            for (var k = 0u; k < 8u; k++) {{ byte |= ((ix[8u * j + k] >> p) & 1u) << k; }}
            qb[2u + jj] = byte;
        }}
        workgroupBarrier();
    }}
    {{
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


def kv_store_tq(kind: str, dk: int, dv: int) -> str:
    """`kv_store` for a TurboQuant cache (module docstring): a workgroup of 64 per (row,
    kv head). P as `kv_store` (0 rows, 1 kv heads, 2 dk, 3 dv, 4 k offset, 5 v offset,
    6 capacity, 7 seq table offset, 8 n_seq, 9 positions offset, 10 n_ctx, 11 write
    positions), then 12 and 13 the arena offsets of the rotations of dk and dv. Binding 5:
    the layer's key offsets, f32 [kv head, dk]."""
    dim = max(dk, dv)
    qbytes = max(row_size(kind, dk, True), row_size(kind, dv, False))
    return (
        HEADER
        + ARENA_U32
        + GRID
        + SEQ_FN
        + codebook("KCB", kind, True)
        + codebook("VCB", kind, False)
        + f"""
@group(0) @binding(2) var<storage, read_write> K: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read_write> V: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read_write> POS: array<i32>;
@group(0) @binding(5) var<storage, read_write> KOFF: array<f32>;
var<workgroup> xs: array<f32, {dim}>;
var<workgroup> ys: array<f32, {dim}>;
var<workgroup> ix: array<u32, {dim}>;
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
{_store_row(kind, True, "K", "P(4u)", dk, "P(12u)")}{_store_row(kind, False, "V", "P(5u)", dv, "P(13u)")}    if (P(11u) != 0u && h == 0u && t == 0u) {{
        POS[slot * P(10u) + cell] = bitcast<i32>(A[P(9u) + r]);
    }}
}}
"""
    )


# -- what wgsl.attention takes for a TurboQuant cache ----------------------------------------------


def attention_parts(kind: str, dk: int, dv: int) -> dict[str, str]:
    """The pieces `wgsl.attention` puts together for a ``kind`` cache (``kbase``/``vbase``
    are row indices there): ``binds`` (bindings, readers, codebooks, the workgroup memory),
    ``turn_q`` (the query turned, P(16) the rotation of dk), ``kloop`` (the score d of key
    row kb against it), ``vnorm`` (a value row's weight factor), ``vcode`` (value e's
    centroid), ``turn_out`` (qs[0:dv] turned back, P(17) the rotation of dv)."""
    bk, bv = kv_turboquant.bits(kind, True), kv_turboquant.bits(kind, False)
    rbk, rbv = row_size(kind, dk, True), row_size(kind, dv, False)
    binds = (
        """
@group(0) @binding(2) var<storage, read_write> K: array<u32>;
@group(0) @binding(3) var<storage, read_write> V: array<u32>;
@group(0) @binding(4) var<storage, read_write> POS: array<i32>;
"""
        + byte_reader("K")
        + byte_reader("V")
        + codebook("KCB", kind, True)
        + codebook("VCB", kind, False)
        + f"var<workgroup> tq_t: array<f32, {max(dk, dv)}>;\nvar<workgroup> wn: array<f32, 64>;\n"
    )
    turn_q = (
        _turn("qs", "tq_t", dk, "P(16u)", False, _f32(1.0 / np.sqrt(np.float32(dk))))
        + f"    for (var e = t; e < {dk}u; e += 64u) {{ qs[e] = tq_t[e]; }}\n    workgroupBarrier();\n"
    )
    # the key's centroids 32 (a word of each plane) or 8 (a byte) coordinates at a time
    group = 32 if dk % 32 == 0 else 8
    read = "K_w" if group == 32 else "K_b"
    planes = "".join(f"let w{p} = {read}(o + {p * dk // 8}u + gi * {group // 8}u); " for p in range(bk))
    index = " | ".join(f"(((w{p} >> k) & 1u) << {p}u)" for p in range(bk))
    kloop = f"""                let o = kb * {rbk}u + 2u;
                for (var gi = 0u; gi < {dk // group}u; gi++) {{
                    {planes}
                    for (var k = 0u; k < {group}u; k++) {{ d += qs[gi * {group}u + k] * KCB[{index}]; }}
                }}
                d *= K_n(kb * {rbk}u);
"""
    vnorm = f"V_n(vr * {rbv}u) * {_f32(1.0 / np.sqrt(np.float32(dv)))}"
    vidx = " | ".join(f"(((V_b(vb * {rbv}u + {2 + p * dv // 8}u + (e >> 3u)) >> (e & 7u)) & 1u) << {p}u)"
                      for p in range(bv))  # fmt: skip
    vcode = f"VCB[{vidx}]"
    turn_out = (
        "    workgroupBarrier();\n"
        + _turn("qs", "tq_t", dv, "P(17u)", True)
        + (f"    for (var e = t; e < {dv}u; e += 64u) {{ qs[e] = tq_t[e]; }}\n    workgroupBarrier();\n")
    )
    return {"binds": binds, "turn_q": turn_q, "kloop": kloop, "vnorm": vnorm, "vcode": vcode, "turn_out": turn_out}


def rotations(lw, dk: int, dv: int) -> tuple[int, int]:
    """Arena offsets of the rotations of dk and dv (constants, once per graph)."""
    return tuple(lw.const(kv_turboquant.rotation(d), key=("tq_rotation", d)) for d in (dk, dv))


__all__ = ["MAX_DIM", "TQ_KV", "attention_parts", "kv_store_tq", "rotations"]
