"""Weights as MLX arrays, made from a tensor's GGUF bytes at load (capabilities.TYPES says how
per type): MLX's affine quantized layout where the type maps exactly (blocks.py), the
file's own float dtype for F32/F16/BF16, float32 values (the `gguf` package's
dequantization, logged once per type) for the types MLX's layout cannot hold."""

from __future__ import annotations

import logging
import math

import numpy as np

from cera.backend import Weight

from . import blocks
from .capabilities import DEQUANTIZED, QUANTIZED

log = logging.getLogger("cera.backend.metal")
_logged: set[str] = set()


class MetalWeight(Weight):
    """One tensor on the MLX device. ``quant`` is (packed, scales, biases, bits) with the
    leading dimensions of the tensor (experts, rows), or None; ``dense`` an array in numpy
    order otherwise. ``how`` says which (capabilities.TYPES)."""

    def __init__(self, name, ggml_type, shape, quant=None, dense=None, how=""):
        self.name = name
        self.ggml_type = ggml_type
        self.shape = tuple(int(d) for d in shape)
        self.quant = quant
        self.dense = dense
        self.how = how

    @property
    def nbytes(self) -> int:
        arrays = self.quant[:3] if self.quant is not None else (self.dense,)
        return sum(int(a.nbytes) for a in arrays)

    @property
    def numpy_shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.shape))

    def values(self, dtype=None):
        """The whole tensor as a float array in numpy order (small weights: norms, biases)."""
        import mlx.core as mx

        if self.quant is not None:
            w, s, b, bits = self.quant
            out = mx.dequantize(w, s, b, group_size=blocks.GROUP, bits=bits)
        else:
            out = self.dense
        return out.astype(dtype or mx.float32)

    def __repr__(self) -> str:
        return f"MetalWeight({self.name!r}, {self.ggml_type}, shape={self.shape})"


def footprint(info) -> int:
    """Bytes a tensor takes here (capabilities.TYPES; README's table)."""
    n = info.n_elements
    t = info.type_name
    if t in QUANTIZED:
        return n * blocks.EXACT[t][0] // 8 + n // blocks.GROUP * 8
    return n * {"F16": 2, "BF16": 2}.get(t, 4)


def load(gguf, name: str, info, how: str) -> MetalWeight:
    """The tensor ``name`` of ``gguf`` as a MetalWeight."""
    import mlx.core as mx

    t = info.type_name
    shape = tuple(info.shape)
    nshape = tuple(reversed(shape))
    data = gguf.tensor_data(name)
    if t == "F32":
        return MetalWeight(name, t, shape, dense=mx.array(np.asarray(data, np.float32).reshape(nshape)), how=how)
    if t == "F16":
        return MetalWeight(name, t, shape, dense=mx.array(np.asarray(data, np.float16).reshape(nshape)), how=how)
    if t == "BF16":
        bits = mx.array(np.ascontiguousarray(data, np.uint16).reshape(nshape))
        return MetalWeight(name, t, shape, dense=bits.view(mx.bfloat16), how=how)
    k = shape[0]
    rows = math.prod(shape[1:]) if len(shape) > 1 else 1
    raw = np.asarray(data).reshape(rows, -1)
    if t in QUANTIZED:
        q, s, b = blocks.unpack(t, raw, k)
        bits = blocks.EXACT[t][0]
        lead = nshape[:-1]
        packed = blocks.pack(q, bits)
        quant = (
            mx.array(packed.reshape(lead + (packed.shape[-1],))),
            mx.array(s.reshape(lead + (s.shape[-1],))),
            mx.array(b.reshape(lead + (b.shape[-1],))),
            bits,
        )
        return MetalWeight(name, t, shape, quant=quant, how=how)
    if t in DEQUANTIZED:
        from gguf.constants import GGMLQuantizationType
        from gguf.quants import dequantize

        if t not in _logged:
            _logged.add(t)
            log.warning(
                "backend 'metal': %s tensors (first: %s) are dequantized to float32 at load: no MLX quantized "
                "layout holds them exactly (4 bytes a weight instead of the file's %s)",
                t, name, _bytes_per_weight(t),
            )  # fmt: skip
        values = dequantize(np.ascontiguousarray(raw), GGMLQuantizationType[t]).astype(np.float32, copy=False)
        return MetalWeight(name, t, shape, dense=mx.array(values.reshape(nshape)), how=how)
    raise AssertionError(f"type {t} is declared but has no loader")  # the backend checks types first


def _bytes_per_weight(t: str) -> str:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[t]]
    return f"{size / block:.3g}"
