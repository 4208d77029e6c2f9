"""The streaming int8 network of a microWakeWord model, run with numpy.

Each call to `StreamingNetwork.step` takes one step's quantized features (``stride``
feature frames of 40 values, int8) and gives the wake-word probability, carrying the
network's ring buffers (its state variables) to the next step until `reset`.

The arithmetic is TensorFlow Lite's integer arithmetic, operator by operator, so results
equal the reference kernels' to the integer:

- convolutions and the dense layer accumulate ``sum((x - x_zp) * w) + bias`` exactly
  (in int32 in the C kernels; in float64 in the numpy code, whose 53-bit mantissa holds
  every such sum of int8 products: BLAS speed with integer results), then requantize per output channel with the fixed-point multiplier
  and rounding shift of `cera_audio_kws.fixedpoint`, add the output zero point and clamp
  to the fused activation's range;
- the input zero point is folded into the bias at load time: ``sum(x * w) + (bias - x_zp *
  sum(w))``;
- element-wise operators on int8 (LOGISTIC, QUANTIZE, a concatenation input whose scale
  differs from the output's) are 256-entry tables made at load time;
- RESHAPE, STRIDED_SLICE and SPLIT_V outputs are views made at load time into the
  buffers they read, so they cost nothing per step.

Every buffer (activations, im2col gathers, accumulators, scratch) is made once, when the
network is built; a step allocates nothing. With the C kernels (`cera_audio_kws.native`)
the whole step is one C call: the operators become a program of row copies, 256-entry
table lookups and int8 layers, with every address fixed when the network is built.
"""

from __future__ import annotations

import math

import numpy as np

from cera.errors import AudioError

from .fixedpoint import Requantizer, quantize_multiplier, rounding_high_mul_and_shift
from .graph import TENSOR_DTYPES, Graph, OperatorSpec, UnsupportedLayer

_QRANGE = {"INT8": (-128, 127), "UINT8": (0, 255)}


def _activation_range(spec, act: int) -> tuple[int, int]:
    lo, hi = _QRANGE[spec.type]
    zp, s = spec.zero_point, spec.scale

    def q(f):
        return zp + int(_round(f / s))

    if act == 1:  # RELU
        return max(lo, q(0.0)), hi
    if act == 2:  # RELU_N1_TO_1
        return max(lo, q(-1.0)), min(hi, q(1.0))
    if act == 3:  # RELU6
        return max(lo, q(0.0)), min(hi, q(6.0))
    return lo, hi


def _round(x: float) -> float:
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def _requant_table(in_spec, out_spec) -> np.ndarray:
    """QUANTIZE int8 -> int8/uint8 (TFLite's Requantize) as a table indexed by the uint8 view."""
    lo, hi = _QRANGE[out_spec.type]
    q = np.arange(-128, 128, dtype=np.int64)
    m, shift = quantize_multiplier(float(np.float64(in_spec.scale) / np.float64(out_spec.scale)))
    y = rounding_high_mul_and_shift(q - in_spec.zero_point, m, max(shift, 0), max(-shift, 0)) + out_spec.zero_point
    return _by_uint8(np.clip(y, lo, hi).astype(TENSOR_DTYPES[out_spec.type]))


def _float_table(in_spec, out_spec, fn) -> np.ndarray:
    """An element-wise function as TFLite's lookup-table kernels make it, in float32."""
    lo, hi = _QRANGE[out_spec.type]
    q = np.arange(-128, 128, dtype=np.int32)
    x = np.float32(in_spec.scale) * (q - np.int32(in_spec.zero_point)).astype(np.float32)
    y = fn(x).astype(np.float32) * (np.float32(1.0) / np.float32(out_spec.scale))
    y = np.where(y >= 0, np.floor(y + np.float32(0.5)), -np.floor(-y + np.float32(0.5)))  # std::round
    return _by_uint8(np.clip(y.astype(np.int64) + out_spec.zero_point, lo, hi).astype(TENSOR_DTYPES[out_spec.type]))


def _by_uint8(table_by_int8: np.ndarray) -> np.ndarray:
    """Reorder a table of the inputs -128..127 so that the input's uint8 view indexes it."""
    return np.ascontiguousarray(np.concatenate([table_by_int8[128:], table_by_int8[:128]]))


