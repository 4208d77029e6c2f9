"""The C top_k and take (the read-back of a sampler's candidates) against the op table's
reference (`cera.graph.ops`: a stable sort of -x): the same ids in the same order on ties, signed
zeros, infinities and NaN, for every k; and take's values are the logits at those ids."""

from __future__ import annotations

import numpy as np
import pytest

from cera.graph.ops import take, top_k

native = pytest.importorskip("cera_backend_cpu._native")
ffi, lib = native.ffi, native.lib


def _c_top_k(x: np.ndarray, k: int) -> np.ndarray:
    x = np.ascontiguousarray(x, np.float32)
    out = np.zeros((x.shape[0], k), np.int32)
    rc = lib.cera_top_k(ffi.NULL, ffi.cast("float *", x.ctypes.data), x.shape[0], x.shape[1], k,
                        ffi.cast("int32_t *", out.ctypes.data))  # fmt: skip
    assert rc == 0
    return out


def _rows(rng, kind: str, n: int) -> np.ndarray:
    x = rng.normal(size=(3, n)).astype(np.float32)
    if kind == "ties":
        x = np.round(x, 1)
    elif kind == "specials":
        x[:, rng.integers(0, n, 6)] = np.nan
        x[:, rng.integers(0, n, 4)] = -np.inf
        x[:, rng.integers(0, n, 3)] = np.inf
        x[:, rng.integers(0, n, 5)] = -0.0
        x[:, rng.integers(0, n, 5)] = 0.0
    elif kind == "constant":
        x[:] = 1.5
    elif kind == "all_nan":
        x[:] = np.nan
    return x


@pytest.mark.parametrize("kind", ["plain", "ties", "specials", "constant", "all_nan"])
@pytest.mark.parametrize("k", [1, 2, 5, 40])
def test_top_k_orders_as_a_stable_sort(kind, k):
    rng = np.random.default_rng([k, len(kind), ord(kind[0])])
    for n in (k, 50, 1000):
        if n < k:
            continue
        x = _rows(rng, kind, n)
        want = top_k(None, x, k=k)
        got = _c_top_k(x, k)
        np.testing.assert_array_equal(got, want, err_msg=f"{kind} k={k} n={n}")
        values = np.zeros(got.shape, np.float32)
        rc = lib.cera_take(ffi.NULL, ffi.cast("float *", x.ctypes.data), x.shape[0], n,
                           ffi.cast("int32_t *", got.ctypes.data), k, ffi.cast("float *", values.ctypes.data))  # fmt: skip
        assert rc == 0
        np.testing.assert_array_equal(values.view(np.uint32), take(None, x, got).view(np.uint32))


def test_bad_arguments_are_refused():
    x = np.zeros((1, 4), np.float32)
    out = np.zeros((1, 8), np.int32)
    px, po = ffi.cast("float *", x.ctypes.data), ffi.cast("int32_t *", out.ctypes.data)
    assert lib.cera_top_k(ffi.NULL, px, 1, 4, 5, po) != 0  # k > n
    assert lib.cera_top_k(ffi.NULL, px, 1, 4, 0, po) != 0
    out[0, 0] = 4  # an id outside the row
    assert lib.cera_take(ffi.NULL, px, 1, 4, po, 1, ffi.cast("float *", x.ctypes.data)) != 0


def _scan_argmax(row: np.ndarray) -> int:
    """The plain scan the C argmax replaced (and llama.cpp's greedy pick): the first index
    whose value is larger than every value before it wins, so NaNs never win, except a
    NaN first value, which nothing is larger than."""
    best, v = 0, row[0]
    for i in range(1, len(row)):
        if row[i] > v:
            best, v = i, row[i]
    return best


@pytest.mark.parametrize("kind", ["normal", "ties", "specials", "constant", "all_nan", "nan_first"])
@pytest.mark.parametrize("n", [1, 15, 16, 17, 33, 1000])
def test_c_argmax_is_the_plain_scan(kind, n):
    rng = np.random.default_rng(n)
    x = _rows(rng, "specials" if kind == "nan_first" else kind, n)
    if kind == "nan_first":
        x[:, 0] = np.nan
    x = np.ascontiguousarray(x, np.float32)
    out = np.zeros(x.shape[0], np.int32)
    rc = lib.cera_argmax(ffi.NULL, ffi.cast("float *", x.ctypes.data), x.shape[0], n, ffi.cast("int32_t *", out.ctypes.data))
    assert rc == 0
    assert out.tolist() == [_scan_argmax(r) for r in x]
