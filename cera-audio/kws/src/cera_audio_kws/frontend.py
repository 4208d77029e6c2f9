"""TensorFlow Lite Micro's audio front end (the "micro front end"), in numpy.

microWakeWord models are trained on, and run on, the features of this front end: per
10 ms step, a 30 ms window of 16-bit PCM goes through

1. a Hann window in Q12 (int16), and a shift up for headroom (by the window's peak);
2. the 16-bit fixed-point real FFT (`cera_audio_kws.fixed_fft`, 512 points);
3. power per bin, accumulated into 40 mel channels with triangular Q12 weights (uint64);
4. a rounding integer square root, shifted back down;
5. noise reduction: a per-channel running noise estimate (even and odd channels smoothed
   differently) subtracted, keeping at least 5% of the signal;
6. PCAN gain control: each channel divided by a power of its noise estimate (a piecewise
   quadratic table), then a soft shrink;
7. a fixed-point natural log (a 128-segment correction table), scaled by 2^6, as uint16.

Every step is the integer arithmetic of TFLite Micro's C code (``lib/frontend.c`` and
friends), so the features are the same integers as pymicro-features' (which builds that
code) on the same audio. The steps that do not depend on earlier frames (1-4, 6's shrink
and 7) run on a whole batch of frames at once; only the noise estimate's recursion runs
frame by frame, as four small vector operations.

Tables that the C code computes in float at start-up (window, filterbank weights, PCAN
gains) are computed the same way, in float32.
"""

from __future__ import annotations

import attrs
import numpy as np

from cera.errors import AudioError, ModelConfigError

from .fixed_fft import FixedRealFFT

WINDOW_BITS = 12
FILTERBANK_BITS = 12
NOISE_REDUCTION_BITS = 14
PCAN_SNR_BITS = 12
PCAN_OUTPUT_BITS = 6
WIDE_DYNAMIC_BITS = 32
LOG_SCALE_LOG2 = 16
LOG_SEGMENTS_LOG2 = 7
LOG_COEFF = 45426  # ln(2) in Q16
F32 = np.float32


@attrs.frozen
class FrontendConfig:
    """The front end's settings (defaults: microWakeWord's, as pymicro-features sets them)."""

    sample_rate: int = 16000
    window_ms: int = 30
    step_ms: int = 10
    channels: int = 40
    lower_band_hz: float = 125.0
    upper_band_hz: float = 7500.0
    smoothing_bits: int = 10
    even_smoothing: float = 0.025
    odd_smoothing: float = 0.06
    min_signal_remaining: float = 0.05
    pcan: bool = True
    pcan_strength: float = 0.95
    pcan_offset: float = 80.0
    pcan_gain_bits: int = 21
    log: bool = True
    log_scale_shift: int = 6
    output_scale: float = 0.0390625  # features are the uint16 output times this (= 1/25.6)

    _INTS = ("sample_rate", "window_ms", "step_ms", "channels", "smoothing_bits", "pcan_gain_bits", "log_scale_shift")
    _BOOLS = ("pcan", "log")

    def write(self, writer, prefix: str) -> None:
        for f in attrs.fields(FrontendConfig):
            v = getattr(self, f.name)
            if f.name in self._BOOLS:
                writer.add_bool(f"{prefix}.{f.name}", bool(v))
            elif f.name in self._INTS:
                writer.add_uint32(f"{prefix}.{f.name}", int(v))
            else:
                writer.add_float32(f"{prefix}.{f.name}", float(v))

    @classmethod
    def from_hparams(cls, hp) -> FrontendConfig:
        values = {}
        for f in attrs.fields(FrontendConfig):
            kind = bool if f.name in cls._BOOLS else int if f.name in cls._INTS else float
            values[f.name] = hp.req(f"frontend.{f.name}", kind)
        cfg = cls(**values)
        cfg.check(hp.gguf.path if hasattr(hp, "gguf") else "")
        return cfg

    def check(self, where="") -> None:
        w = self.window_ms * self.sample_rate // 1000
        s = self.step_ms * self.sample_rate // 1000
        ok = (0 < s <= w <= 4096 and 0 < self.channels <= 256 and 0 <= self.lower_band_hz < self.upper_band_hz
              and self.upper_band_hz <= self.sample_rate / 2 and 0 < self.smoothing_bits < 16
              and self.output_scale > 0 and 0 <= self.log_scale_shift < 16 and 12 < self.pcan_gain_bits < 32)
        if not ok:
            raise ModelConfigError(f"{where}: inconsistent front-end settings {self}")


