"""Weights as the HTP graphs take them: float16 values made from the GGUF tensor.

The HTP runs these graphs in float16 (`enable_htp_fp16_precision`), so every tensor type is
converted to float16 once, when a graph that uses it is built: F16 is taken as stored;
F32 and BF16 are rounded to the nearest float16; every quantized type (Q4_0, Q8_0, the
K-quants, IQ4_NL, ...) is dequantized by the `gguf` package's reference decoder and the
values rounded to float16. A value outside float16's range (|x| > 65504) is refused
rather than turned into infinity. Nothing is kept in block form: QNN's block quantization
(int4/int8 with per-block scales) is not used, so a quantized file takes 2 bytes per
weight in the context binary (see the README).
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path

import numpy as np

from cera.backend import Weight
from cera.errors import UnsupportedTensorType

F16_MAX = 65504.0


class HexagonWeight(Weight):
    """A weight bound by name: the GGUF file's tensor, converted on first use."""

    def __init__(self, gguf, name: str):
        info = gguf.tensors[name]
        self.name = name
        self.ggml_type = info.type_name
        self.shape = tuple(int(d) for d in info.shape)
        self._gguf = gguf
        self._f16: np.ndarray | None = None
        self.file = Path(gguf.path)

    @property
    def numpy_shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.shape))

    def values_f16(self) -> np.ndarray:
        """float16 values in numpy shape (reverse of GGML's)."""
        if self._f16 is None:
            self._f16 = to_f16(self._gguf, self.name, self.ggml_type, self.numpy_shape)
        return self._f16

    def release(self) -> None:
        """Drop the converted copy (it lives in the compiled graph from then on)."""
        self._f16 = None

    def __repr__(self) -> str:
        return f"HexagonWeight({self.name!r}, {self.ggml_type}, shape={self.shape})"


def to_f16(gguf, name: str, ggml_type: str, numpy_shape: tuple[int, ...]) -> np.ndarray:
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize

    raw = np.asarray(gguf.tensor_data(name)) if hasattr(gguf, "tensor_data") else None
    if raw is None:
        raise UnsupportedTensorType(name, ggml_type, "hexagon", "the GGUF reader gave no data for it")
    if ggml_type == "F16":
        values = raw.view(np.float16).reshape(numpy_shape)
        return np.ascontiguousarray(values)
    if ggml_type == "F32":
        values = raw.view(np.float32)
    else:
        try:
            values = dequantize(np.ascontiguousarray(raw).reshape(-1).view(np.uint8), GGMLQuantizationType[ggml_type])
        except (KeyError, NotImplementedError, ValueError) as e:
            raise UnsupportedTensorType(
                name, ggml_type, "hexagon", f"the gguf package cannot decode it ({e})"
            ) from None
    values = np.asarray(values, np.float32).reshape(-1)
    if values.size != math.prod(numpy_shape):
        raise UnsupportedTensorType(name, ggml_type, "hexagon", f"{values.size} values for shape {numpy_shape}")
    big = float(np.abs(values).max()) if values.size else 0.0
    if not math.isfinite(big) or big > F16_MAX:
        raise UnsupportedTensorType(
            name, ggml_type, "hexagon",
            f"it holds values up to {big:g}, outside float16's range (the HTP graphs compute in float16)",
        )  # fmt: skip
    return values.astype(np.float16).reshape(numpy_shape)


_hashes: dict[tuple, str] = {}


def file_hash(path: Path) -> str:
    """SHA-256 of a model file (kept per path, size and modification time)."""
    st = os.stat(path)
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    h = _hashes.get(key)
    if h is None:
        d = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                d.update(chunk)
        h = _hashes[key] = d.hexdigest()
    return h
