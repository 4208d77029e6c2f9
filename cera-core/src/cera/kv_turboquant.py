"""TurboQuant KV rows (Zandieh, Daliri, Hadian, Mirrokni, arXiv:2504.19874), numpy reference.

A row x of D numbers (D a multiple of 8) is stored as a norm and the direction u = x/|x|
turned by a fixed random rotation P (an orthogonal D x D matrix): each coordinate of y = P u
of a unit vector is distributed alike (close to N(0, 1/D) for the head sizes of language
models), whatever the data, so one scalar quantizer serves every coordinate: y * sqrt(D) is
rounded to the nearest centroid of the Lloyd-Max quantizer of N(0, 1) with 2^b levels
(the paper's TurboQuant_mse). A row decodes to n P^T c[idx] / sqrt(D), so a key's dot
product with a query is taken against the query turned once (P q), and an attention
output, a weighted sum of values, is summed in the rotated space and turned back once.

Bits a coordinate (`BITS`): keys one more than values, tq3 4 and 3 (3.5 a coordinate, the
paper's 3.5-bit setting), tq2 3 and 2 (2.5). Keys get the extra bit because an error in a
key moves a softmax logit and an error in a value is averaged by the attention weights.
Bytes a (key, value) row pair of D = 64: tq3 34 + 26 = 60 (23% of f16's 256), tq2 26 + 18
= 44 (17%); at D = 128, 66 + 50 (23%) and 50 + 34 (16%).

The stored norm n is |x| sqrt(D) / |c[idx]|: the decoded row has the norm of the row (the
centroids alone would shrink it by the quantizer's distortion).

Measured (`cera.generation.perplexity`, tests/models/reference/perplexity/text.txt, chunks
of 256; SmolLM2-135M-Instruct Q4_1, f16 cache 27.52):

| keys / values (bits) | perplexity |
| --- | --- |
| 3 / 3 (the layout of rows version 2) | 36.66 (+33%) |
| 2 + a 1-bit QJL sketch / 3 (TurboQuant_prod keys) | 126.2 |
| 4 / 3 (tq3) | 29.94 (+8.8%) |
| 3 / 2 (tq2) | 37.55 (+36%) |
| 4 / 3 (tq3), keys less calibrated offsets | 28.97 (+5.3%) |
| 3 / 2 (tq2), keys less calibrated offsets | 36.60 (+33%) |

Qwen2.5-Coder-0.5B-Instruct Q4_K_M (two chunks of 256): f16 36.33, q4_0 70.41, tq3 128.7,
tq2 916. The QJL sketch makes inner products unbiased but noisier, and attention's softmax
pays for the noise more than for the bias, so it is left out.

Where the error comes from, measured on the f16 cache rows of the first 512 tokens of the
text (every layer and KV head): the keys have a large offset shared by every row of a head
(the mean key holds 61% of the keys' energy in SmolLM2, 96% in Qwen2.5-0.5B, against 17%
and 13% for values). The quantizer's error scales with the whole row's norm, offset
included, while softmax ignores an offset common to all keys: relative to the energy of
the keys less their mean, a 3-bit key's error is 8% (SmolLM2) and 83% (Qwen2.5). Keeping
keys less a per-head offset m (exact for attention: softmax(q.(k - m)) = softmax(q.k);
here m the mean of those rows) cut the 3-bit error 2.6x (SmolLM2) and 26x (Qwen2.5). The
caches keep keys less a calibrated per-head offset (`cera.generation.key_offsets`); with it
Qwen2.5-Coder-0.5B's tq3 perplexity above is 39.53 (+8.8%) instead of 128.7.

Byte layout of a row: f16 n, then b bit planes of D/8 bytes each. Bit k of byte j of a
plane belongs to coordinate 8j + k; a coordinate's index is the sum of its plane bits times
1, 2, 4, 8. The rotation comes from numpy's PCG64 generator with a fixed seed (`rotation`),
the same wherever numpy is.
"""

from __future__ import annotations

import functools
import math

import numpy as np

# Lloyd-Max quantizers of N(0, 1): centroids in ascending order (Max 1960; `lloyd_max`
# recomputes them, and a test compares).
CODEBOOKS = {
    1: (-0.7978845608, 0.7978845608),
    2: (-1.5104176088, -0.4527800398, 0.4527800398, 1.5104176088),
    3: (-2.1519457051, -1.3439092613, -0.7560052489, -0.2450940842,
        0.2450940842, 0.7560052489, 1.3439092613, 2.1519457051),
    4: (-2.7325057628, -2.0689225438, -1.6179497832, -1.2561401598,
        -0.9422616950, -0.6566983696, -0.3880099835, -0.1283819394,
        0.1283819394, 0.3880099835, 0.6566983696, 0.9422616950,
        1.2561401598, 1.6179497832, 2.0689225438, 2.7325057628),
}  # fmt: skip
BITS = {"tq3": (4, 3), "tq2": (3, 2)}  # the quantizer's bits a coordinate: (keys, values)


