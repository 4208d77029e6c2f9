"""The 16-bit fixed-point real FFT of TensorFlow Lite Micro's audio front end, in numpy.

The front end transforms each windowed frame with KISS FFT built for 16-bit fixed point
(``FIXED_POINT=16``): a mixed-radix decimation-in-time FFT whose every butterfly first
divides its inputs by the radix (so the output is the DFT divided by N), with Q15
twiddles and rounding products, every intermediate stored as int16. A real FFT of N
points runs a complex FFT of N/2 points on the even/odd samples packed as real/imaginary
parts, then splits the result with N/4 "super twiddles".

This module computes the same integers, for a batch of frames at once: each stage is a
handful of numpy operations over all frames and all butterflies. The factorization is
KISS FFT's (radix 4 first, then 2, 3, 5 and larger primes); radices 2 and 4 are
implemented, which covers every power of two.
"""

from __future__ import annotations

import math

import numpy as np

from cera.errors import AudioError


def _wrap32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int32).astype(np.int64)


def _sround(x: np.ndarray) -> np.ndarray:
    """KISS FFT's ``sround`` of an int32 product sum: (x + 2^14) >> 15, as int16."""
    return (_wrap32(_wrap32(x) + (1 << 14)) >> 15).astype(np.int16)


def _cmul(ar, ai, br, bi):
    ar, ai = ar.astype(np.int64), ai.astype(np.int64)
    return _sround(ar * br - ai * bi), _sround(ar * bi + ai * br)


