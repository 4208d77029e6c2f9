"""The KV cache types: how one cached key or value row of ``dim`` numbers is stored.

- ``f32``, ``f16``: the numbers (f16 rounded to nearest even);
- ``q8_0``, ``q4_0``: ggml's blocks of 32 (an f16 scale and 32 int8, 34 bytes; or 32
  4-bit codes, 18 bytes), quantized as llama.cpp quantizes its cache rows; the row length
  must be a multiple of 32. Where the row length is a multiple of 64 the rows are kept
  turned by an orthonormal Walsh-Hadamard matrix before they are quantized, as llama.cpp
  keeps its quantized caches (llama-kv-cache.cpp, attn_rot_k/attn_rot_v): keys over
  blocks of the largest power of two (64 or more) dividing the length, values over blocks
  of 64. A kernel turns the query the same way and its output back (`hadamard_block`);
  the decoder here turns rows back, so decoded rows are the model's numbers. The turn
  spreads a block's outliers over it, so its scale loses less: SmolLM2-135M's perplexity
  with a q4_0 cache is 5.9% above llama.cpp's without it and agrees with it;
- ``tq3``, ``tq2``: TurboQuant (`cera.kv_turboquant`): a fixed random rotation, then an
  optimal scalar quantizer per rotated coordinate and the row's norm (f16); tq3 spends 4
  bits a coordinate on keys and 3 on values (60 bytes a key and value row of 64 numbers:
  23% of f16's), tq2 3 and 2 (44 bytes: 17%); the row length must be a multiple of 8.
  SmolLM2-135M's perplexity (chunks of 256) is 5.3% above f16's with tq3, 33% with tq2 (keys
  kept less calibrated offsets, `cera.generation.key_offsets`).

Everything a backend or the host storage needs to know about a type is here: its bytes per
row (keys and values may differ), the code kernels are told, and the numpy encoder and
decoder that the reference backend runs and every backend is tested against.
"""

from __future__ import annotations

import numpy as np

from .errors import UnsupportedOperation

KV_TYPE_NAMES = ("f16", "f32", "q8_0", "q4_0", "tq3", "tq2")
KV_CODES = {"f32": 0, "f16": 1, "q8_0": 2, "q4_0": 3, "tq3": 4, "tq2": 5}  # what kernels are told
KV_DTYPES = {"f16": np.float16, "f32": np.float32}  # the rest are bytes (np.uint8)
BLOCK_TYPES = {"q8_0": (32, 34), "q4_0": (32, 18)}  # values per block, bytes per block
TURBOQUANT_BITS = {"tq3": (4, 3), "tq2": (3, 2)}  # the scalar quantizer's bits a coordinate: (keys, values)


# 1: q8_0 rows kept unturned (before the Walsh-Hadamard turn); 2: TurboQuant keys and values
# of equal bits (3 for tq3, 2 for tq2); 3: now
KV_ROWS_VERSION = 3


def hadamard_block(kv_type: str, dim: int, key: bool = True) -> int:
    """The Walsh-Hadamard block rows of ``dim`` numbers of ``kv_type`` are turned over (0: not
    turned); see the module docstring."""
    if kv_type not in BLOCK_TYPES or dim % 64:
        return 0
    if not key:
        return 64
    n = 64
    while dim % (2 * n) == 0:
        n *= 2
    return n