def bits(kv_type: str, key: bool = True) -> int:
    """The quantizer's bits a coordinate of a key (``key``) or value row of ``kv_type``."""
    return BITS[kv_type][0 if key else 1]
ROTATION_SEED = 0x7C3A


def lloyd_max(bits: int, iters: int = 200) -> np.ndarray:
    """The Lloyd-Max centroids of N(0, 1) with 2**bits levels, by Lloyd's iteration on the
    exact conditional means (the truncated-normal mean of each cell)."""
    n = 2**bits
    c = np.linspace(-2, 2, n)
    pdf = lambda t: np.exp(-0.5 * t * t) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = np.vectorize(lambda t: 0.5 * (1 + math.erf(t / math.sqrt(2))))
    for _ in range(iters):
        edges = np.concatenate([[-np.inf], (c[1:] + c[:-1]) / 2, [np.inf]])
        a, b = edges[:-1], edges[1:]
        c = (pdf(a) - pdf(b)) / (cdf(b) - cdf(a))
    return c


def thresholds(bits: int) -> np.ndarray:
    c = np.asarray(CODEBOOKS[bits], np.float32)
    return ((c[1:] + c[:-1]) / 2).astype(np.float32)


@functools.lru_cache(maxsize=None)
def rotation(dim: int) -> np.ndarray:
    """P for rows of ``dim``: Q of a QR factorization of a Gaussian matrix, column signs
    fixed by R's diagonal; float32, read-only."""
    g = np.random.default_rng(ROTATION_SEED + dim).standard_normal((dim, dim))
    q, r = np.linalg.qr(g)
    q = np.ascontiguousarray(q * np.sign(np.diag(r)), np.float32)
    q.flags.writeable = False
    return q


def _planes(idx: np.ndarray, bits: int) -> list[np.ndarray]:
    return [np.packbits(((idx >> p) & 1).astype(np.uint8), axis=-1, bitorder="little") for p in range(bits)]


def _unplanes(data: np.ndarray, bits: int, dim: int, offset: int) -> np.ndarray:
    idx = np.zeros((*data.shape[:-1], dim), np.int64)
    for p in range(bits):
        plane = data[..., offset + p * dim // 8 : offset + (p + 1) * dim // 8]
        idx |= np.unpackbits(plane, axis=-1, count=dim, bitorder="little").astype(np.int64) << p
    return idx


def encode(x: np.ndarray, kv_type: str, key: bool = True) -> np.ndarray:
    """Key (``key``) or value rows ``[..., D]`` as stored bytes ``[..., 2 + b D / 8]``, b the
    bits of the row's kind (`bits`)."""
    x = np.asarray(x, np.float32)
    dim = x.shape[-1]
    b = bits(kv_type, key)
    norm = np.sqrt(np.einsum("...i,...i->...", x, x, dtype=np.float32)).astype(np.float32)
    safe = np.where(norm > 0, norm, np.float32(1))[..., None]
    y = (x / safe) @ rotation(dim).T
    idx = np.searchsorted(thresholds(b), y * np.float32(math.sqrt(dim)), side="left")
    c = np.asarray(CODEBOOKS[b], np.float32)[idx]
    kept = np.sqrt(np.einsum("...i,...i->...", c, c, dtype=np.float32)) / np.float32(math.sqrt(dim))
    n = np.where(kept > 0, norm / np.where(kept > 0, kept, np.float32(1)), np.float32(0))
    return np.concatenate([n.astype(np.float16)[..., None].view(np.uint8), *_planes(idx, b)], axis=-1)


def row_dim(data: np.ndarray, kv_type: str, key: bool = True) -> int:
    return (data.shape[-1] - 2) * 8 // bits(kv_type, key)


def decode_rotated(data: np.ndarray, kv_type: str, key: bool = True) -> np.ndarray:
    """Stored rows as float64 vectors in the rotated space (P x, as quantized)."""
    data = np.ascontiguousarray(data, np.uint8)
    b, dim = bits(kv_type, key), row_dim(data, kv_type, key)
    norm = data[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float64)
    idx = _unplanes(data, b, dim, 2)
    return norm[..., None] * np.asarray(CODEBOOKS[b], np.float64)[idx] / math.sqrt(dim)


def decode(data: np.ndarray, kv_type: str, key: bool = True) -> np.ndarray:
    """Stored rows back to float64 ``[..., D]``."""
    return decode_rotated(data, kv_type, key) @ rotation(row_dim(data, kv_type, key)).astype(np.float64)


__all__ = [
    "BITS", "CODEBOOKS", "bits", "decode", "decode_rotated", "encode", "lloyd_max", "rotation", "row_dim", "thresholds",
]  # fmt: skip
