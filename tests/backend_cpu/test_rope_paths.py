"""The C rope's two rotation paths give the same bits: the baseline build's (fmaf through
libm) and the FMA-instruction one a context with an x86 SIMD variant takes; and the angles
kept across calls (a decode step's, reused by every layer) are those computed afresh."""

from __future__ import annotations

import numpy as np
import pytest

native = pytest.importorskip("cera_backend_cpu._native")
ffi, lib = native.ffi, native.lib


@pytest.fixture(scope="module")
def ctx():
    err = ffi.new("char[]", 256)
    c = lib.cera_ctx_new(1, b"", err, 256)
    assert c != ffi.NULL, ffi.string(err)
    yield c
    lib.cera_ctx_free(c)


def _rope(c, x, pos, n_dims, neox, ext):
    y = np.empty_like(x)
    rc = lib.cera_rope(c, ffi.cast("float *", x.ctypes.data), ffi.cast("float *", y.ctypes.data), x.shape[0], x.shape[1],
                       x.shape[2], ffi.cast("int32_t *", pos.ctypes.data), n_dims, neox, 10000.0, 0.5, ffi.NULL, ext,
                       1.0, 32.0, 1.0, 4096)  # fmt: skip
    assert rc == 0
    return y


def test_fma_path_and_kept_angles_give_the_baseline_bits(ctx):
    rng = np.random.default_rng(0)
    for _ in range(100):
        n_tok, heads = int(rng.integers(1, 70)), int(rng.integers(1, 10))
        hd = int(rng.choice([64, 80, 128]))
        nd = int(rng.choice([hd, hd // 2])) // 2 * 2
        neox, ext = int(rng.integers(0, 2)), float(rng.choice([0.0, 1.0]))
        x = (rng.standard_normal((n_tok, heads, hd)) * 10).astype(np.float32)
        pos = rng.integers(0, 5000, n_tok).astype(np.int32)
        base = _rope(ffi.NULL, x, pos, nd, neox, ext)  # no context: the baseline path
        assert _rope(ctx, x, pos, nd, neox, ext).tobytes() == base.tobytes()
        assert _rope(ctx, x, pos, nd, neox, ext).tobytes() == base.tobytes()  # the kept angles this time
        pos2 = pos + 1
        assert _rope(ctx, x, pos2, nd, neox, ext).tobytes() == _rope(ffi.NULL, x, pos2, nd, neox, ext).tobytes()
