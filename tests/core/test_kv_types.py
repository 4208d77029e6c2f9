"""The KV cache row formats (`cera.kv_types`, `cera.kv_turboquant`): sizes, ggml's blocks as
the gguf package writes them, and TurboQuant's quantizer and estimator against what the
paper (arXiv:2504.19874) states: Lloyd-Max codebooks of N(0, 1) and the MSE distortion of a
rotated unit vector; the Walsh-Hadamard turn of q8_0/q4_0 rows as llama.cpp's."""

from __future__ import annotations

import numpy as np
import pytest
from gguf.constants import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from cera import kv_turboquant as tq
from cera.errors import UnsupportedOperation
from cera.kv_types import (
    KV_ROWS_VERSION, KV_TYPE_NAMES, cell_bytes, check_dim, check_type, decode, encode, hadamard_block, hadamard_turn, row_bytes,
)  # fmt: skip
from cera.state import AttentionKV, HostState, StateSpec, estimate_bytes, kv_cell_bytes


def test_row_bytes_of_every_type():
    # TurboQuant keys take a bit a coordinate more than its values: tq3 4 and 3, tq2 3 and 2
    assert [row_bytes(t, 64, True) for t in KV_TYPE_NAMES] == [128, 256, 68, 36, 2 + 4 * 8, 2 + 3 * 8]
    assert [row_bytes(t, 64, False) for t in KV_TYPE_NAMES] == [128, 256, 68, 36, 2 + 3 * 8, 2 + 2 * 8]
    # tq3 under a quarter of f16's bytes at head dimensions of 64 and 128 (3.75 and 3.625 bits)
    assert cell_bytes("tq3", 64, 64) * 4 <= cell_bytes("f16", 64, 64)
    assert cell_bytes("tq3", 128, 128) * 4 <= cell_bytes("f16", 128, 128)


def test_dimensions_each_type_takes():
    assert check_dim("q4_0", 64) is None and "multiples of 32" in check_dim("q4_0", 80)
    assert check_dim("tq3", 40) is None and "multiples of 8" in check_dim("tq2", 36)
    with pytest.raises(UnsupportedOperation, match="'q5_0' does not exist"):
        check_type("q5_0")
    spec = StateSpec()
    spec.add(AttentionKV(2, 48, 48))
    with pytest.raises(UnsupportedOperation, match="multiples of 32; this model's are 48"):
        HostState(spec, 8, kv_type="q4_0")


def test_state_bytes_follow_the_rows():
    spec = StateSpec()
    spec.add(AttentionKV(2, 64, 64))
    for t in KV_TYPE_NAMES:
        state = HostState(spec, 32, kv_type=t)
        assert state.k[0].nbytes + state.v[0].nbytes == 32 * kv_cell_bytes(spec, t)
        assert estimate_bytes(spec, 32, kv_type=t) >= state.k[0].nbytes + state.v[0].nbytes


def _walsh_hadamard(n: int) -> np.ndarray:
    """Sylvester's orthonormal Walsh-Hadamard matrix of order n (ggml_gen_hadamard's)."""
    h = np.ones((1, 1))
    while len(h) < n:
        h = np.kron(np.array([[1, 1], [1, -1]]), h)
    return h / np.sqrt(n)


def test_the_turn_of_quantized_rows_is_llama_cpps():
    """llama.cpp's attn_rot_k / attn_rot_v: keys over the largest power of two (>= 64) that
    divides the head dimension, values over 64; only quantized types, only multiples of 64."""
    assert [hadamard_block("q4_0", d, True) for d in (64, 128, 192, 256, 96, 32)] == [64, 128, 64, 256, 0, 0]
    assert [hadamard_block("q8_0", d, False) for d in (64, 128, 256)] == [64, 64, 64]
    assert hadamard_block("f16", 128) == 0 and hadamard_block("tq3", 128) == 0
    x = np.random.default_rng(5).standard_normal((4, 256)).astype(np.float32)
    want = (x.reshape(4, 2, 128).astype(np.float64) @ _walsh_hadamard(128).T).reshape(4, 256)
    np.testing.assert_allclose(hadamard_turn(x, 128), want, atol=1e-5)
    np.testing.assert_allclose(hadamard_turn(hadamard_turn(x, 64), 64), x, atol=1e-5)  # its own inverse


@pytest.mark.parametrize("kv_type", ["q4_0", "q8_0"])
def test_block_rows_are_ggml_blocks_of_the_turned_row(kv_type):
    x = np.random.default_rng(0).standard_normal((3, 128)).astype(np.float32)
    x[:, 7] *= 20  # an outlier, which the turn spreads over its block
    ggml = GGMLQuantizationType[kv_type.upper()]
    rows = encode(x, kv_type, key=True)
    assert rows.dtype == np.uint8 and rows.shape == (3, 4 * (34 if kv_type == "q8_0" else 18))
    assert np.array_equal(rows, quantize(hadamard_turn(x, 128), ggml))
    back = decode(rows, kv_type, key=True)
    np.testing.assert_allclose(back, hadamard_turn(dequantize(rows, ggml), 128), atol=1e-6)
    plain = dequantize(quantize(x, ggml), ggml)
    assert ((back - x) ** 2).sum() < ((plain - x) ** 2).sum()  # the turn's point
    assert np.array_equal(encode(x, kv_type, key=True, turned=False), quantize(x, ggml))
    values = encode(x, kv_type, key=False)
    assert np.array_equal(values, quantize(hadamard_turn(x, 64), ggml))
    odd = np.ascontiguousarray(x[:, :96])  # not a multiple of 64: kept unturned
    assert np.array_equal(encode(odd, kv_type), quantize(odd, ggml))


