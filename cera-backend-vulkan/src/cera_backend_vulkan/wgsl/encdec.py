"""The encoder-decoder families' ops (Whisper): convolution columns, cross-attention memories."""

from __future__ import annotations

from .common import ARENA_U32, GRID, HEADER, SEQ_FN

# -- encoder-decoder families ---------------------------------------------------------------------


def im2col() -> str:
    """The columns of a full 1-D convolution (cera.graph.ops.conv1d), a thread per value:
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
