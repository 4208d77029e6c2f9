"""TurboQuant KV rows (Zandieh, Daliri, Hadian, Mirrokni, arXiv:2504.19874), numpy reference.

A row x of D numbers (D a multiple of 8) is stored as its norm and the direction u = x/|x|
turned by a fixed random rotation P (an orthogonal D x D matrix): each coordinate of y = P u
of a unit vector is distributed alike (close to N(0, 1/D) for the head sizes of language
models), whatever the data, so one scalar quantizer serves every coordinate: y * sqrt(D) is
rounded to the nearest centroid of the Lloyd-Max quantizer of N(0, 1) with 2^b levels.

- A **value** keeps that (TurboQuant_mse, b bits a coordinate): it decodes to
  |x| P^T c[idx] / sqrt(D), so an attention output (a weighted sum of values) is summed in
  the rotated space and turned back once.
- A **key** keeps b - 1 bits of the same, then a 1-bit sketch of the residual
  r = y - c[idx] / sqrt(D) (TurboQuant_prod): z = sign(S r) with S a fixed D x D matrix of
  N(0, 1) entries, and |r|. The dot product of a query q with the key is estimated without
  bias as |x| (<P q, c[idx]> / sqrt(D) + sqrt(pi / 2) / D |r| <S P q, z>): the query is
  turned once and each key costs two short sums (the sketch works in the rotated space:
  S P is again a matrix of independent N(0, 1) entries).

Byte layout of a row: key: f16 |x|, f16 |r|, b - 1 bit planes and the sign plane of D/8
bytes each; value: f16 |x|, b bit planes. Bit k of byte j of a plane belongs to coordinate
8j + k; a coordinate's index is the sum of its plane bits times 1, 2, 4. The matrices come
from numpy's PCG64 generator with fixed seeds (`matrices`), the same wherever numpy is.
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
}  # fmt: skip
BITS = {"tq3": (2, 3), "tq2": (1, 2)}  # keys' quantizer bits (+ 1 sketch bit), values' bits
ROTATION_SEED, SKETCH_SEED = 0x7C3A, 0x5E7C


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
def matrices(dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(P, S) for rows of ``dim``: the rotation (Q of a QR factorization of a Gaussian
    matrix, column signs fixed by R's diagonal) and the sketch matrix, float32, read-only."""
    g = np.random.default_rng(ROTATION_SEED + dim).standard_normal((dim, dim))
    q, r = np.linalg.qr(g)
    q = q * np.sign(np.diag(r))
    s = np.random.default_rng(SKETCH_SEED + dim).standard_normal((dim, dim))
    out = (np.ascontiguousarray(q, np.float32), np.ascontiguousarray(s, np.float32))
    for a in out:
        a.flags.writeable = False
    return out


def _planes(idx: np.ndarray, bits: int) -> list[np.ndarray]:
    return [np.packbits(((idx >> p) & 1).astype(np.uint8), axis=-1, bitorder="little") for p in range(bits)]


def _unplanes(data: np.ndarray, bits: int, dim: int, offset: int) -> np.ndarray:
    idx = np.zeros((*data.shape[:-1], dim), np.int64)
    for p in range(bits):
        plane = data[..., offset + p * dim // 8 : offset + (p + 1) * dim // 8]
        idx |= np.unpackbits(plane, axis=-1, count=dim, bitorder="little").astype(np.int64) << p
    return idx


def encode(x: np.ndarray, kv_type: str, key: bool = True) -> np.ndarray:
    """Rows ``[..., D]`` as stored bytes ``[..., row bytes]`` (see the module)."""
    x = np.asarray(x, np.float32)
    dim = x.shape[-1]
    kb, vb = BITS[kv_type]
    bits = kb if key else vb
    rot, sketch = matrices(dim)
    norm = np.sqrt(np.einsum("...i,...i->...", x, x, dtype=np.float32)).astype(np.float32)
    safe = np.where(norm > 0, norm, np.float32(1))[..., None]
    y = (x / safe) @ rot.T
    scaled = y * np.float32(math.sqrt(dim))
    idx = np.searchsorted(thresholds(bits), scaled, side="left")
    parts = [norm.astype(np.float16)[..., None].view(np.uint8)]
    if key:
        resid = y - np.asarray(CODEBOOKS[bits], np.float32)[idx] / np.float32(math.sqrt(dim))
        gamma = np.sqrt(np.einsum("...i,...i->...", resid, resid, dtype=np.float32))
        signs = (resid @ sketch.T) >= 0
        parts.append(gamma.astype(np.float16)[..., None].view(np.uint8))
        parts += _planes(idx, bits)
        parts.append(np.packbits(signs.astype(np.uint8), axis=-1, bitorder="little"))
    else:
        parts += _planes(idx, bits)
    return np.concatenate(parts, axis=-1)


def decode_rotated(data: np.ndarray, kv_type: str, key: bool, dim: int) -> np.ndarray:
    """Stored rows as float64 vectors in the rotated space (P x, estimated)."""
    data = np.ascontiguousarray(data, np.uint8)
    kb, vb = BITS[kv_type]
    bits = kb if key else vb
    norm = data[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float64)
    offset = 4 if key else 2
    idx = _unplanes(data, bits, dim, offset)
    y = np.asarray(CODEBOOKS[bits], np.float64)[idx] / math.sqrt(dim)
    if key:
        gamma = data[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float64)
        start = offset + bits * dim // 8
        z = np.unpackbits(data[..., start : start + dim // 8], axis=-1, count=dim, bitorder="little")
        _, sketch = matrices(dim)
        y = y + math.sqrt(math.pi / 2) / dim * gamma[..., None] * ((2.0 * z - 1.0) @ sketch.astype(np.float64))
    return norm[..., None] * y


def decode(data: np.ndarray, kv_type: str, key: bool = True) -> np.ndarray:
    """Stored rows back to float64 ``[..., D]`` (for a key, the vector whose dot product with
    a query is the estimator above)."""
    kb, vb = BITS[kv_type]
    bits = (kb + 1) if key else vb
    dim = (data.shape[-1] - (4 if key else 2)) * 8 // bits
    rot, _ = matrices(dim)
    return decode_rotated(data, kv_type, key, dim) @ rot.astype(np.float64)


__all__ = ["BITS", "CODEBOOKS", "decode", "decode_rotated", "encode", "lloyd_max", "matrices", "thresholds"]
