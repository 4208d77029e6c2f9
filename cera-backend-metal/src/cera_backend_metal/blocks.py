"""GGUF blocks -> MLX's affine quantized layout, exactly.

MLX stores a quantized matrix ``[rows, k]`` as ``bits``-bit unsigned integers packed into
uint32 words (a little-endian bit stream: value j occupies bits ``[bits*j, bits*j + bits)``
of the row's bytes), and per group of ``group_size`` consecutive values of a row a
``scale`` and a ``bias``: ``w = scale * q + bias``. The GGUF types below are that form
already, per group of 32, once the integers are unpacked and each group's scale and bias
worked out from the block's fields (all in float32, where every product involved is exact):

- Q4_0 / Q5_0: ``d * (q - 8)`` / ``d * (q - 16)``: scale d, bias -8d / -16d;
- Q4_1 / Q5_1: ``d * q + m``: scale d, bias m;
- Q8_0: ``d * q`` with q signed: stored as q + 128, scale d, bias -128d;
- Q4_K / Q5_K: eight sub-blocks of 32 per 256 values, ``d*sc_j * q - dmin*m_j``: scale
  d*sc_j, bias -dmin*m_j (the 6-bit sub-block scale and minimum folded in).

The products ``d * q`` and ``d*sc_j * q`` are exact in float32 (at most 11 + 6 + 5 bits),
so ``scale * q + bias`` rounds once, where the `gguf` package's dequantization rounds
(tests/backend_metal/test_blocks.py checks every value bit for bit against it).
"""

from __future__ import annotations

import numpy as np

# type -> (bits, bytes per block of its block size, block size)
EXACT = {
    "Q4_0": (4, 18, 32),
    "Q4_1": (4, 20, 32),
    "Q5_0": (5, 22, 32),
    "Q5_1": (5, 24, 32),
    "Q8_0": (8, 34, 32),
    "Q4_K": (4, 144, 256),
    "Q5_K": (5, 176, 256),
}
GROUP = 32


def _f16(b: np.ndarray) -> np.ndarray:
    """Two bytes per row -> float32 [n]."""
    return np.ascontiguousarray(b).view(np.float16).reshape(-1).astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[n, 16] bytes -> [n, 32]: the low nibbles, then the high ones (ggml's order)."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _high_bits(qh: np.ndarray, count: int) -> np.ndarray:
    """[n, 4] bytes of a little-endian uint32 -> [n, count] bits 0..count-1."""
    word = np.ascontiguousarray(qh).view(np.uint32).reshape(-1, 1)
    return ((word >> np.arange(count, dtype=np.uint32)) & 1).astype(np.uint8)


def _scale_min_k4(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 12 bytes of a Q4_K / Q5_K block -> eight 6-bit scales and eight 6-bit minimums."""
    s = scales.reshape(-1, 3, 4)
    d, m, md = s[:, 0], s[:, 1], s[:, 2]
    sc = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc.astype(np.float32), mn.astype(np.float32)


def unpack(ggml_type: str, raw: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``raw`` [rows, row bytes] of ``ggml_type`` -> (q uint8 [rows, k], scale float32
    [rows, k/32], bias float32 [rows, k/32])."""
    bits, size, block = EXACT[ggml_type]
    rows = raw.shape[0]
    b = np.ascontiguousarray(raw).reshape(-1, size)  # one block a row
    n = b.shape[0]
    if ggml_type in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"):
        d = _f16(b[:, 0:2])
        if ggml_type == "Q8_0":
            q = (b[:, 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
            scale, bias = d, -128.0 * d
        elif ggml_type == "Q4_0":
            q = _nibbles(b[:, 2:])
            scale, bias = d, -8.0 * d
        elif ggml_type == "Q4_1":
            q = _nibbles(b[:, 4:])
            scale, bias = d, _f16(b[:, 2:4])
        elif ggml_type == "Q5_0":
            q = _nibbles(b[:, 6:]) | (_high_bits(b[:, 2:6], 32) << 4)
            scale, bias = d, -16.0 * d
        else:  # Q5_1
            q = _nibbles(b[:, 8:]) | (_high_bits(b[:, 4:8], 32) << 4)
            scale, bias = d, _f16(b[:, 2:4])
        scale, bias = scale.reshape(n, 1), bias.reshape(n, 1)
    else:  # Q4_K, Q5_K: d, dmin, 12 bytes of scales, (Q5_K: 32 bytes of high bits), 128 of nibbles
        d, dmin = _f16(b[:, 0:2]).reshape(n, 1), _f16(b[:, 2:4]).reshape(n, 1)
        sc, mn = _scale_min_k4(b[:, 4:16])
        scale, bias = d * sc, -(dmin * mn)
        qs = b[:, -128:].reshape(n, 4, 32)  # 4 chunks of 64 values: low nibbles, then high
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).reshape(n, 8, 32)
        if ggml_type == "Q5_K":
            qh = b[:, 16:48].reshape(n, 1, 32)
            hi = (qh >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1  # sub-block j takes bit j
            q = q | (hi << 4)
        q = q.reshape(n, block)
    return (
        q.reshape(rows, k).astype(np.uint8),
        np.ascontiguousarray(scale, np.float32).reshape(rows, k // GROUP),
        np.ascontiguousarray(bias, np.float32).reshape(rows, k // GROUP),
    )


def pack(q: np.ndarray, bits: int) -> np.ndarray:
    """uint8 values < 2**bits [rows, k] -> MLX's packed uint32 [rows, k * bits / 32]."""
    rows, k = q.shape
    if bits in (4, 8):  # whole bytes of one or two values: no bit stream needed
        by = q if bits == 8 else (q[:, 0::2] | (q[:, 1::2] << 4))
    else:
        bit = ((q[..., None] >> np.arange(bits, dtype=np.uint8)) & 1).reshape(rows, k * bits)
        by = np.packbits(bit.reshape(rows, -1, 8), axis=-1, bitorder="little").reshape(rows, -1)
    return np.ascontiguousarray(by, np.uint8).view(np.uint32)