def _msb(x: np.ndarray) -> np.ndarray:
    """Bit length of non-negative integers (0 for 0), exact below 2^53."""
    return np.frexp(x.astype(np.float64))[1].astype(np.int64)


def _filterbank(cfg: FrontendConfig, spectrum_size: int):
    """The mel channels' weights, as TFLite Micro computes them (float32 mel scale, Q12).

    Returns (first bin, weights (bins, channels) uint64) where column c sums channel c+1's
    weights and channel c's "unweights" (1 - weight), as the C accumulation does."""
    n = cfg.channels + 1

    def mel(f):
        return F32(1127.0) * np.log1p(F32(f) / F32(700.0), dtype=F32)

    mel_low, mel_hi = mel(cfg.lower_band_hz), mel(cfg.upper_band_hz)
    spacing = (mel_hi - mel_low) / F32(n)
    centers = np.array([mel_low + spacing * F32(i + 1) for i in range(n)], dtype=F32)
    hz_per_bin = F32(0.5) * F32(cfg.sample_rate) / (F32(spectrum_size) - F32(1))
    start = int(F32(1.5) + F32(cfg.lower_band_hz) / hz_per_bin)
    weights, unweights = {}, {}
    freq_start = start
    end = 0
    for chan in range(n):
        freq = freq_start
        while mel(F32(freq) * hz_per_bin) <= centers[chan]:
            freq += 1
        denom = mel_low if chan == 0 else centers[chan - 1]
        for f in range(freq_start, freq):
            w = (centers[chan] - mel(F32(f) * hz_per_bin)) / (centers[chan] - denom)
            weights[(chan, f)] = int(np.floor(F32(w) * F32(1 << FILTERBANK_BITS) + F32(0.5)))
            unweights[(chan, f)] = int(np.floor((F32(1.0) - F32(w)) * F32(1 << FILTERBANK_BITS) + F32(0.5)))
        end = max(end, freq)
        freq_start = freq
    if end >= spectrum_size:
        raise ModelConfigError(f"the filterbank reaches bin {end}, beyond the spectrum's {spectrum_size} bins")
    matrix = np.zeros((end - start, cfg.channels), dtype=np.uint64)
    for (chan, f), w in weights.items():
        if chan >= 1:
            matrix[f - start, chan - 1] += np.uint64(w)
    for (chan, f), u in unweights.items():
        if chan < cfg.channels:
            matrix[f - start, chan] += np.uint64(u)
    return start, end, matrix


def _pcan_table(cfg: FrontendConfig, input_bits: int) -> np.ndarray:
    """PCAN's gain table: gains at 0 and 1, then per octave (y0, a1, a2) of a quadratic."""

    def gain(x):
        xf = F32(x) / F32(2.0**input_bits)
        g = F32(1 << cfg.pcan_gain_bits) * np.power(xf + F32(cfg.pcan_offset), F32(-cfg.pcan_strength), dtype=F32)
        return 0x7FFF if g > F32(0x7FFF) else int(g + F32(0.5))

    lut = np.zeros(4 * WIDE_DYNAMIC_BITS - 3, dtype=np.int64)
    lut[0], lut[1] = gain(0), gain(1)
    for interval in range(2, WIDE_DYNAMIC_BITS + 1):
        x0 = 1 << (interval - 1)
        x1 = x0 + (x0 >> 1)
        x2 = x0 + (x0 - 1) if interval == WIDE_DYNAMIC_BITS else 2 * x0
        y0, y1, y2 = gain(x0), gain(x1), gain(x2)
        d1, d2 = y1 - y0, y2 - y0
        a1 = 4 * d1 - d2
        a2 = d2 - a1
        base = 4 * interval - 6
        lut[base], lut[base + 1], lut[base + 2] = y0, np.int16(a1), np.int16(a2)
    return lut


def _log_table() -> np.ndarray:
    """log2(1 + x) - x on 128 segments of [0, 1], in Q16 (plus one entry past the end)."""
    x = np.arange(1 << LOG_SEGMENTS_LOG2) / (1 << LOG_SEGMENTS_LOG2)
    lut = np.round((np.log2(1 + x) - x) * (1 << LOG_SCALE_LOG2)).astype(np.int64)
    return np.concatenate([lut, [0, 0]])


