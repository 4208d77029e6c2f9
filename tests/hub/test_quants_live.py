"""cera.sources.quants against ggml's own quantizer (ggml_quantize_chunk in the libggml-base
that llama-cpp-python ships), byte for byte, on rows with awkward content: zeros, constants,
one spike, tiny and huge magnitudes. Skipped where llama-cpp-python is not installed."""

from __future__ import annotations

import ctypes
import glob
import os

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

from cera.sources.quants import quantize

pytestmark = pytest.mark.peer


@pytest.fixture(scope="module")
def ggml():
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    libs = glob.glob(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so*"))
    if not libs:
        pytest.skip("llama-cpp-python has no libggml-base here")
    lib = ctypes.CDLL(libs[0])
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]  # fmt: skip
    return lib


def rows() -> np.ndarray:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((48, 512)).astype(np.float32) * rng.uniform(1e-3, 3, (48, 1)).astype(np.float32)
    x[0] = 0
    x[1] = 0.25
    x[2, :] = 0
    x[2, 17] = 5.0
    x[3] *= 1e-6
    x[4] *= 1e4
    x[5, :256] = np.abs(x[5, :256])  # all positive: the minimum clamps to 0
    x[6, 32:64] = 0  # one empty sub-block
    x[7] = np.round(x[7] * 4) / 4  # values on a grid: ties in rounding
    return x


@pytest.mark.parametrize("name", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"])
def test_quantizers_equal_ggml(ggml, name):
    t = T[name]
    x = rows()
    bs, ts = GGML_QUANT_SIZES[t]
    want = np.zeros(x.size // bs * ts, dtype=np.uint8)
    ggml.ggml_quantize_chunk(int(t), x.ctypes.data, want.ctypes.data, 0, x.shape[0], x.shape[1], None)
    got = quantize(x, t).reshape(-1)
    assert np.array_equal(got, want), f"{name}: {(got != want).sum()} of {want.size} bytes differ"