def _fixdiv(x: np.ndarray, k: int) -> np.ndarray:
    return _sround(x.astype(np.int64) * (32767 // k))


def _i16(x) -> np.ndarray:
    return np.asarray(x).astype(np.int16)


def _twiddle(phases: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (np.floor(0.5 + 32767 * np.cos(phases)).astype(np.int64),
            np.floor(0.5 + 32767 * np.sin(phases)).astype(np.int64))


def factorize(n: int) -> list[tuple[int, int]]:
    """KISS FFT's factorization: [(radix, remaining length)], powers of 4 first."""
    out, p = [], 4
    floor_sqrt = math.floor(math.sqrt(n))
    while n > 1:
        while n % p:
            p = {4: 2, 2: 3}.get(p, p + 2)
            if p > floor_sqrt:
                p = n
        n //= p
        out.append((p, n))
    return out


class FixedRealFFT:
    """KISS FFT's 16-bit ``kiss_fftr`` of ``n`` points (a power of two) over batches."""

    def __init__(self, n: int):
        if n < 4 or n & (n - 1):
            raise AudioError(f"the fixed-point FFT takes a power of two of at least 4 points, not {n}")
        self.n = n
        self.half = n // 2
        self.factors = factorize(self.half)
        for p, _ in self.factors:
            if p not in (2, 4):
                raise AudioError(f"radix {p} is not implemented")
        i = np.arange(self.half)
        self.tw_r, self.tw_i = _twiddle(-2 * math.pi * i / self.half)
        k = np.arange(1, self.half // 2 + 1)
        self.st_r, self.st_i = _twiddle(-math.pi * (k / self.half + 0.5))

    def _work(self, xr, xi, stage: int, fstride: int):
        p, m = self.factors[stage]
        B = xr.shape[0]
        if m == 1:
            fr, fi = xr.reshape(B, p, 1).copy(), xi.reshape(B, p, 1).copy()
        else:
            # sub-transform q takes every p-th element starting at q
            sr = xr.reshape(B, m, p).transpose(0, 2, 1).reshape(B * p, m)
            si = xi.reshape(B, m, p).transpose(0, 2, 1).reshape(B * p, m)
            yr, yi = self._work(sr, si, stage + 1, fstride * p)
            fr, fi = yr.reshape(B, p, m), yi.reshape(B, p, m)
        k = np.arange(m)
        if p == 4:
            return self._bfly4(fr, fi, k, fstride)
        return self._bfly2(fr, fi, k, fstride)

    def _bfly2(self, fr, fi, k, fstride):
        B, _, m = fr.shape
        ar, ai = _fixdiv(fr[:, 0], 2), _fixdiv(fi[:, 0], 2)
        br, bi = _fixdiv(fr[:, 1], 2), _fixdiv(fi[:, 1], 2)
        tr, ti = _cmul(br, bi, self.tw_r[k * fstride], self.tw_i[k * fstride])
        out_r = np.concatenate([_i16(ar.astype(np.int32) + tr), _i16(ar.astype(np.int32) - tr)], axis=1)
        out_i = np.concatenate([_i16(ai.astype(np.int32) + ti), _i16(ai.astype(np.int32) - ti)], axis=1)
        return out_r.reshape(B, 2 * m), out_i.reshape(B, 2 * m)

    def _bfly4(self, fr, fi, k, fstride):
        B, _, m = fr.shape
        f = [(_fixdiv(fr[:, j], 4), _fixdiv(fi[:, j], 4)) for j in range(4)]
        s0 = _cmul(*f[1], self.tw_r[k * fstride], self.tw_i[k * fstride])
        s1 = _cmul(*f[2], self.tw_r[2 * k * fstride], self.tw_i[2 * k * fstride])
        s2 = _cmul(*f[3], self.tw_r[3 * k * fstride], self.tw_i[3 * k * fstride])
        w = lambda a: a.astype(np.int32)  # noqa: E731  (C's int promotion before the int16 store)
        s5 = (_i16(w(f[0][0]) - s1[0]), _i16(w(f[0][1]) - s1[1]))
        f0 = (_i16(w(f[0][0]) + s1[0]), _i16(w(f[0][1]) + s1[1]))
        s3 = (_i16(w(s0[0]) + s2[0]), _i16(w(s0[1]) + s2[1]))
        s4 = (_i16(w(s0[0]) - s2[0]), _i16(w(s0[1]) - s2[1]))
        out2 = (_i16(w(f0[0]) - s3[0]), _i16(w(f0[1]) - s3[1]))
        out0 = (_i16(w(f0[0]) + s3[0]), _i16(w(f0[1]) + s3[1]))
        out1 = (_i16(w(s5[0]) + s4[1]), _i16(w(s5[1]) - s4[0]))
        out3 = (_i16(w(s5[0]) - s4[1]), _i16(w(s5[1]) + s4[0]))
        out_r = np.stack([out0[0], out1[0], out2[0], out3[0]], axis=1)
        out_i = np.stack([out0[1], out1[1], out2[1], out3[1]], axis=1)
        return out_r.reshape(B, 4 * m), out_i.reshape(B, 4 * m)

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(real, imaginary) int16 of shape (frames, n/2 + 1) for int16 input (frames, n)."""
        if x.ndim != 2 or x.shape[1] != self.n:
            raise AudioError(f"the FFT takes (frames, {self.n}) samples, got {x.shape}")
        B, H = x.shape[0], self.half
        tr, ti = self._work(x[:, 0::2], x[:, 1::2], 0, 1)
        out_r = np.zeros((B, H + 1), dtype=np.int16)
        out_i = np.zeros((B, H + 1), dtype=np.int16)
        dc_r, dc_i = _fixdiv(tr[:, 0], 2).astype(np.int32), _fixdiv(ti[:, 0], 2).astype(np.int32)
        out_r[:, 0] = _i16(dc_r + dc_i)
        out_r[:, H] = _i16(dc_r - dc_i)
        k = np.arange(1, H // 2 + 1)
        pk_r, pk_i = _fixdiv(tr[:, k], 2), _fixdiv(ti[:, k], 2)
        pnk_r, pnk_i = _fixdiv(tr[:, H - k], 2), _fixdiv(_i16(-ti[:, H - k].astype(np.int32)), 2)
        f1_r, f1_i = _i16(pk_r.astype(np.int32) + pnk_r), _i16(pk_i.astype(np.int32) + pnk_i)
        f2_r, f2_i = _i16(pk_r.astype(np.int32) - pnk_r), _i16(pk_i.astype(np.int32) - pnk_i)
        tw_r, tw_i = _cmul(f2_r, f2_i, self.st_r, self.st_i)
        f1_r, f1_i, tw_r, tw_i = (a.astype(np.int32) for a in (f1_r, f1_i, tw_r, tw_i))
        out_r[:, k] = _i16((f1_r + tw_r) >> 1)
        out_i[:, k] = _i16((f1_i + tw_i) >> 1)
        out_r[:, H - k] = _i16((f1_r - tw_r) >> 1)  # at k = N/4 this overwrites, as in KISS FFT
        out_i[:, H - k] = _i16((tw_i - f1_i) >> 1)
        return out_r, out_i
