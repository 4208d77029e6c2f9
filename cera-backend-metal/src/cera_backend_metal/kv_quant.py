"""q8_0 and q4_0 KV cache rows in MLX: the CPU backend's and llama.cpp's bytes.

A cache of these types is a uint8 array ``[kv heads, cells, row bytes]``: each row is
``dim / 32`` of ggml's blocks (q8_0: an f16 scale and 32 int8, 34 bytes; q4_0: an f16
scale and 16 bytes of 4-bit codes, value j in the low nibble of byte j, value j + 16 in
its high nibble, 18 bytes), kept turned by the orthonormal Walsh-Hadamard matrix where
`cera.kv_types.hadamard_block` says so. `quantize` turns and quantizes new rows as the
CPU backend does (q8_0: amax / 127, rounded to nearest even; q4_0: ggml's
quantize_row_q4_0_ref); `dequantize` widens the cells a step reads to f32 (the stored
cache stays in blocks); `turn` is the matrix applied to the query and, on the way back,
to the attention's output. MLX has no kernel for ggml's blocks, so a step reads its
visible cells through `dequantize`: the memory a cache takes is the blocks', a step's
reading is not faster than f16's.
"""

from __future__ import annotations

import functools

import mlx.core as mx
import numpy as np

from cera.kv_types import BLOCK_TYPES, hadamard_block, hadamard_turn

QUANT_KV = tuple(BLOCK_TYPES)  # "q8_0", "q4_0"


@functools.lru_cache(maxsize=8)
def _matrix(n: int) -> mx.array:
    """The orthonormal Walsh-Hadamard matrix of order n (symmetric, its own inverse)."""
    return mx.array(hadamard_turn(np.eye(n, dtype=np.float32), n))


def turn(x: mx.array, n: int) -> mx.array:
    """Rows ``[..., dim]`` turned block by block by the Walsh-Hadamard matrix of order n
    (0: unchanged), in f32."""
    if not n:
        return x
    shape = x.shape
    y = x.astype(mx.float32).reshape(*shape[:-1], shape[-1] // n, n) @ _matrix(n)
    return y.reshape(shape)


def quantize(x: mx.array, kind: str, key: bool) -> mx.array:
    """f32 rows ``[..., dim]`` -> their stored bytes ``[..., dim / 32 * block bytes]`` (uint8)."""
    dim = x.shape[-1]
    x = turn(x.astype(mx.float32), hadamard_block(kind, dim, key))
    lead = x.shape[:-1]
    b = x.reshape(*lead, dim // 32, 32)
    if kind == "q8_0":
        amax = mx.max(mx.abs(b), axis=-1, keepdims=True)
        d = amax / 127.0
        inv = mx.where(amax != 0, 127.0 / mx.where(amax != 0, amax, 1.0), 0.0)
        codes = mx.view(mx.round(b * inv).astype(mx.int8), mx.uint8)
    else:
        at = mx.argmax(mx.abs(b), axis=-1, keepdims=True)
        d = mx.take_along_axis(b, at, axis=-1) / -8.0
        inv = mx.where(d != 0, 1.0 / mx.where(d != 0, d, 1.0), 0.0)
        c = mx.minimum(mx.floor(b * inv + 8.5), 15.0).astype(mx.uint8)
        codes = c[..., :16] | (c[..., 16:] << 4)
    scale = mx.view(d.astype(mx.float16), mx.uint8)  # [..., blocks, 2], little-endian
    return mx.concatenate([scale, codes], axis=-1).reshape(*lead, -1)


def dequantize(rows: mx.array, kind: str, dim: int) -> mx.array:
    """Stored bytes ``[..., row bytes]`` -> f32 rows ``[..., dim]`` in the turned space (as
    the keys' dot products and the values' sums take them)."""
    lead = rows.shape[:-1]
    blocks = rows.reshape(*lead, dim // 32, BLOCK_TYPES[kind][1])
    d = mx.view(blocks[..., :2], mx.float16).astype(mx.float32)  # [..., blocks, 1]
    qs = blocks[..., 2:]
    if kind == "q8_0":
        codes = mx.view(qs, mx.int8).astype(mx.float32)
    else:
        codes = mx.concatenate([qs & 15, qs >> 4], axis=-1).astype(mx.float32) - 8.0
    return (d * codes).reshape(*lead, dim)


__all__ = ["QUANT_KV", "dequantize", "quantize", "turn"]
