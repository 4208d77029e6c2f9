"""GGUF blocks in MLX's layout: every value of every mapped type equals the `gguf`
package's dequantization (MLX's own `mx.dequantize` reads the arrays back), on random
valid blocks and on tensors of the real files. Values compare as numbers: the one bit
pattern that may differ is the sign of a zero (``d * 0`` keeps d's sign in the gguf
package, ``d*q + (-q*d)`` gives +0 in MLX's form), which changes no product."""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import needs_mlx

MAPPED = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K")
DEQUANTIZED = ("Q6_K", "Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS")


def _file(tmp_path, types, rows=6, k=512, seed=0):
    from gguf import GGMLQuantizationType, GGUFWriter

    from cera.testing.conformance import F16_FIELDS, _random_blocks

    rng = np.random.default_rng(seed)
    path = tmp_path / "blocks.gguf"
    w = GGUFWriter(str(path), "cera-blocks")
    for t in types:
        if t in F16_FIELDS:
            data = _random_blocks(t, rows, k, rng)
        elif t == "F16":
            data = (rng.standard_normal((rows, k)) * 3).astype(np.float16)
        elif t == "BF16":
            data = (rng.standard_normal((rows, k)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        else:  # IQ4_XS: scales are random bytes too; its one f16 field is d at offset 0
            from gguf.constants import GGML_QUANT_SIZES

            bs, ts = GGML_QUANT_SIZES[GGMLQuantizationType[t]]
            data = rng.integers(0, 256, (rows, k // bs, ts), dtype=np.uint8)
            data[..., 0:2] = rng.uniform(0.001, 0.01, data.shape[:2] + (1,)).astype(np.float16).view(np.uint8)
            data = data.reshape(rows, -1)
        w.add_tensor(f"t.{t}", data, raw_shape=data.shape, raw_dtype=GGMLQuantizationType[t])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _want(gguf, name):
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize

    info = gguf.tensors[name]
    data = np.asarray(gguf.tensor_data(name))
    if info.type_name == "F16":
        return data.astype(np.float32)
    if info.type_name == "BF16":
        return (data.astype(np.uint32) << 16).view(np.float32)
    return dequantize(data.reshape(-1, data.shape[-1]), GGMLQuantizationType[info.type_name]).reshape(info.numpy_shape)


def _check(metal, gguf, name):
    import mlx.core as mx

    w = metal.upload(gguf, name)
    got = np.array(w.values(mx.float32))
    want = _want(gguf, name).astype(np.float32)
    assert got.shape == want.shape
    assert np.array_equal(got, want), (
        f"{name}: {np.count_nonzero(got != want)} values differ, by up to {np.abs(got - want).max()}"
    )
    return w


@needs_mlx
def test_mapped_types_hold_the_files_values_exactly(metal, tmp_path):
    from cera.formats.gguf import GGUFFile

    with GGUFFile(_file(tmp_path, MAPPED)) as g:
        for t in MAPPED:
            w = _check(metal, g, f"t.{t}")
            assert w.quant is not None, f"{t} should stay quantized"
            bits = {"Q4_0": 4, "Q4_1": 4, "Q4_K": 4, "Q5_0": 5, "Q5_1": 5, "Q5_K": 5, "Q8_0": 8}[t]
            assert w.quant[3] == bits and w.quant[1].shape == (6, 512 // 32)


@needs_mlx
def test_other_types_are_dequantized_exactly_or_kept_as_floats(metal, tmp_path):
    from cera.formats.gguf import GGUFFile

    with GGUFFile(_file(tmp_path, DEQUANTIZED + ("F16", "BF16"))) as g:
        for t in DEQUANTIZED + ("F16", "BF16"):
            w = _check(metal, g, f"t.{t}")
            assert w.quant is None


@needs_mlx
@pytest.mark.parametrize(
    "bundle, names",
    [
        ("smollm2-135m-instruct-q4_1", ("blk.0.attn_q.weight", "blk.3.ffn_down.weight", "token_embd.weight")),
        (
            "gemma3-270m-q4_k_m",
            ("blk.0.attn_q.weight", "blk.0.ffn_down.weight", "blk.1.attn_v.weight", "blk.0.attn_output.weight"),
        ),
    ],
)
def test_real_tensors_hold_the_files_values(metal, bundle, names):
    """Q4_1 and Q8_0 (SmolLM2), Q5_0, Q4_K, Q6_K and Q8_0 (Gemma 3) tensors of real files."""
    from cera.sources import bundles
    from cera.formats.gguf import GGUFFile

    with GGUFFile(bundles.fetch_file(bundle, quiet=True)) as g:
        types = set()
        for name in names:
            _check(metal, g, name)
            types.add(g.tensors[name].type_name)
    assert len(types) >= 2, types  # each file: several types


@needs_mlx
def test_a_type_without_a_layout_is_refused_naming_the_tensor(metal, tmp_path):
    from gguf import GGMLQuantizationType, GGUFWriter

    from cera.errors import UnsupportedTensorType
    from cera.formats.gguf import GGUFFile

    path = tmp_path / "iq.gguf"
    w = GGUFWriter(str(path), "cera-blocks")
    data = np.zeros((2, 66), np.uint8)  # IQ2_XXS: 66 bytes a block of 256
    w.add_tensor("blk.0.ffn_up.weight", data, raw_shape=data.shape, raw_dtype=GGMLQuantizationType.IQ2_XXS)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with GGUFFile(path) as g, pytest.raises(UnsupportedTensorType, match=r"blk\.0\.ffn_up\.weight.*IQ2_XXS"):
        metal.upload(g, "blk.0.ffn_up.weight")


@needs_mlx
def test_weights_beyond_the_memory_limit_are_refused_by_name(tmp_path):
    from cera.errors import ResourceExhausted
    from cera.formats.gguf import GGUFFile
    from cera_backend_metal.backend import MetalBackend

    small = MetalBackend(memory_limit=6 * 512 * 4 + 100)  # room for one float32 copy of one tensor
    with GGUFFile(_file(tmp_path, ("Q6_K", "Q2_K"))) as g:
        w = small.upload(g, "t.Q6_K")
        assert small.uploaded_bytes == w.nbytes == 6 * 512 * 4
        with pytest.raises(ResourceExhausted, match=r"t\.Q2_K.*does not fit"):
            small.upload(g, "t.Q2_K")


def test_footprint_is_what_the_weights_take(metal, tmp_path):
    from cera.formats.gguf import GGUFFile
    from cera_backend_metal.weights import footprint

    with GGUFFile(_file(tmp_path, MAPPED + ("Q6_K", "F16", "BF16"))) as g:
        for name, info in g.tensors.items():
            assert footprint(info) == metal.upload(g, name).nbytes, name