def _sigmoid(x):
    return np.float32(1.0) / (np.float32(1.0) + np.exp(-x, dtype=np.float32))


def _concat_rescale_table(in_spec, out_spec) -> np.ndarray:
    """TFLite's ConcatenationWithScaling for one input: round(x * s + b) + zp_out, float32."""
    scale = np.float32(in_spec.scale) * (np.float32(1.0) / np.float32(out_spec.scale))
    bias = np.float32(-in_spec.zero_point) * scale
    q = np.arange(-128, 128, dtype=np.float32)
    y = q * scale + bias
    y = np.where(y >= 0, np.floor(y + np.float32(0.5)), -np.floor(-y + np.float32(0.5)))
    return _by_uint8(np.clip(y.astype(np.int64) + out_spec.zero_point, -128, 127).astype(np.int8))


class _Accumulate:
    """The shared tail of CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED: an exact float64
    accumulator (rows: output positions, columns: channels) to the int8 output."""

    def __init__(self, rows: int, channels: int, scales, out_view: np.ndarray, lo: int, hi: int, zp_out: int):
        self.acc = np.empty((rows, channels), dtype=np.float64)
        self.iacc = np.empty((rows, channels), dtype=np.int64)
        self.t1 = np.empty_like(self.iacc)
        self.t2 = np.empty_like(self.iacc)
        self.requant = Requantizer(scales)
        self.out = out_view.reshape(rows, channels)
        self.lo, self.hi, self.zp = lo, hi, zp_out

    def finish(self) -> None:
        np.copyto(self.iacc, self.acc, casting="unsafe")  # exact: every sum is an integer
        self.requant.apply(self.iacc, self.t1, self.t2)
        self.iacc += self.zp
        np.clip(self.iacc, self.lo, self.hi, out=self.iacc)
        np.copyto(self.out, self.iacc, casting="unsafe")


def _conv_scales(x_spec, w_spec, out_spec, channels: int) -> np.ndarray:
    ws = np.asarray(w_spec.scales, dtype=np.float64)
    if len(ws) == 1:
        ws = np.full(channels, ws[0])
    elif len(ws) != channels:
        raise UnsupportedLayer(f"filter {w_spec.name!r} has {len(ws)} scales for {channels} output channels")
    # TFLite: double(input_scale) * double(filter_scale) / double(output_scale)
    return np.float64(np.float32(x_spec.scale)) * ws / np.float64(np.float32(out_spec.scale))


def _window_index(x_shape, kh, kw, sh, sw, dh, dw, out_hw, channels_index) -> np.ndarray:
    """Flat indices into an NHWC (1, H, W, C) buffer of every output position's taps:
    shape (positions, kh * kw, len(channels_index))."""
    _, H, W, C = x_shape
    Ho, Wo = out_hw
    idx = np.empty((Ho * Wo, kh * kw, len(channels_index)), dtype=np.intp)
    for oy in range(Ho):
        for ox in range(Wo):
            for ky in range(kh):
                for kx in range(kw):
                    y, x = oy * sh + ky * dh, ox * sw + kx * dw
                    idx[oy * Wo + ox, ky * kw + kx] = (y * W + x) * C + np.asarray(channels_index)
    return idx


RECORD = 14  # int64 values per instruction of the C program (csrc/kws_api.h)


def _rows(v: np.ndarray):
    """(address, rows, row bytes, row stride) of an int8 view, or None if it is not rows."""
    dims = [(n, st) for n, st in zip(v.shape, v.strides, strict=True) if n != 1]
    row_len, expected = 1, v.itemsize
    while dims and dims[-1][1] == expected:
        n, _ = dims.pop()
        row_len *= n
        expected *= n
    while len(dims) >= 2 and dims[-2][1] == dims[-1][1] * dims[-1][0]:  # merge outer dims
        (n1, _), (n2, s2) = dims[-2], dims.pop()
        dims[-1] = (n1 * n2, s2)
    if not dims:
        return v.ctypes.data, 1, row_len * v.itemsize, 0
    if len(dims) > 1:
        return None
    n, st = dims[0]
    return v.ctypes.data, n, row_len * v.itemsize, st