def hadamard_turn(x: np.ndarray, n: int) -> np.ndarray:
    """Rows ``[..., dim]`` turned by the orthonormal Walsh-Hadamard matrix of order ``n``
    (Sylvester's, as ggml's; its own inverse) block by block, in float32."""
    x = np.asarray(x, np.float32)
    lead = (*x.shape[:-1], x.shape[-1] // n)
    y = x.reshape(*lead, n) * np.float32(1.0 / np.sqrt(np.float32(n)))
    length = 1
    while length < n:
        y = y.reshape(*lead, n // (2 * length), 2, length)
        u, v = y[..., 0, :], y[..., 1, :]
        y = np.stack([u + v, u - v], axis=-2)
        length *= 2
    return y.reshape(x.shape)


def kv_dtype(kv_type: str):
    return KV_DTYPES.get(kv_type, np.uint8)


def check_dim(kv_type: str, dim: int) -> str | None:
    """None if rows of ``dim`` numbers can be kept in ``kv_type``, else why not."""
    if kv_type in BLOCK_TYPES and dim % 32:
        return f"a {kv_type} KV cache stores blocks of 32 numbers, so it needs head dimensions that are multiples of 32"
    if kv_type in TURBOQUANT_BITS and dim % 8:
        return f"a {kv_type} KV cache packs 8 coordinates a byte, so it needs head dimensions that are multiples of 8"
    return None


def row_size(kv_type: str, dim: int, key: bool = True) -> int:
    """Elements (f16/f32) or bytes (the rest) of one cached key (``key``) or value row."""
    if kv_type in BLOCK_TYPES:
        per, nbytes = BLOCK_TYPES[kv_type]
        return dim // per * nbytes
    if kv_type in TURBOQUANT_BITS:
        return 2 + TURBOQUANT_BITS[kv_type][0 if key else 1] * dim // 8
    return dim


def row_bytes(kv_type: str, dim: int, key: bool = True) -> int:
    """Bytes of one cached row."""
    return row_size(kv_type, dim, key) * np.dtype(kv_dtype(kv_type)).itemsize


def cell_bytes(kv_type: str, k_dim: int, v_dim: int, n_kv_heads: int = 1) -> int:
    """Bytes one cell (one token) takes in one attention layer."""
    return n_kv_heads * (row_bytes(kv_type, k_dim, True) + row_bytes(kv_type, v_dim, False))


def check_type(kv_type: str) -> None:
    if kv_type not in KV_CODES:
        raise UnsupportedOperation(
            f"KV cache type {kv_type!r} does not exist; use one of {', '.join(KV_TYPE_NAMES)}"
        )


def encode(x: np.ndarray, kv_type: str, key: bool = True, turned: bool = True) -> np.ndarray:
    """Rows ``[..., dim]`` as stored: ``[..., row_size]`` of the type's dtype (``turned=False``:
    q8_0/q4_0 rows as version 1 of the rows kept them, without the Walsh-Hadamard turn)."""
    if kv_type in KV_DTYPES:
        return np.asarray(x).astype(KV_DTYPES[kv_type])
    if kv_type in TURBOQUANT_BITS:
        from . import kv_turboquant

        return kv_turboquant.encode(x, kv_type, key)
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import quantize

    x = np.ascontiguousarray(x, np.float32)
    n = hadamard_block(kv_type, x.shape[-1], key) if turned else 0
    return quantize(hadamard_turn(x, n) if n else x, GGMLQuantizationType[kv_type.upper()])


def decode(x: np.ndarray, kv_type: str, key: bool = True, turned: bool = True) -> np.ndarray:
    """Stored rows back to numbers, float64 ``[..., dim]``."""
    if kv_type in KV_DTYPES:
        return np.asarray(x).astype(np.float64)
    if kv_type in TURBOQUANT_BITS:
        from . import kv_turboquant

        return kv_turboquant.decode(x, kv_type, key)
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize

    rows = dequantize(np.ascontiguousarray(x), GGMLQuantizationType[kv_type.upper()])
    n = hadamard_block(kv_type, rows.shape[-1], key) if turned else 0
    return (hadamard_turn(rows, n) if n else rows).astype(np.float64)


__all__ = [
    "KV_CODES", "KV_ROWS_VERSION", "KV_TYPE_NAMES", "check_dim", "hadamard_block", "hadamard_turn", "check_type", "cell_bytes", "decode", "encode", "kv_dtype", "row_bytes",
    "row_size",
]  # fmt: skip
