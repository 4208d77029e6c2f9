"""TensorFlow Lite's integer requantization, vectorised with numpy.

A quantized kernel accumulates in int32 and rescales the sum by a real factor
``s = input_scale * weight_scale / output_scale`` given as a 31-bit fixed-point multiplier
and a power-of-two shift (`quantize_multiplier`, as TFLite's ``QuantizeMultiplier``). The
rescaling (`multiply_by_quantized_multiplier`) is gemmlowp's: a saturating rounding doubling
high multiply, then a rounding right shift, rounding half away from zero. These are the
reference kernels' rules (and TFLite Micro's, which microWakeWord models target), so
results equal theirs to the integer.
"""

from __future__ import annotations

import math

import numpy as np


def quantize_multiplier(real: float) -> tuple[int, int]:
    """(multiplier in [2^30, 2^31), shift) with ``real ~= multiplier * 2^(shift - 31)``."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    fixed = int(round_half_away(q * (1 << 31)))
    if fixed == 1 << 31:
        fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return fixed, shift


def round_half_away(x: float) -> float:
    """C's ``round``: halves go away from zero (Python's `round` goes to even)."""
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


class Requantizer:
    """Per-channel (or per-tensor) ``MultiplyByQuantizedMultiplier`` over int64 accumulators.

    ``scales`` are the real factors, one per output channel (the last axis) or one in all.
    `apply` works in place on an int64 array whose last axis is the channel, with a scratch
    array of the same shape, so that no memory is allocated per call.
    """

    def __init__(self, scales):
        pairs = [quantize_multiplier(float(s)) for s in np.atleast_1d(scales)]
        mult = np.array([m for m, _ in pairs], dtype=np.int64)
        shift = np.array([s for _, s in pairs], dtype=np.int64)
        self.multiplier = mult
        self.left = np.maximum(shift, 0)
        self.right = np.maximum(-shift, 0)
        self.any_left = bool(self.left.any())
        self.mask = (np.int64(1) << self.right) - 1
        self.threshold = self.mask >> 1

    def apply(self, x: np.ndarray, tmp: np.ndarray, tmp2: np.ndarray) -> np.ndarray:
        """x <- MultiplyByQuantizedMultiplier(x), in place; ``tmp``, ``tmp2``: int64 scratch like x."""
        if self.any_left:
            np.left_shift(x, self.left, out=x)
        np.multiply(x, self.multiplier, out=x)  # |x * m| < 2^62: no overflow
        # + nudge (2^30, or 1 - 2^30 below zero), then / 2^31 truncated toward zero
        np.right_shift(x, 63, out=tmp)  # -1 below zero, else 0
        np.multiply(tmp, (1 << 31) - 1, out=tmp)
        tmp += 1 << 30
        x += tmp
        np.right_shift(x, 63, out=tmp)
        np.bitwise_and(tmp, (1 << 31) - 1, out=tmp)
        x += tmp
        np.right_shift(x, 31, out=x)
        # rounding divide by 2^right: + 1 where remainder > mask/2 (+1 below zero)
        np.bitwise_and(x, self.mask, out=tmp)
        tmp -= self.threshold
        np.right_shift(x, 63, out=tmp2)
        tmp += tmp2
        np.clip(tmp, 0, 1, out=tmp)
        np.right_shift(x, self.right, out=x)
        x += tmp
        return x


def rounding_high_mul_and_shift(x: np.ndarray, multiplier, left, right) -> np.ndarray:
    """MultiplyByQuantizedMultiplier on an int64 array (a new array; for load-time tables)."""
    x = np.asarray(x, dtype=np.int64) << left
    ab = x * multiplier
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    t = ab + nudge
    q = np.where(t >= 0, t >> 31, -((-t) >> 31))
    mask = (np.int64(1) << right) - 1
    rem = q & mask
    thr = (mask >> 1) + (q < 0)
    return (q >> right) + (rem > thr)
