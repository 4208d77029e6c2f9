"""Quantized matrix products against dequantize-then-matmul in float64.

Tolerances are derived, per type, in cpu_reference.matmul_error_bound: the activations
are quantized (Q8_0 / Q8_1 / Q8_K / f16 / bf16, as llama.cpp pairs them with each weight
type), which bounds |kernel - W @ x| by sum_j |W_j| |x~_j - x_j| plus float32 rounding.
A second test removes the activation error by comparing against W @ x~ with x~ from an
independent numpy model of llama.cpp's quantizers, leaving only float32 rounding (a few
ulps of sum |W||x~|): any wrong scale, offset or element order shows up there.
"""

from __future__ import annotations

import numpy as np
import pytest
from cpu_reference import (
    ACT_FORMAT,
    ALL_TYPES,
    FLOAT_TYPES,
    activation_bytes,
    block_size,
    exact_activation_error_bound,
    matmul_error_bound,
    quantized_activation,
    random_weight,
)
from gguf.constants import GGMLQuantizationType
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _k_unit(t: str) -> int:
    return block_size(t) if t not in FLOAT_TYPES else 8


def _rand_x(rng, m, k):
    # activations of mixed magnitudes, like hidden states with outlier channels
    x = rng.standard_normal((m, k)) * np.exp(rng.uniform(-2, 2, (1, k)))
    return x.astype(np.float32)


@st.composite
def product_case(draw, t):
    seed = draw(st.integers(0, 2**32 - 1))
    k = _k_unit(t) * draw(st.integers(1, 6))
    n = draw(st.integers(1, 24))
    m = draw(st.integers(1, 4))
    return seed, k, n, m


def _case(be, t, seed, k, n, m, bias=False):
    rng = np.random.default_rng(seed)
    data, w = random_weight(t, n, k, rng)
    x = _rand_x(rng, m, k)
    weight = be.weight("w", data, t, shape=(k, n))
    b = be.weight("b", rng.standard_normal(n).astype(np.float32)) if bias else None
    return data, w, x, weight, b


@pytest.mark.parametrize("t", ALL_TYPES)
def test_matmul_within_derived_tolerance(be, t):
    @FAST
    @given(case=product_case(t), bias=st.booleans())
    def check(case, bias):
        seed, k, n, m = case
        data, w, x, weight, b = _case(be, t, seed, k, n, m, bias)
        y = be.linear(x, weight, b)
        assert y.shape == (m, n) and y.dtype == np.float32
        for r in range(m):
            ref = w @ x[r].astype(np.float64)
            x_used = quantized_activation(ACT_FORMAT[t], x[r])
            tol = matmul_error_bound(t, data, w, x[r], x_used)
            if b is not None:
                ref = ref + b.dense().astype(np.float64)
                tol = tol + 2 * 2.0**-24 * np.abs(ref)
            err = np.abs(y[r] - ref)
            assert np.all(err <= tol), f"{t}: row {r}: error {err.max():.3g} > bound {tol[err.argmax()]:.3g}"

    check()


@pytest.mark.parametrize("t", ALL_TYPES)
def test_matmul_exact_given_quantized_activations(be, t):
    @FAST
    @given(case=product_case(t))
    def check(case):
        seed, k, n, m = case
        data, w, x, weight, _ = _case(be, t, seed, k, n, m)
        y = be.linear(x, weight)
        for r in range(m):
            x_used = quantized_activation(ACT_FORMAT[t], x[r])
            ref = w @ x_used
            tol = exact_activation_error_bound(t, data, w, x_used, x[r])
            err = np.abs(y[r] - ref)
            assert np.all(err <= tol), f"{t}: row {r}: error {err.max():.3g} > bound {tol[err.argmax()]:.3g}"

    check()


