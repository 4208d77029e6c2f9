"""The KV cache's stores: `kv_store` writes a pass's keys and values into each
sequence's cells (and the cells' positions); `rope_kv` is a rope pair with those stores
folded in."""

from __future__ import annotations

from .common import ARENA_U32, GRID, HEADER, SEQ_FN
from .rope import _rope_body


# The per-run sequence table in the arena (compile.py writes it): at P(seq) offset,
# n_seq entries each of slots, starts, first rows, row counts.
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


def rope_kv(kv_f16: bool, subgroups: bool = False) -> str:
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
        + _rope_body(tail, keys, subgroups)
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
