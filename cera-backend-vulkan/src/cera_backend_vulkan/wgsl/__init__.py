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
  read with the unaligned loads of blocks.py), the KV cache of a state, its cell positions, its
  recurrent state or its cross-attention memories.

Weights are read in their GGUF block layout. Every type is decoded by one function,
``dq8_<W>(row_byte_offset, g) -> V8``, giving elements 8g..8g+7 of a row: all block sizes
are multiples of 8, so products, row gathers and tiles all go through that one function.

A module per kind of kernel, every name re-exported here (``wgsl.matvec``...): common
(parameters, arena, helpers), blocks (the decoders), products (row and tiled kernels),
products_unit and products_blk (row-kernel variants), pointwise (element-wise ops,
norms), rows (embeddings, softmax, argmax/top-k, gathers), rope (rotations), kv_store
(the cache's stores), kv_quant (q8_0 and q4_0 cache rows: their store, their readers and
the Walsh-Hadamard turn), kv_tq (tq3 and tq2 rows: their store and what attention reads
them with), attention (the general attention kernel), attention_lanes (a
decode step's attention over an f16 cache) and attention_tiles (a prompt's), hybrid
(short convolutions, the SSM scan, experts), encdec (Whisper's).
"""

from __future__ import annotations

from .attention import attention
from .attention_lanes import ATT_SPLIT_CELLS, ATT_WG, attention_combine, attention_lanes
from .attention_tiles import ATT_TILE_CELLS, ATT_TILE_ROWS, attention_tiles
from .blocks import BLOCKS, DQ8, IQ4NL_TABLE, KSCALE, READERS, WEIGHT_BINDING, row_bytes, weight_lib
from .common import ACTIVATIONS, ARENA_F32, ARENA_U32, GRID, HEADER, SEQ_FN, WG
from .encdec import im2col, store_cross
from .hybrid import (CONV_MAX, DELTA_MAX, conv_causal, delta_net, head_linear, kda, moe_down, moe_logits, moe_route,
                     moe_up, sigmoid_gate, ssm_scan)  # fmt: skip
from .kv_quant import MAX_DIM as KV_QUANT_MAX_DIM
from .kv_quant import QUANT_KV, kv_store_q
from .kv_tq import MAX_DIM as KV_TQ_MAX_DIM
from .kv_tq import TQ_KV, kv_store_tq
from .kv_store import kv_store, rope_kv
from .pointwise import NORM_WG, elementwise, norm
from .products import (
    MATMUL_TILES,
    MV_ROWS,
    MV_WG,
    SEG_BASE,
    TK,
    TM,
    matmul,
    matmul_splits,
    matvec,
    matvec_segments,
    matvec_sg,
)
from .products_blk import BYTES4, DQ32, DQ32_GENERIC, DQ32_VEC, V32, WIN8, dq32_lib, matvec_blk, vec_bindings, vec_view
from .products_unit import (
    UNIT_DECODERS,
    UNIT_GENERIC,
    UNIT_INT_DECODERS,
    UNIT_LAYOUT,
    UNIT_VEC4,
    UNIT_XOFF,
    group_lanes,
    int_unit_types,
    matvec_unit,
    unit_layout,
)
from .rope import ROPE_BODY, rope
from .rows import (
    SELECT_WG,
    embedding,
    embedding_dense,
    gather,
    select_combine,
    select_partial,
    select_top,
    seq_mean,
    softmax,
    upcast,
)

__all__ = [
    "HEADER",
    "ARENA_F32",
    "ARENA_U32",
    "GRID",
    "ACTIVATIONS",
    "SEQ_FN",
    "WEIGHT_BINDING",
    "READERS",
    "DQ8",
    "KSCALE",
    "IQ4NL_TABLE",
    "BLOCKS",
    "weight_lib",
    "row_bytes",
    "MV_ROWS",
    "MV_WG",
    "matvec",
    "SEG_BASE",
    "matvec_segments",
    "matvec_sg",
    "TM",
    "MATMUL_TILES",
    "TK",
    "matmul",
    "matmul_splits",
    "UNIT_LAYOUT",
    "UNIT_XOFF",
    "UNIT_VEC4",
    "UNIT_DECODERS",
    "UNIT_INT_DECODERS",
    "UNIT_GENERIC",
    "unit_layout",
    "group_lanes",
    "int_unit_types",
    "matvec_unit",
    "V32",
    "WIN8",
    "BYTES4",
    "DQ32",
    "DQ32_GENERIC",
    "DQ32_VEC",
    "vec_view",
    "dq32_lib",
    "vec_bindings",
    "matvec_blk",
    "elementwise",
    "NORM_WG",
    "norm",
    "WG",
    "embedding",
    "softmax",
    "select_top",
    "SELECT_WG",
    "select_partial",
    "select_combine",
    "gather",
    "seq_mean",
    "embedding_dense",
    "upcast",
    "ROPE_BODY",
    "rope",
    "rope_kv",
    "kv_store",
    "kv_store_q",
    "KV_QUANT_MAX_DIM",
    "KV_TQ_MAX_DIM",
    "TQ_KV",
    "kv_store_tq",
    "QUANT_KV",
    "attention",
    "ATT_WG",
    "ATT_SPLIT_CELLS",
    "attention_combine",
    "attention_lanes",
    "attention_tiles",
    "ATT_TILE_ROWS",
    "ATT_TILE_CELLS",
    "CONV_MAX",
    "conv_causal",
    "moe_logits",
    "moe_route",
    "moe_up",
    "moe_down",
    "ssm_scan",
    "kda",
    "head_linear",
    "sigmoid_gate",
    "delta_net",
    "DELTA_MAX",
    "im2col",
    "store_cross",
]