def _act_bytes_from_c(backend, t: str, x: np.ndarray) -> bytes:
    from cera_backend_cpu._native import ffi, lib

    tid = int(GGMLQuantizationType[t])
    n = lib.cera_act_row_bytes(tid, x.size)
    out = np.zeros(n, np.uint8)
    assert lib.cera_quantize_act(backend._ctx, tid, ffi.from_buffer("float[]", x), ffi.from_buffer(out), x.size) == 0
    return out.tobytes()


def _activation_rows(rng, k):
    rows = [_rand_x(rng, 1, k)[0] for _ in range(4)]
    z = _rand_x(rng, 1, k)[0]
    z[:32] = 0.0  # an all-zero block
    rows.append(z)
    tie = _rand_x(rng, 1, k)[0] * 0.1
    tie[3], tie[10] = -5.0, 5.0  # the same magnitude with both signs: the first one sets Q8_K's sign
    rows.append(tie)
    rows.append((rng.standard_normal(k) * 1e-6).astype(np.float32))  # f16-subnormal block scales
    return rows


@pytest.mark.parametrize("t", ["F16", "BF16", "Q8_0", "Q4_1", "Q4_K"])  # one weight type per activation format
def test_activation_quantization_bytes(be, scalar_be, variant_backends, t):
    """Every variant quantizes activations to exactly the bytes of the numpy model of
    llama.cpp's x86 quantizers (Q8_0/Q8_1: round-half-even of x*127/amax; Q8_K: the
    reference's -127/max of the signed extreme)."""
    rng = np.random.default_rng(5)
    fmt = ACT_FORMAT[t]
    for x in _activation_rows(rng, 512):
        want = activation_bytes(fmt, x)
        for name, backend in {"default": be, "scalar": scalar_be, **variant_backends}.items():
            # the row continues with side data of the SIMD kernels (see csrc/internal.h)
            got = _act_bytes_from_c(backend, t, x)
            assert got[: len(want)] == want, f"{fmt} activation bytes differ on variant {name}"


@pytest.mark.parametrize("t", ALL_TYPES)
def test_simd_variants_match_scalar(scalar_be, variant_backends, t):
    """Each SIMD variant against the scalar path. Both see bit-identical activations (the
    test above), so each is within E_fp of W @ x~ and they are within 2 E_fp of each other."""
    if not variant_backends:
        pytest.skip("no SIMD variant runs here (or CERA_CPU_VARIANT forces scalar)")
    rng = np.random.default_rng(17)
    for k_blocks, n, m in [(1, 3, 1), (7, 33, 1), (16, 20, 3), (3, 17, 19)]:
        k = _k_unit(t) * k_blocks
        data, w = random_weight(t, n, k, rng)
        x = _rand_x(rng, m, k)
        ys = scalar_be.linear(x, scalar_be.weight("w", data, t, shape=(k, n)))
        for name, backend in variant_backends.items():
            yv = backend.linear(x, backend.weight("w", data, t, shape=(k, n)))
            for r in range(m):
                x_used = quantized_activation(ACT_FORMAT[t], x[r])
                tol = 2 * exact_activation_error_bound(t, data, w, x_used, x[r])
                err = np.abs(yv[r] - ys[r])
                assert np.all(err <= tol), f"{t} on {name}: differs from scalar by {err.max():.3g}"


@pytest.mark.parametrize("t", ["Q4_0", "Q4_K", "Q6_K", "F16"])
def test_thread_count_does_not_change_results(t):
    """Threads split whole output elements, so 1 and 2 threads give identical bits,
    for decode (one row) and prefill (many rows, tiles)."""
    from cera_backend_cpu.backend import CpuBackend

    rng = np.random.default_rng(23)
    k, n = 4 * 256, 300  # large enough that the pool is used
    data, _ = random_weight(t, n, k, rng)
    one, two = CpuBackend(threads=1), CpuBackend(threads=2)
    for m in (1, 37):
        x = _rand_x(rng, m, k)
        y1 = one.linear(x, one.weight("w", data, t, shape=(k, n)))
        y2 = two.linear(x, two.weight("w", data, t, shape=(k, n)))
        np.testing.assert_array_equal(y1, y2)


