"""Dequantization is bit-exact with the gguf package's numpy reference, for every type,
on random blocks and on real tensors of the real files; embedding rows too."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_reference import ALL_TYPES, QUANT_TYPES, block_size, random_blocks, random_weight
from gguf.constants import GGMLQuantizationType
from gguf.quants import dequantize


def _c_dequantize(t: str, data: np.ndarray, n: int) -> np.ndarray:
    from cera_backend_cpu._native import ffi, lib

    out = np.empty(n, np.float32)
    src = np.ascontiguousarray(data)
    rc = lib.cera_dequantize(int(GGMLQuantizationType[t]), ffi.from_buffer(src), ffi.from_buffer("float[]", out), n)
    assert rc == 0
    return out


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


@pytest.mark.parametrize("t", QUANT_TYPES)
@pytest.mark.parametrize("seed", range(3))
def test_random_blocks_bit_exact(t, seed):
    rng = np.random.default_rng(seed)
    n_blocks = int(rng.integers(1, 40))
    # scales of several magnitudes, subnormal f16 included
    data = random_blocks(t, 1, n_blocks * block_size(t), rng, scale=float(10.0 ** rng.uniform(-6, 1)))
    ref = dequantize(data, GGMLQuantizationType[t]).reshape(-1)
    np.testing.assert_array_equal(_bits(_c_dequantize(t, data, ref.size)), _bits(ref))


@pytest.mark.parametrize("t", ALL_TYPES)
def test_weight_dense_bit_exact(be, t):
    rng = np.random.default_rng(7)
    k = 4 * block_size(t) if t in QUANT_TYPES else 96
    data, _ = random_weight(t, 5, k, rng)
    w = be.weight("w", data, t, shape=(k, 5))
    raw = data.view(np.uint8) if t in ("F32", "F16", "BF16") else data
    ref = dequantize(raw.reshape(5, -1), GGMLQuantizationType[t]).reshape(5, k)
    np.testing.assert_array_equal(_bits(w.dense()), _bits(ref))


def test_every_f16_bit_pattern():
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    out = _c_dequantize("F16", h, h.size)
    np.testing.assert_array_equal(_bits(out), _bits(h.view(np.float16).astype(np.float32)))


def test_every_bf16_bit_pattern():
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    out = _c_dequantize("BF16", h, h.size)
    ref = dequantize(h.view(np.uint8), GGMLQuantizationType.BF16)
    np.testing.assert_array_equal(_bits(out), _bits(ref))


def test_f32_to_f16_rounds_like_numpy():
    """numpy's float32 -> float16 cast rounds to nearest even, like F16C and ggml."""
    from cera_backend_cpu._native import ffi, lib

    rng = np.random.default_rng(3)
    # every magnitude from below the smallest subnormal to past the largest half, ties included
    x = np.concatenate(
        [
            (rng.standard_normal(20000) * 10.0 ** rng.uniform(-9, 5.2, 20000)).astype(np.float32),
            np.float16(np.arange(1, 2048, dtype=np.float32) * 2.0**-24).astype(np.float32) * 1.5,  # ties
            np.array(
                [0.0, -0.0, 65504, 65519.99, 65520, -65520, 1e30, np.inf, -np.inf, 2.0**-25, 3 * 2.0**-26], np.float32
            ),
        ]
    ).astype(np.float32)
    out = np.empty(x.size, np.uint16)
    lib.cera_f32_to_f16(ffi.from_buffer("float[]", x), ffi.from_buffer("uint16_t[]", out), x.size)
    with np.errstate(over="ignore"):
        ref = x.astype(np.float16)
    np.testing.assert_array_equal(out, ref.view(np.uint16))


# -- real tensors of the real files ---------------------------------------------------------


def _check_file(be, path, rows_per_tensor=6, tensors_per_type=3):
    from cera.formats.gguf import GGUFFile

    f = GGUFFile(path)
    by_type: dict[str, list] = {}
    for info in f.tensors.values():
        by_type.setdefault(info.type_name, []).append(info)
    checked = {}
    for t, infos in by_type.items():
        picks = [infos[0], infos[len(infos) // 2], infos[-1]][:tensors_per_type]
        for info in picks:
            w = be.upload(f, info.name)
            raw = f.tensor_data(info.name)
            if raw.ndim == 1:
                ref = dequantize(raw.view(np.uint8) if t != "F32" else raw, info.ggml_type).reshape(-1)
                got = w.dense().reshape(-1)
            else:
                rows = raw.reshape(-1, raw.shape[-1])
                pick = np.unique(np.r_[0 : rows_per_tensor // 2, len(rows) - rows_per_tensor // 2 : len(rows)])
                sel = rows[pick]
                ref = dequantize(sel.view(np.uint8) if t in ("F32", "F16") else sel, info.ggml_type).reshape(
                    len(pick), -1
                )
                got = np.stack([_c_dequantize(t, rows[i], info.shape[0]) for i in pick])
            np.testing.assert_array_equal(_bits(got), _bits(ref), err_msg=f"{path}: {info.name} ({t})")
            checked[t] = checked.get(t, 0) + 1
    return checked


def test_real_smollm2(be, smollm2_path):
    checked = _check_file(be, smollm2_path)
    assert {"Q4_1", "Q8_0", "F32"} <= set(checked)


def test_real_gemma3(be, gemma3_path):
    checked = _check_file(be, gemma3_path)
    assert {"Q4_K", "Q5_0", "Q6_K", "Q8_0", "F32"} <= set(checked)


def test_real_qwen05(be, qwen05_path):
    checked = _check_file(be, qwen05_path)
    assert {"Q4_K", "Q5_0", "Q6_K", "Q8_0", "F32"} <= set(checked)


def test_embedding_rows_exact(be, smollm2_path):
    from cera.formats.gguf import GGUFFile

    f = GGUFFile(smollm2_path)
    table = be.upload(f, "token_embd.weight")
    ids = np.array([0, 1, 49151, 1234, 1234, 7], np.int32)
    got = be.embedding(table, ids)
    ref = dequantize(f.tensor_data("token_embd.weight")[ids], GGMLQuantizationType.Q8_0)
    np.testing.assert_array_equal(_bits(got), _bits(ref))


@pytest.mark.parametrize("t", ALL_TYPES)
def test_embedding_every_type(be, t):
    rng = np.random.default_rng(11)
    k = 2 * block_size(t) if t in QUANT_TYPES else 40
    data, ref = random_weight(t, 9, k, rng)
    table = be.weight("emb", data, t, shape=(k, 9))
    ids = rng.integers(0, 9, 13).astype(np.int32)
    got = be.embedding(table, ids)
    np.testing.assert_array_equal(_bits(got), _bits(ref[ids].astype(np.float32)))