def _isqrt_rounded(v: np.ndarray) -> np.ndarray:
    """The front end's Sqrt64: rounded integer square root (capped at 2^16-1 below 2^32,
    2^32-1 above, as its 32- and 64-bit paths do)."""
    r = np.floor(np.sqrt(v.astype(np.float64))).astype(np.uint64)
    for _ in range(2):
        r = np.where(r * r > v, r - np.uint64(1), r)
        r = np.where((r + np.uint64(1)) * (r + np.uint64(1)) <= v, r + np.uint64(1), r)
    rem = v - r * r
    cap = np.where(v >> np.uint64(32), np.uint64(0xFFFFFFFF), np.uint64(0xFFFF))
    return np.where((rem > r) & (r != cap), r + np.uint64(1), r)


class MicroFrontend:
    """Streaming micro front end: int16 PCM in, 40 uint16 features per 10 ms out.

    A frame is emitted once a whole window (30 ms) has been seen, then one every step:
    frame ``i`` covers samples ``[i * step, i * step + window)``, as TFLite Micro's
    ``FrontendProcessSamples`` fed 10 ms at a time gives them.
    """

    def __init__(self, config: FrontendConfig | None = None, max_frames: int = 100, native: bool | None = None):
        from . import native as _native

        self.native = _native.available(native)
        cfg = config or FrontendConfig()
        cfg.check()
        self.config = cfg
        self.window = cfg.window_ms * cfg.sample_rate // 1000
        self.step = cfg.step_ms * cfg.sample_rate // 1000
        self.fft_size = 1 << int(np.ceil(np.log2(self.window)))
        self.max_frames = max_frames
        arg = F32(np.pi) * F32(2.0) / F32(self.window)
        i = np.arange(self.window, dtype=F32)
        value = F32(0.5) - F32(0.5) * np.cos(arg * (i + F32(0.5)), dtype=F32)
        self.coefficients = np.floor(value * F32(1 << WINDOW_BITS) + F32(0.5)).astype(np.int32)
        self.fft = FixedRealFFT(self.fft_size)
        self.start_bin, self.end_bin, self.weights = _filterbank(cfg, self.fft_size // 2 + 1)
        one = 1 << NOISE_REDUCTION_BITS
        self.even_smoothing = int(F32(cfg.even_smoothing) * F32(one))
        self.odd_smoothing = int(F32(cfg.odd_smoothing) * F32(one))
        self.min_signal_remaining = np.uint64(int(F32(cfg.min_signal_remaining) * F32(one)))
        sm = np.where(np.arange(cfg.channels) % 2 == 0, self.even_smoothing, self.odd_smoothing)
        self._smoothing = sm.astype(np.uint64)
        self._one_minus = (one - sm).astype(np.uint64)
        self.correction_bits = int(_msb(np.array(self.fft_size))) - 1 - FILTERBANK_BITS // 2
        self.snr_shift = cfg.pcan_gain_bits - self.correction_bits - PCAN_SNR_BITS
        self.pcan_lut = _pcan_table(cfg, cfg.smoothing_bits - self.correction_bits)
        self.log_lut = _log_table()
        self.estimate = np.zeros(cfg.channels, dtype=np.uint64)
        # Audio not yet consumed: the last window - step samples, plus what waits.
        self._audio = np.zeros(self.window - self.step + self.step * max_frames, dtype=np.int16)
        self._have = 0
        self._out = np.zeros((max_frames, cfg.channels), dtype=np.uint16)
        if self.native:
            self._prepare_native()

    def _prepare_native(self) -> None:
        from .native import ffi, lib, ptr

        self._c_lib = (ffi, lib)
        fft = self.fft
        self._c_coef = np.ascontiguousarray(self.coefficients, dtype=np.int32)
        self._c_factors = np.array([v for pair in fft.factors for v in pair], dtype=np.int32)
        self._c_tw = np.ascontiguousarray(np.stack([fft.tw_r, fft.tw_i], axis=1).reshape(-1), dtype=np.int32)
        self._c_stw = np.ascontiguousarray(np.stack([fft.st_r, fft.st_i], axis=1).reshape(-1), dtype=np.int32)
        # the filterbank as at most two (channel, weight) entries per bin
        nb = self.weights.shape[0]
        self._c_wchan = np.full((nb, 2), -1, dtype=np.int32)
        self._c_wval = np.zeros((nb, 2), dtype=np.uint32)
        for b in range(nb):
            nz = np.nonzero(self.weights[b])[0]
            if len(nz) > 2:
                raise AudioError(f"filterbank bin {b} feeds {len(nz)} channels; the C front end takes 2")
            self._c_wchan[b, : len(nz)] = nz
            self._c_wval[b, : len(nz)] = self.weights[b, nz]
        self._c_smoothing = np.ascontiguousarray(self._smoothing, dtype=np.uint64)
        self._c_one_minus = np.ascontiguousarray(self._one_minus, dtype=np.uint64)
        self._c_pcan = np.ascontiguousarray(self.pcan_lut, dtype=np.int64)
        self._c_log = np.ascontiguousarray(self.log_lut, dtype=np.int64)
        self._c_scratch = np.zeros(3 * self.fft_size + 8, dtype=np.int16)
        cfg = self.config
        self._c_args = (
            self.window, ptr("int32_t *", self._c_coef), self.fft_size, len(self.fft.factors),
            ptr("int32_t *", self._c_factors), ptr("int32_t *", self._c_tw), ptr("int32_t *", self._c_stw),
            self.start_bin, self.end_bin, ptr("int32_t *", self._c_wchan), ptr("uint32_t *", self._c_wval), cfg.channels, cfg.smoothing_bits,
            ptr("uint64_t *", self._c_smoothing), ptr("uint64_t *", self._c_one_minus), int(self.min_signal_remaining),
            ptr("uint64_t *", self.estimate), int(cfg.pcan), ptr("int64_t *", self._c_pcan), self.snr_shift,
            int(cfg.log), self.correction_bits, cfg.log_scale_shift, ptr("int64_t *", self._c_log),
            ptr("int16_t *", self._c_scratch),
        )

    def reset(self) -> None:
        self.estimate[:] = 0
        self._have = 0

    @property
    def pending_samples(self) -> int:
        return self._have

    def process(self, samples: np.ndarray):
        """Feed int16 samples (any number); yields uint16 feature blocks (frames, channels).

        Each yielded block is a view of a buffer reused by the next block: copy it to keep it.
        """
        x = np.asarray(samples)
        if x.dtype != np.int16 or x.ndim != 1:
            raise AudioError(f"the micro front end takes 1-D int16 PCM, got {x.dtype}{x.shape}")
        pos = 0
        cap = len(self._audio)
        while pos < len(x):
            take = min(cap - self._have, len(x) - pos)
            self._audio[self._have : self._have + take] = x[pos : pos + take]
            self._have += take
            pos += take
            if self._have < self.window:
                continue
            n = (self._have - self.window) // self.step + 1
            out = self._frames(n)
            used = n * self.step
            keep = self._have - used
            self._audio[:keep] = self._audio[used : self._have]
            self._have = keep
            yield out

    def _frames(self, n: int) -> np.ndarray:
        W, S = self.window, self.step
        item = self._audio.itemsize
        frames = np.ndarray((n, W), np.int16, buffer=self._audio, strides=(S * item, item))
        return self.features_of_frames(frames, self._out[:n])

    def features_of_frames(self, frames: np.ndarray, out: np.ndarray) -> np.ndarray:
        """The features of consecutive frames (n, window) int16, updating the noise estimate."""
        n = frames.shape[0]
        if self.native:
            ffi, lib = self._c_lib
            if frames.dtype != np.int16 or frames.strides[1] != 2 or frames.shape[1] != self.window:
                raise AudioError(f"frames must be int16 rows of {self.window} samples")
            if not out.flags.c_contiguous or out.dtype != np.uint16 or out.shape != (n, self.config.channels):
                raise AudioError("the output must be a contiguous (frames, channels) uint16 array")
            a = self._c_args
            lib.kws_frontend(ffi.cast("int16_t *", frames.ctypes.data), n, frames.strides[0] // 2, *a[:-1], a[-1],
                             ffi.cast("uint16_t *", out.ctypes.data))
            return out
        # 1. window (Q12) and headroom shift
        w = (frames.astype(np.int32) * self.coefficients) >> WINDOW_BITS
        w = w.astype(np.int16)
        mag = np.abs(w.astype(np.int32))
        mag[mag > 32767] = 0  # C negates in int16: -32768 stays negative and is not counted
        shift = 15 - _msb(mag.max(axis=1))
        fft_in = np.zeros((n, self.fft_size), dtype=np.int16)
        fft_in[:, : self.window] = (w.astype(np.int64) << shift[:, None]).astype(np.int16)
        # 2. FFT, 3. energy (int32 as C computes it, read back through an int32 pointer)
        re, im = self.fft(fft_in)
        lo, hi = self.start_bin, self.end_bin
        r, i = re[:, lo:hi].astype(np.int64), im[:, lo:hi].astype(np.int64)
        energy = (r * r + i * i).astype(np.int32).astype(np.int64).view(np.uint64)
        work = energy @ self.weights  # uint64, wrapping as the C accumulators do
        # 4. rounded square root, shifted back
        signal = (_isqrt_rounded(work) >> shift[:, None].astype(np.uint64)) & np.uint64(0xFFFFFFFF)
        # 5. noise reduction: the estimate's recursion frame by frame
        sb = np.uint64(self.config.smoothing_bits)
        scaled = (signal << sb) & np.uint64(0xFFFFFFFF)
        estimates = np.empty_like(scaled)
        est = self.estimate
        sm, om = self._smoothing, self._one_minus
        nr_bits = np.uint64(NOISE_REDUCTION_BITS)
        for f in range(n):
            est = ((scaled[f] * sm + est * om) >> nr_bits) & np.uint64(0xFFFFFFFF)
            estimates[f] = est
        self.estimate[:] = est
        capped = np.minimum(estimates, scaled)
        floor = ((signal * self.min_signal_remaining) >> nr_bits) & np.uint64(0xFFFFFFFF)
        signal = np.maximum((scaled - capped) >> sb, floor)
        # 6. PCAN
        if self.config.pcan:
            gain = self._gain(estimates)
            snr = ((signal * gain) >> np.uint64(self.snr_shift)) & np.uint64(0xFFFFFFFF)
            small = snr < np.uint64(2 << PCAN_SNR_BITS)
            shrunk_small = (snr * snr) >> np.uint64(2 + 2 * PCAN_SNR_BITS - PCAN_OUTPUT_BITS)
            shrunk_big = (snr >> np.uint64(PCAN_SNR_BITS - PCAN_OUTPUT_BITS)) - np.uint64(1 << PCAN_OUTPUT_BITS)
            signal = np.where(small, shrunk_small, shrunk_big) & np.uint64(0xFFFFFFFF)
        # 7. log
        out[:] = self._log(signal)
        return out

    def _gain(self, x: np.ndarray) -> np.ndarray:
        """PCAN's WideDynamicFunction of the noise estimates (uint32), as uint64 gains."""
        lut = self.pcan_lut
        xi = x.astype(np.int64)
        interval = _msb(xi)
        base = np.clip(4 * interval - 6, 0, len(lut) - 3)
        frac = np.where(interval < 11, xi << np.clip(11 - interval, 0, None), xi >> np.clip(interval - 11, 0, None))
        frac &= 0x3FF
        res = (lut[base + 2] * frac) >> 5
        res = _i32(res + _i32(lut[base + 1] << 5))
        res = _i32(res * frac)
        res = (res + (1 << 14)) >> 15
        res = (res + lut[base]).astype(np.int16).astype(np.int64)
        res = np.where(xi <= 2, lut[np.clip(xi, 0, 2)], res)
        return res.astype(np.uint32).astype(np.uint64)

    def _log(self, signal: np.ndarray) -> np.ndarray:
        if not self.config.log:
            return np.minimum(signal, 0xFFFF).astype(np.uint16)
        c = self.correction_bits
        v = (signal >> np.uint64(-c)) if c < 0 else ((signal << np.uint64(c)) & np.uint64(0xFFFFFFFF))
        v = v.astype(np.int64)
        integer = _msb(v) - 1
        safe = np.maximum(integer, 0)
        frac = v - (np.int64(1) << safe)
        frac = np.where(safe < LOG_SCALE_LOG2, frac << np.clip(LOG_SCALE_LOG2 - safe, 0, None),
                        frac >> np.clip(safe - LOG_SCALE_LOG2, 0, None))
        frac = _i32(frac)
        seg = np.clip(frac >> (LOG_SCALE_LOG2 - LOG_SEGMENTS_LOG2), 0, (1 << LOG_SEGMENTS_LOG2))
        c0, c1 = self.log_lut[seg], self.log_lut[seg + 1]
        seg_base = seg * ((1 << LOG_SCALE_LOG2) >> LOG_SEGMENTS_LOG2)
        rel = _i32((c1 - c0) * (frac - seg_base)) >> LOG_SCALE_LOG2
        fraction = (frac + c0 + rel) & 0xFFFFFFFF
        log2 = ((safe << LOG_SCALE_LOG2) + fraction) & 0xFFFFFFFF
        half = 1 << (LOG_SCALE_LOG2 - 1)
        loge = ((LOG_COEFF * log2 + half) >> LOG_SCALE_LOG2) & 0xFFFFFFFF
        scaled = ((((loge << self.config.log_scale_shift) & 0xFFFFFFFF) + half) & 0xFFFFFFFF) >> LOG_SCALE_LOG2
        scaled = np.where(v > 1, scaled, 0)
        return np.minimum(scaled, 0xFFFF).astype(np.uint16)


def _i32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.int32).astype(np.int64)