def test_real_weight_product(be, gemma3_path):
    """A real Q4_K matrix of gemma-3, within its derived bound."""
    from gguf.quants import dequantize

    from cera.formats.gguf import GGUFFile

    f = GGUFFile(gemma3_path)
    name = "blk.0.attn_output.weight"
    weight = be.upload(f, name)
    data = f.tensor_data(name)
    w = dequantize(data, GGMLQuantizationType[weight.ggml_type]).astype(np.float64)
    x = _rand_x(np.random.default_rng(1), 2, weight.shape[0])
    y = be.linear(x, weight)
    for r in range(2):
        x_used = quantized_activation(ACT_FORMAT[weight.ggml_type], x[r])
        tol = matmul_error_bound(weight.ggml_type, data, w, x[r], x_used)
        assert np.all(np.abs(y[r] - w @ x[r].astype(np.float64)) <= tol)


def test_linear_takes_leading_dimensions(be):
    rng = np.random.default_rng(2)
    data, w = random_weight("Q8_0", 6, 64, rng)
    weight = be.weight("w", data, "Q8_0", shape=(64, 6))
    x = _rand_x(rng, 6, 64).reshape(2, 3, 64)
    y = be.linear(x, weight)
    assert y.shape == (2, 3, 6)
    np.testing.assert_array_equal(y.reshape(6, 6), be.linear(x.reshape(6, 64), weight))


# -- many activation rows: the tiled microkernel (csrc/gemm.c) ------------------------------------

GEMM_TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "Q4_K", "Q5_K", "Q6_K"]


@pytest.mark.parametrize("t", GEMM_TYPES)
def test_many_row_products_exact_given_quantized_activations(be, scalar_be, t):
    """From 16 activation rows on, products go through tiles of 8 unpacked weight rows
    (n = 21 ends on a short tile): each row within E_fp of W @ x~."""
    rng = np.random.default_rng(29)
    for k_blocks, n, m in [(2, 16, 16), (5, 21, 23), (1, 8, 37)]:
        k = _k_unit(t) * k_blocks
        data, w = random_weight(t, n, k, rng)
        x = _rand_x(rng, m, k)
        for backend in (be, scalar_be):
            y = backend.linear(x, backend.weight("w", data, t, shape=(k, n)))
            for r in range(m):
                x_used = quantized_activation(ACT_FORMAT[t], x[r])
                tol = exact_activation_error_bound(t, data, w, x_used, x[r])
                err = np.abs(y[r] - w @ x_used)
                assert np.all(err <= tol), (
                    f"{t} ({backend.variant}): row {r}: error {err.max():.3g} > {tol[err.argmax()]:.3g}"
                )


@pytest.mark.parametrize("t", GEMM_TYPES)
def test_many_row_microkernels_equal_scalar_bit_for_bit(scalar_be, variant_backends, t):
    """The SIMD microkernels perform the scalar one's float steps in its order: same bits."""
    from cera_backend_cpu._native import lib

    if not variant_backends:
        pytest.skip("no SIMD variant runs here (or CERA_CPU_VARIANT forces scalar)")
    rng = np.random.default_rng(31)
    k = _k_unit(t) * 3
    data, _ = random_weight(t, 24, k, rng)
    x = _rand_x(rng, 18, k)
    ys = scalar_be.linear(x, scalar_be.weight("w", data, t, shape=(k, 24)))
    for name, backend in variant_backends.items():
        if t in ("Q8_0", "IQ4_NL") and "vnni" not in name:
            continue  # bytes above 127 would saturate vpmaddubsw: these run the row kernels there
        yv = backend.linear(x, backend.weight("w", data, t, shape=(k, 24)))
        np.testing.assert_array_equal(yv, ys, err_msg=f"{t} on {name}")
    assert lib is not None