def _copy_instr(dst: np.ndarray, src: np.ndarray):
    d, s = _rows(dst), _rows(src)
    if d is None or s is None or dst.shape != src.shape or dst.dtype != src.dtype:
        return None
    # a contiguous side can be cut into the other side's rows
    if d[1] == 1 and s[1] > 1:
        d = (d[0], s[1], s[2], s[2])
    elif s[1] == 1 and d[1] > 1:
        s = (s[0], d[1], d[2], d[2])
    if d[1:3] != s[1:3]:
        return None
    return [(1, d[0], s[0], d[1], d[2], d[3], s[3])]


def _copier(dst: np.ndarray, src: np.ndarray):
    def run():
        np.copyto(dst, src)

    run.instr = _copy_instr(dst, src)
    return run


class StreamingNetwork:
    """One microWakeWord network: `step` (int8 features in, probability out) and `reset`."""

    def __init__(self, graph: Graph, where: str = "network", native: bool | None = None):
        from . import native as _native

        self.graph = graph
        self.where = where
        self.native = _native.available(native)
        T = graph.tensors
        self._buf: dict[int, np.ndarray] = {}
        for i, arr in graph.constants.items():
            self._buf[i] = arr
        self._vars = [np.array(v.initial, dtype=np.int8) for v in graph.variables]
        self._var_of = {i: t.variable for i, t in enumerate(T) if t.type == "RESOURCE"}
        in_spec = T[graph.input]
        if in_spec.type != "INT8" or len(in_spec.shape) != 3 or in_spec.shape[0] != 1:
            raise UnsupportedLayer(f"{where}: the network input is {in_spec.type}{in_spec.shape}; expected INT8 (1, stride, features)")
        self.input = self._buf[graph.input] = np.zeros(in_spec.shape, dtype=np.int8)
        self.stride, self.features = in_spec.shape[1], in_spec.shape[2]
        self.input_scale, self.input_zero_point = in_spec.scale, in_spec.zero_point
        self._qbuf = np.zeros((self.stride, self.features), dtype=np.float64)
        self._steps = [self._plan(k, op) for k, op in enumerate(graph.operators)]
        self._steps = [s for s in self._steps if s is not None]
        self._program = None
        if self.native and all(getattr(s, "instr", None) is not None for s in self._steps):
            records = [r for s in self._steps for r in s.instr]
            prog = np.zeros((len(records), RECORD), dtype=np.int64)
            for i, r in enumerate(records):
                prog[i, : len(r)] = r
            from .native import lib, ptr

            self._program = (prog, ptr("int64_t *", prog), len(records), lib.kws_run)
        out = T[graph.output]
        if int(np.prod(out.shape)) != 1 or out.type not in _QRANGE:
            raise UnsupportedLayer(f"{where}: the network output is {out.type}{out.shape}; expected one quantized probability")
        self._out = self._buf[graph.output].reshape(-1)
        self.output_scale, self.output_zero_point = out.scale, out.zero_point

    # -- building ---------------------------------------------------------------------

    def _new(self, i: int) -> np.ndarray:
        spec = self.graph.tensors[i]
        if i in self._buf:
            raise UnsupportedLayer(f"{self.where}: tensor {spec.name!r} is written twice")
        arr = np.zeros(spec.shape, dtype=TENSOR_DTYPES[spec.type])
        self._buf[i] = arr
        return arr

    def _plan(self, k: int, op: OperatorSpec):
        try:
            return getattr(self, "_plan_" + op.op.lower())(op)
        except UnsupportedLayer:
            raise
        except (ValueError, IndexError, KeyError, TypeError) as e:
            raise UnsupportedLayer(f"{self.where}: operator {k} ({op.op}) cannot be run as declared: {e}") from None

    def _plan_read_variable(self, op):
        var = self._var_of[op.inputs[0]]
        src = self._vars[var]
        spec = self.graph.tensors[op.outputs[0]]
        if src.shape != spec.shape:
            raise ValueError(f"variable of shape {src.shape} read into {spec.shape}")
        if self._read_is_consumed_before_assign(op, var):
            self._buf[op.outputs[0]] = src  # every reader runs before the variable changes: no copy
            return None
        dst = self._new(op.outputs[0])
        return _copier(dst, src)

    def _read_is_consumed_before_assign(self, read_op, var: int) -> bool:
        ops = self.graph.operators
        k_read = ops.index(read_op)
        out = read_op.outputs[0]
        first_assign = next((k for k, o in enumerate(ops) if k > k_read and o.op == "ASSIGN_VARIABLE"
                             and self._var_of.get(o.inputs[0]) == var), len(ops))
        last_use = max((k for k, o in enumerate(ops) if out in o.inputs), default=k_read)
        # views of the output (RESHAPE, slices) would outlive it: only direct consumers that copy
        direct = all(o.op in ("CONCATENATION", "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
                     for o in ops if out in o.inputs)
        return direct and last_use < first_assign and out != self.graph.output

    def _plan_assign_variable(self, op):
        dst, src = self._vars[self._var_of[op.inputs[0]]], self._buf[op.inputs[1]]
        if src.shape != dst.shape:
            raise ValueError(f"a value of shape {src.shape} assigned to a variable of shape {dst.shape}")
        return _copier(dst, src)

    def _plan_reshape(self, op):
        spec = self.graph.tensors[op.outputs[0]]
        x = self._buf[op.inputs[0]]
        if x.size != int(np.prod(spec.shape)):
            raise ValueError(f"{x.shape} cannot be reshaped to {spec.shape}")
        if x.flags.c_contiguous:
            self._buf[op.outputs[0]] = x.reshape(spec.shape)  # a view
            return None
        out = self._new(op.outputs[0])
        return _copier(out.reshape(x.shape), x)

    def _static_view(self, i_out: int, view: np.ndarray):
        """A slice as its output: the view itself where contiguous, else copied each step
        (the operators that read it gather from contiguous buffers)."""
        spec = self.graph.tensors[i_out]
        if tuple(view.shape) != spec.shape:
            raise ValueError(f"the slice has shape {view.shape}, the output {spec.shape}")
        if view.flags.c_contiguous:
            self._buf[i_out] = view
            return None
        out = self._new(i_out)
        return _copier(out, view)

    def _plan_strided_slice(self, op):
        T = self.graph.tensors
        x = self._buf[op.inputs[0]]
        begin, end, strides = (self._buf[i].tolist() for i in op.inputs[1:])
        o = op.options
        if T[op.inputs[0]].zero_points != T[op.outputs[0]].zero_points or T[op.inputs[0]].scales != T[op.outputs[0]].scales:
            raise ValueError("input and output quantization differ")
        sl = []
        for d in range(x.ndim):
            b = None if (o.get("begin_mask", 0) >> d) & 1 else begin[d]
            e = None if (o.get("end_mask", 0) >> d) & 1 else end[d]
            if strides[d] == 0:
                raise ValueError("a zero stride")
            sl.append(slice(b, e, strides[d]))
        return self._static_view(op.outputs[0], x[tuple(sl)])

    def _plan_split_v(self, op):
        x = self._buf[op.inputs[0]]
        sizes = [int(s) for s in self._buf[op.inputs[1]].reshape(-1)]
        axis = int(self._buf[op.inputs[2]].reshape(-1)[0])
        axis = axis + x.ndim if axis < 0 else axis
        if -1 in sizes:
            sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
        if sum(sizes) != x.shape[axis] or len(sizes) != len(op.outputs):
            raise ValueError(f"sizes {sizes} do not split axis {axis} of {x.shape} into {len(op.outputs)}")
        start, copies = 0, []
        for size, i_out in zip(sizes, op.outputs, strict=True):
            sl = [slice(None)] * x.ndim
            sl[axis] = slice(start, start + size)
            run = self._static_view(i_out, x[tuple(sl)])
            if run is not None:
                copies.append(run)
            start += size
        if not copies:
            return None

        def run():
            for copy in copies:
                copy()

        run.instr = None if any(c.instr is None for c in copies) else [i for c in copies for i in c.instr]
        return run

    def _plan_concatenation(self, op):
        T = self.graph.tensors
        out_spec = T[op.outputs[0]]
        out = self._new(op.outputs[0])
        axis = op.options.get("axis", 0)
        axis = axis + out.ndim if axis < 0 else axis
        if op.options.get("fused_activation_function", 0):
            raise UnsupportedLayer(f"{self.where}: CONCATENATION with a fused activation is not run")
        parts = []
        start = 0
        for i in op.inputs:
            x = self._buf[i]
            sl = [slice(None)] * out.ndim
            sl[axis] = slice(start, start + x.shape[axis])
            start += x.shape[axis]
            dst = out[tuple(sl)]
            if dst.shape != x.shape:
                raise ValueError(f"input of shape {x.shape} does not fit the output {out.shape} on axis {axis}")
            same = T[i].scales == out_spec.scales and T[i].zero_points == out_spec.zero_points
            parts.append((x, dst, None if same else _concat_rescale_table(T[i], out_spec)))
        if start != out.shape[axis]:
            raise ValueError(f"the inputs fill {start} of {out.shape[axis]} on axis {axis}")
        instr = []
        for x, dst, table in parts:
            if table is None:
                instr = None if instr is None or _copy_instr(dst, x) is None else instr + _copy_instr(dst, x)
            elif instr is not None and dst.flags.c_contiguous and x.flags.c_contiguous:
                instr.append((2, dst.ctypes.data, x.ctypes.data, x.size, table.ctypes.data))
            else:
                instr = None
        if all(table is None for _, _, table in parts):
            inputs = tuple(x for x, _, _ in parts)

            def run():
                np.concatenate(inputs, axis=axis, out=out)
        else:
            def run():
                for x, dst, table in parts:
                    if table is None:
                        np.copyto(dst, x)
                    else:
                        np.take(table, x.view(np.uint8), out=dst)

        run.instr = instr
        return run

    def _plan_conv_2d(self, op):
        return self._plan_conv(op, depthwise=False)

    def _plan_depthwise_conv_2d(self, op):
        return self._plan_conv(op, depthwise=True)

    def _plan_conv(self, op, depthwise: bool):
        T = self.graph.tensors
        x_spec, w_spec, out_spec = T[op.inputs[0]], T[op.inputs[1]], T[op.outputs[0]]
        x = self._buf[op.inputs[0]]
        w = self._buf[op.inputs[1]].astype(np.float64)
        bias = self._buf[op.inputs[2]].astype(np.float64).reshape(-1)
        out = self._new(op.outputs[0])
        o = op.options
        sh, sw = o["stride_h"], o["stride_w"]
        dh, dw = o.get("dilation_h_factor", 1), o.get("dilation_w_factor", 1)
        _, H, W, C = x.shape
        if depthwise:
            _, kh, kw, c_out = w.shape
            mult = o.get("depth_multiplier", 1) or 1
            if c_out != C * mult:
                raise ValueError(f"filter has {c_out} channels for {C} inputs x depth multiplier {mult}")
            channels = [oc // mult for oc in range(c_out)]
        else:
            c_out, kh, kw, c_in = w.shape
            if c_in != C:
                raise ValueError(f"filter takes {c_in} channels, input has {C}")
            channels = list(range(C))
        Ho, Wo = (H - (kh - 1) * dh - 1) // sh + 1, (W - (kw - 1) * dw - 1) // sw + 1
        if o.get("padding") == 0:  # SAME: run only where it pads nothing (e.g. 1x1 kernels)
            same = (-(-H // sh), -(-W // sw))
            if same != (Ho, Wo):
                raise UnsupportedLayer(
                    f"{self.where}: {op.op} with SAME padding that pads its input ({x.shape}, kernel {kh}x{kw}); "
                    f"only VALID convolutions, or SAME ones that add no padding, are run"
                )
        if (1, Ho, Wo, c_out) != out.shape:
            raise ValueError(f"VALID convolution of {x.shape} gives (1, {Ho}, {Wo}, {c_out}), the output is {out.shape}")
        if len(bias) != c_out:
            raise ValueError(f"bias has {len(bias)} values for {c_out} channels")
        lo, hi = _activation_range(out_spec, o.get("fused_activation_function", 0))
        tail = _Accumulate(Ho * Wo, c_out, _conv_scales(x_spec, w_spec, out_spec, c_out), out, lo, hi, out_spec.zero_point)
        idx = _window_index(x.shape, kh, kw, sh, sw, dh, dw, (Ho, Wo), channels)
        P, K = Ho * Wo, kh * kw
        xflat = x.reshape(-1)
        zp = x_spec.zero_point
        if self.native:
            w8 = self._buf[op.inputs[1]]
            if depthwise:
                wk = np.ascontiguousarray(w8.reshape(K, c_out))
                cidx = np.ascontiguousarray(idx, dtype=np.int32)
            else:
                wk = np.ascontiguousarray(w8.reshape(c_out, K * C).T)
                cidx = np.ascontiguousarray(idx.reshape(P, K * C), dtype=np.int32)
            fold = bias - zp * wk.astype(np.float64).sum(axis=0)
            return self._native_layer("kws_depthwise" if depthwise else "kws_dense", x, cidx, P,
                                      K if depthwise else K * C, wk, c_out, fold, tail, out)
        if depthwise:
            wk = w.reshape(K, c_out)
            fbias = bias - zp * wk.sum(axis=0)
            cols8 = np.empty((P, K, c_out), dtype=np.int8)
            cols = np.empty((P, K, c_out), dtype=np.float64)
            contiguous = False

            def run():
                np.take(xflat, idx, out=cols8)
                np.multiply(cols8, wk, out=cols)
                np.sum(cols, axis=1, out=tail.acc)
                tail.acc += fbias
                tail.finish()
        else:
            wmat = np.ascontiguousarray(w.reshape(c_out, K * C).T)  # (taps x channels, out)
            fbias = bias - zp * wmat.sum(axis=0)
            flat_idx = idx.reshape(P, K * C)
            # A window that is the whole input in order needs no gather.
            contiguous = P == 1 and np.array_equal(flat_idx[0], np.arange(xflat.size))
            cols = np.empty((P, K * C), dtype=np.float64)
            cols8 = None if contiguous else np.empty((P, K * C), dtype=np.int8)
            src = xflat.reshape(1, -1)

            def run():
                if contiguous:
                    np.copyto(cols, src)
                else:
                    np.take(xflat, flat_idx, out=cols8)
                    np.copyto(cols, cols8)
                np.matmul(cols, wmat, out=tail.acc)
                tail.acc += fbias
                tail.finish()

        return run

    def _plan_fully_connected(self, op):
        T = self.graph.tensors
        x_spec, w_spec, out_spec = T[op.inputs[0]], T[op.inputs[1]], T[op.outputs[0]]
        x = self._buf[op.inputs[0]]
        w = self._buf[op.inputs[1]].astype(np.float64)
        if w.ndim != 2:
            raise ValueError(f"weights of shape {w.shape}")
        n_out, n_in = w.shape
        w = w - np.asarray(w_spec.zero_points or [0], dtype=np.float64).reshape(-1, 1)
        bias = self._buf[op.inputs[2]].astype(np.float64).reshape(-1)
        if x.size % n_in or len(bias) != n_out:
            raise ValueError(f"input of {x.size} values for weights {w.shape}, bias of {len(bias)}")
        out = self._new(op.outputs[0])
        rows = x.size // n_in
        if self.native and not any(w_spec.zero_points):
            tail = _Accumulate(rows, n_out, _conv_scales(x_spec, w_spec, out_spec, n_out), out, 0, 0, 0)
            lo, hi = _activation_range(out_spec, op.options.get("fused_activation_function", 0))
            tail.lo, tail.hi, tail.zp = lo, hi, out_spec.zero_point
            wk = np.ascontiguousarray(self._buf[op.inputs[1]].T)
            cidx = np.arange(rows * n_in, dtype=np.int32).reshape(rows, n_in)
            fold = bias - x_spec.zero_point * wk.astype(np.float64).sum(axis=0)
            return self._native_layer("kws_dense", x, cidx, rows, n_in, wk, n_out, fold, tail, out)
        wmat = np.ascontiguousarray(w.T)
        fbias = bias - x_spec.zero_point * wmat.sum(axis=0)
        lo, hi = _activation_range(out_spec, op.options.get("fused_activation_function", 0))
        tail = _Accumulate(rows, n_out, _conv_scales(x_spec, w_spec, out_spec, n_out), out, lo, hi, out_spec.zero_point)
        cols = np.empty((rows, n_in), dtype=np.float64)
        src = x.reshape(rows, n_in)

        def run():
            np.copyto(cols, src)
            np.matmul(cols, wmat, out=tail.acc)
            tail.acc += fbias
            tail.finish()

        return run

    def _native_layer(self, fn, x, idx, P, K, w, C, fold, tail, out):
        """The C kernel for a layer: every pointer made here, once."""
        from .native import lib, ptr

        if not x.flags.c_contiguous or not out.flags.c_contiguous:
            raise ValueError("the layer's input or output is not contiguous")
        if np.abs(fold).max(initial=0) >= 2**31:
            raise ValueError("the folded bias does not fit int32")
        rq = tail.requant
        keep = (idx, w, np.ascontiguousarray(fold, dtype=np.int32), rq.multiplier.astype(np.int32),
                (rq.left - rq.right).astype(np.int32))
        if len(keep[3]) == 1:
            keep = keep[:3] + (np.repeat(keep[3], C), np.repeat(keep[4], C))
        self._keep = getattr(self, "_keep", []) + [keep, x, out]
        args = (ptr("int8_t *", x), ptr("int32_t *", keep[0]), P, K, ptr("int8_t *", keep[1]), C,
                ptr("int32_t *", keep[2]), ptr("int32_t *", keep[3]), ptr("int32_t *", keep[4]),
                tail.zp, tail.lo, tail.hi, ptr("int8_t *", out))
        kernel = getattr(lib, fn)

        def run():
            kernel(*args)

        addresses = [keep[0], keep[1], keep[2], keep[3], keep[4]]
        run.instr = [(3 if fn == "kws_dense" else 4, x.ctypes.data, addresses[0].ctypes.data, P, K,
                      addresses[1].ctypes.data, C, addresses[2].ctypes.data, addresses[3].ctypes.data,
                      addresses[4].ctypes.data, tail.zp, tail.lo, tail.hi, out.ctypes.data)]
        return run

    def _plan_table(self, op, table):
        x, out = self._buf[op.inputs[0]], self._new(op.outputs[0])
        if x.shape != out.shape:
            raise ValueError(f"input {x.shape} and output {out.shape} differ")
        xu = x.view(np.uint8)

        def run():
            np.take(table, xu, out=out)

        run.instr = [(2, out.ctypes.data, x.ctypes.data, x.size, table.ctypes.data)] if x.flags.c_contiguous else None
        self._tables = getattr(self, "_tables", []) + [table]
        return run

    def _plan_logistic(self, op):
        T = self.graph.tensors
        return self._plan_table(op, _float_table(T[op.inputs[0]], T[op.outputs[0]], _sigmoid))

    def _plan_quantize(self, op):
        T = self.graph.tensors
        return self._plan_table(op, _requant_table(T[op.inputs[0]], T[op.outputs[0]]))

    def receptive_steps(self) -> int:
        """Steps of input that can still influence the output: one more than the history
        all state variables hold together (each keeps at most one row per step; an upper
        bound, which is all replaying needs)."""
        return 1 + sum(int(v.initial.shape[1]) if v.initial.ndim > 1 else 1 for v in self.graph.variables)

    # -- running ----------------------------------------------------------------------

    def reset(self) -> None:
        for buf, v in zip(self._vars, self.graph.variables, strict=True):
            np.copyto(buf, v.initial)

    def quantize_features(self, features: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Front-end features (float, as pymicro-features gives them) to the network's int8 input:
        round half to even of ``x / scale + zero_point``, saturated to int8."""
        if out is None:
            out = np.empty(features.shape, dtype=np.int8)
        q = self._qbuf if features.shape == self._qbuf.shape else np.empty(features.shape)
        np.divide(features, self.input_scale, out=q)
        q += self.input_zero_point
        np.rint(q, out=q)
        np.clip(q, -128, 127, out=q)
        np.copyto(out, q, casting="unsafe")
        return out

    def step_quantized(self, q_input: np.ndarray) -> int:
        """One step on int8 input of shape (stride, features); the raw quantized output."""
        if q_input.shape != (self.stride, self.features):
            raise AudioError(f"a network step takes ({self.stride}, {self.features}) features, got {q_input.shape}")
        np.copyto(self.input[0], q_input)
        if self._program is not None:
            self._program[3](self._program[1], self._program[2])
        else:
            for run in self._steps:
                run()
        return int(self._out[0])

    def probability(self, q_output: int) -> float:
        return (q_output - self.output_zero_point) * self.output_scale