@pytest.mark.parametrize("bits", [1, 2, 3, 4])
def test_codebooks_are_lloyd_max_of_the_normal(bits):
    np.testing.assert_allclose(tq.lloyd_max(bits), tq.CODEBOOKS[bits], atol=1e-7)


def test_rotation_is_orthogonal_and_fixed():
    p = tq.rotation(64)
    np.testing.assert_allclose(p.astype(np.float64) @ p.T, np.eye(64), atol=1e-5)
    assert not p.flags.writeable
    g = np.random.default_rng(tq.ROTATION_SEED + 64).standard_normal((64, 64))
    assert np.allclose(np.abs(np.linalg.qr(g)[0]), np.abs(p), atol=1e-6)


# Lloyd-Max distortion of N(0, 1) (Max 1960): 0.1175 at 2 bits, 0.03454 at 3, 0.009497 at 4
@pytest.mark.parametrize(
    "kv_type,key,distortion",
    [("tq3", True, 0.009497), ("tq3", False, 0.03454), ("tq2", True, 0.03454), ("tq2", False, 0.1175)],
)
def test_distortion_is_the_quantizers(kv_type, key, distortion):
    """A row keeps b bits a rotated coordinate: its relative squared error is about the
    Lloyd-Max distortion of N(0, 1) at b bits (Max 1960; the paper's D_mse; keeping the norm
    adds D^2 / 4), whatever the vector (here very unlike a Gaussian: a few large
    coordinates), and the decoded row has the row's norm."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4000, 128)).astype(np.float32)
    x[:, :4] *= 30
    got = decode(encode(x, kv_type, key=key), kv_type, key=key)
    norm = np.linalg.norm(x.astype(np.float64), axis=1)
    err = ((got - x) ** 2).sum(axis=1) / norm**2
    assert err.mean() == pytest.approx(distortion + distortion**2 / 4, rel=0.1)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), norm, rtol=2e-3)  # f16 of the norm


def test_turboquant_layout():
    x = np.random.default_rng(4).standard_normal((2, 16)).astype(np.float32)
    row = encode(x, "tq3", key=False)  # values of tq3: 3 bits a coordinate
    assert row.shape == (2, 2 + 3 * 2)
    assert encode(x, "tq3", key=True).shape == (2, 2 + 4 * 2)
    y = (x / np.linalg.norm(x, axis=1, keepdims=True)) @ tq.rotation(16).T
    idx = np.searchsorted(tq.thresholds(3), y * 4)
    planes = np.unpackbits(row[:, 2:8], axis=1, bitorder="little").reshape(2, 3, 16)
    assert np.array_equal(planes[:, 0] + 2 * planes[:, 1] + 4 * planes[:, 2], idx)
    kept = np.linalg.norm(np.asarray(tq.CODEBOOKS[3])[idx], axis=1) / 4
    np.testing.assert_allclose(row[:, :2].copy().view(np.float16)[:, 0], np.linalg.norm(x, axis=1) / kept, rtol=1e-3)


def test_a_checkpoint_of_unturned_q8_0_rows_is_converted():
    """Checkpoints written before the turn (no "kv_rows" in the header) hold q8_0 rows of the
    plain numbers: they are read back as the same numbers, never reinterpreted as turned."""
    from cera.formats.checkpoint import decode_snapshot

    rng = np.random.default_rng(6)
    k, v = rng.standard_normal((2, 2, 5, 64)).astype(np.float32)
    old = {"0.a": encode(k, "q8_0", True, turned=False), "0.b": encode(v, "q8_0", False, turned=False),
           "positions": np.arange(5, dtype=np.int32)}  # fmt: skip
    header = {"kv_type": "q8_0", "layout": [["kv", 2, 64, 64]], "n_filled": 5}
    snap, _ = decode_snapshot(header, old, "old.ckpt")
    np.testing.assert_allclose(decode(snap.kv[0][0], "q8_0", True), k, atol=0.05)
    np.testing.assert_allclose(decode(snap.kv[0][1], "q8_0", False), v, atol=0.05)
    now, _ = decode_snapshot({**header, "kv_rows": KV_ROWS_VERSION}, old, "new.ckpt")
    assert now.kv[0][0] is old["0.a"]  # the current format is taken as it is


@pytest.mark.parametrize("version", [None, 2])
def test_a_checkpoint_of_older_turboquant_rows_is_refused(version):
    """Version 2 kept TurboQuant keys at the values' bits (26 bytes a tq3 row of 64)."""
    from cera.formats.checkpoint import CheckpointError, decode_snapshot

    rows = np.zeros((2, 5, 26), np.uint8)
    header = {"kv_type": "tq3", "layout": [["kv", 2, 64, 64]], "n_filled": 5}
    if version is not None:
        header["kv_rows"] = version
    with pytest.raises(CheckpointError, match="old.ckpt holds tq3 rows of an older layout"):
        decode_snapshot(header, {"0.a": rows, "0.b": rows, "positions": np.arange(5, dtype=np.int32)}, "old.ckpt")


def test_a_checkpoint_of_version_2_q8_0_rows_is_taken_as_it_is():
    from cera.formats.checkpoint import decode_snapshot

    rng = np.random.default_rng(7)
    k = encode(rng.standard_normal((2, 5, 64)).astype(np.float32), "q8_0", True)
    header = {"kv_type": "q8_0", "layout": [["kv", 2, 64, 64]], "n_filled": 5, "kv_rows": 2}
    snap, _ = decode_snapshot(header, {"0.a": k, "0.b": k, "positions": np.arange(5, dtype=np.int32)}, "v2.ckpt")
    assert snap.kv[0][0] is k
