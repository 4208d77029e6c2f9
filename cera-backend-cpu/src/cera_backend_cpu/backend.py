"""The CPU backend: `cera.backend.Backend` on numpy arrays and the C kernels.

Tensors are C-contiguous float32 numpy arrays. Weights stay in the memory-mapped GGUF
bytes, quantized; `linear` quantizes the activations to the 8-bit format llama.cpp
pairs with each weight type and runs the C dot products on a thread pool inside C,
with the GIL released (cffi releases it around every call in API mode).

Each op does a little numpy bookkeeping (shape checks, an output allocation) and one
C call; the C functions take raw pointers and sizes only, so a later execution plan
can chain them in C without coming back to Python.

Choosing things: ``CpuBackend(threads=None, variant=None)``; ``threads`` defaults to
$CERA_THREADS, else the physical cores; ``variant`` defaults to $CERA_CPU_VARIANT, else
the best kernel variant this CPU supports (scalar, avx2, avx512, avx512vnni, neon).
"""

from __future__ import annotations

import math
import os
import platform
import threading
from typing import Any

import numpy as np
from cera.backend import OPS as CORE_OPS
from cera.backend import AttentionSpec, Backend, DeviceInfo, KVLayerSpec, RopeSpec, Weight
from cera.errors import BackendUnavailable, CeraError, ModelConfigError, UnsupportedOperation, UnsupportedTensorType
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from ._native import best_variant, compiled_variants, cpu_features, ffi, lib
from .capabilities import OPS, TENSOR_TYPES
from .plan import Input
from .plan import execute as execute_with_plans
from .state import CpuState
from .threads import physical_cores

UNARY_OPS = {"silu": 0, "gelu": 1, "gelu_erf": 2, "relu": 3}
GLU_OPS = {"swiglu": 0, "geglu": 1}


class ShapeError(CeraError, ValueError):
    """An op got tensors whose shapes do not fit together (a bug in the calling model)."""


class CpuWeight(Weight):
    """A weight in its stored GGUF form: a read-only numpy view of the file's bytes.

    ``shape`` is in GGML order (ne0, the row length, first). Rows of ne0 elements are
    ``row_bytes`` apart; a 3-D weight (MoE experts) is ``shape[2]`` matrices back to back.
    """

    __slots__ = ("name", "ggml_type", "type_id", "shape", "data", "row_bytes", "ptr", "_dense")

    def __init__(self, name: str, ggml_type: str, shape: tuple[int, ...], data: np.ndarray):
        self.name = name
        self.ggml_type = ggml_type
        self.type_id = int(GGMLQuantizationType[ggml_type])
        self.shape = tuple(int(d) for d in shape)
        self.data = data
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType[ggml_type]]
        self.row_bytes = self.shape[0] // block * size
        # One cffi pointer for the weight's lifetime: no per-call conversion.
        self.ptr = ffi.from_buffer(data)
        self._dense: np.ndarray | None = None

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)

    def dense(self) -> np.ndarray:
        """The weight dequantized to float32, numpy shape (reverse of GGML's); cached.

        Meant for small tensors (norm weights, biases, per-channel scales); a large
        matrix is never expanded by the ops."""
        if self._dense is None:
            out = np.empty(self.n_elements, np.float32)
            rc = lib.cera_dequantize(self.type_id, self.ptr, ffi.from_buffer("float[]", out), self.n_elements)
            if rc != 0:
                raise UnsupportedTensorType(self.name, self.ggml_type, "cpu")
            self._dense = out.reshape(tuple(reversed(self.shape)))
        return self._dense

    def __repr__(self) -> str:
        return f"CpuWeight({self.name!r}, {self.ggml_type}, shape={self.shape})"


def _f32(x) -> np.ndarray:
    """x as a C-contiguous float32 array (no copy when it already is one)."""
    if isinstance(x, CpuWeight):
        return x.dense()
    return np.ascontiguousarray(x, dtype=np.float32)


def _fptr(a: np.ndarray):
    return ffi.from_buffer("float[]", a)


# cffi pointer types of array arguments, by numpy dtype character
_C_TYPES = {"f": "float[]", "i": "int32_t[]", "e": "uint16_t[]"}


def _env_threads() -> int | None:
    raw = os.environ.get("CERA_THREADS", "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise BackendUnavailable(f"CERA_THREADS={raw!r} is not a positive integer; unset it or set a thread count")
    return n


class _ThreadState(threading.local):
    recorder = None  # the plan.Recorder of a pass this thread is recording


class CpuBackend(Backend):
    """The CPU backend. See the module docstring."""

    name = "cpu"
    tensor_types = frozenset(TENSOR_TYPES)
    ops = frozenset(OPS)

    def __init__(self, threads: int | None = None, variant: str | None = None):
        if threads is None:
            threads = _env_threads() or physical_cores()
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise BackendUnavailable(f"threads must be a positive integer, got {threads!r}")
        if variant is None:
            variant = os.environ.get("CERA_CPU_VARIANT", "").strip() or "auto"
        err = ffi.new("char[]", 256)
        ctx = lib.cera_ctx_new(threads, variant.encode(), err, 256)
        if ctx == ffi.NULL:
            raise BackendUnavailable(
                f"backend 'cpu': {ffi.string(err).decode()}; set CERA_CPU_VARIANT to one of "
                f"{', '.join(['auto', *compiled_variants()])}"
            )
        self._ctx = ffi.gc(ctx, lib.cera_ctx_free)
        spin = os.environ.get("CERA_CPU_SPIN_US", "").strip()
        if spin:
            try:
                self.set_spin(int(spin))
            except ValueError:
                raise BackendUnavailable(f"CERA_CPU_SPIN_US={spin!r} is not a number of microseconds") from None
        self.threads = lib.cera_ctx_threads(ctx)
        self.variant = ffi.string(lib.cera_ctx_variant(ctx)).decode()
        self._rope_factors: dict[RopeSpec, Any] = {}
        # With an f16 KV cache, keep attention's weighted sum of values in f16 as llama.cpp's
        # CPU flash attention (its default) does: its logits move by about 1 with flash
        # attention on vs off, so matching its greedy tokens means matching this. Set it to
        # False for the more exact f32 accumulator.
        self.attention_f16_accumulator = True
        # Replay decode steps from recorded plans (plan.py); CERA_CPU_PLANS=0 runs every
        # step op by op instead (to compare, or to rule plans out when chasing a bug).
        self.use_plans = os.environ.get("CERA_CPU_PLANS", "1").strip() != "0"
        self._tls = _ThreadState()

    # -- device --------------------------------------------------------------------------

    def probe(self) -> DeviceInfo:
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            memory = None
        cpu = platform.processor() or platform.machine()
        return DeviceInfo(
            usable=True,
            device=f"CPU {cpu}, {self.threads} threads, {self.variant} kernels (best here: {best_variant()}; {cpu_features()})",
            memory_bytes=memory,
        )

    def set_spin(self, microseconds: int) -> None:
        """How long idle pool threads spin before sleeping (default 200 us; also
        $CERA_CPU_SPIN_US). Spinning makes the next op start at once; sleeping frees the
        cores for other processes between bursts of work."""
        lib.cera_ctx_set_spin_us(self._ctx, int(microseconds))

    # -- weights and state --------------------------------------------------------------

    def upload(self, gguf, name: str) -> CpuWeight:
        try:
            info = gguf.tensors[name]
        except KeyError:
            raise ModelConfigError(f"{getattr(gguf, 'path', 'the model file')}: has no tensor {name!r}") from None
        type_name = info.ggml_type.name
        reason = self.cannot_serve(type_name)
        if reason:
            raise UnsupportedTensorType(name, type_name, self.name, reason)
        return CpuWeight(name, type_name, info.shape, gguf.tensor_data(name))

    def weight(
        self, name: str, data: np.ndarray, ggml_type: str = "F32", shape: tuple[int, ...] | None = None
    ) -> CpuWeight:
        """A weight from an array instead of a file (tests, tiny models, computed tables).

        For F32/F16/BF16 pass the values (BF16 as uint16 bits) in numpy shape; for a
        quantized type pass the stored bytes (uint8, as gguf.quants.quantize returns them)
        and ``shape`` in GGML order."""
        if ggml_type not in TENSOR_TYPES:
            raise UnsupportedTensorType(name, ggml_type, self.name)
        if ggml_type in ("F32", "F16", "BF16"):
            dtype = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}[ggml_type]
            data = np.ascontiguousarray(data, dtype=dtype)
            shape = tuple(reversed(data.shape)) if shape is None else shape
        else:
            data = np.ascontiguousarray(data, dtype=np.uint8)
            if shape is None:
                raise ShapeError(f"weight {name!r} of type {ggml_type}: pass its GGML shape")
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType[ggml_type]]
        if shape[0] % block or math.prod(shape) // block * size != data.nbytes:
            raise ShapeError(f"weight {name!r}: {data.nbytes} bytes do not hold a {ggml_type} tensor of shape {shape}")
        return CpuWeight(name, ggml_type, tuple(shape), data)

    def new_state(self, layers: list[KVLayerSpec], n_ctx: int, kv_type: str = "f16") -> CpuState:
        return CpuState(layers, n_ctx, kv_type)

    def execute(self, model, state, tokens: np.ndarray, positions: np.ndarray, output: str):
        """A forward pass; single-token steps (decoding) replay a recorded plan (plan.py)."""
        if self.use_plans and len(tokens) == 1 and isinstance(state, CpuState):
            return execute_with_plans(self, model, state, tokens, positions, output)
        return model.forward(state, tokens, positions, output)

    # -- running ops: eagerly, and into a recording when one is attached ------------------

    def _call(self, name: str, *args, eager: tuple = ()) -> int:
        """Run C op ``cera_<name>`` on the arguments (arrays become pointers). While a
        `plan.Recorder` is attached to this thread, the op is also logged for a plan
        (``eager`` holds trailing arguments that a plan supplies per run instead)."""
        rec = self._tls.recorder
        if rec is not None:
            rec.record(name, args)
        c_args = []
        for a in args:
            if isinstance(a, np.ndarray):
                a = ffi.from_buffer(_C_TYPES.get(a.dtype.char, "char[]"), a)
            elif isinstance(a, Input):
                a = ffi.from_buffer("int32_t[]", a.array)
            c_args.append(a)
        return getattr(lib, "cera_" + name)(self._ctx, *c_args, *eager)

    def _empty(self, shape) -> np.ndarray:
        """A new float32 tensor for an op's result (from the recording when recording)."""
        rec = self._tls.recorder
        return np.empty(shape, np.float32) if rec is None else rec.new(shape)

    def _contig(self, x) -> np.ndarray:
        """x as a C-contiguous float32 array: itself when it is one, a weight's dense
        values, else a copy (made by a C op while recording, so the plan makes it too)."""
        rec = self._tls.recorder
        if isinstance(x, CpuWeight):
            d = x.dense()
            if rec is not None:
                rec.constant(d)
            return d
        if rec is not None and isinstance(x, np.ndarray) and x.dtype == np.float32 and not x.flags.c_contiguous:
            rows = x.shape[0] if x.ndim > 1 else 1
            if x.ndim > 1 and x[0].flags.c_contiguous and x.strides[0] % 4 == 0:
                y = rec.new(x.shape)
                self._call("copy_rows", x, x.strides[0] // 4, rows, x[0].size, y)
                return y
            rec.fail(f"a tensor with strides {x.strides} that no op can copy")
        return np.ascontiguousarray(x, dtype=np.float32)

    # -- ops ------------------------------------------------------------------------------

    def embedding(self, table: CpuWeight, ids: np.ndarray) -> np.ndarray:
        ids = np.ascontiguousarray(ids, dtype=np.int32)
        if ids.ndim != 1:
            raise ShapeError(f"embedding ids must be 1-D, got shape {ids.shape}")
        if len(table.shape) != 2:
            raise ShapeError(f"embedding table {table.name!r} must be 2-D, has shape {table.shape}")
        dim, n_rows = table.shape
        if ids.size and (ids.min() < 0 or ids.max() >= n_rows):
            bad = int(ids[(ids < 0) | (ids >= n_rows)][0])
            raise ShapeError(f"token id {bad} is outside the embedding table {table.name!r} of {n_rows} rows")
        out = self._empty((ids.size, dim))
        self._call(
            "get_rows", table.type_id, table.ptr, table.row_bytes, dim, n_rows, Input("tokens", ids), ids.size, out
        )
        return out

    def linear(self, x: np.ndarray, w: CpuWeight, bias: CpuWeight | None = None) -> np.ndarray:
        if len(w.shape) != 2:
            raise ShapeError(
                f"linear: weight {w.name!r} has shape {w.shape}; a 2-D matrix is needed (experts go to moe)"
            )
        return self._matmul(x, w, 0, bias)

    def _matmul(self, x, w: CpuWeight, expert: int, bias: CpuWeight | None) -> np.ndarray:
        x = self._contig(x)
        K, N = w.shape[0], w.shape[1]
        if x.shape[-1] != K:
            raise ShapeError(f"linear: input has {x.shape[-1]} features but weight {w.name!r} {w.shape} takes {K}")
        M = x.size // K
        y = self._empty(x.shape[:-1] + (N,))
        b = ffi.NULL
        if bias is not None:
            b = self._contig(bias).reshape(-1)
            if b.size != N:
                raise ShapeError(f"linear: bias {bias.name!r} has {b.size} values for {N} outputs")
        wp = w.ptr + expert * N * w.row_bytes if expert else w.ptr
        rc = self._call("matmul", w.type_id, wp, w.row_bytes, K, N, x, K, M, y, N, b)
        if rc != 0:
            raise UnsupportedTensorType(w.name, w.ggml_type, self.name, f"kernel error {rc}")
        return y

    def rms_norm(self, x: np.ndarray, w: CpuWeight | None, eps: float) -> np.ndarray:
        x = self._contig(x)
        n = x.shape[-1]
        y = self._empty(x.shape)
        wp = self._row_param(w, n, "rms_norm weight")
        self._call("rms_norm", x, x.size // n, n, wp, float(eps), y)
        return y

    def layer_norm(self, x: np.ndarray, w: CpuWeight | None, b: CpuWeight | None, eps: float) -> np.ndarray:
        x = self._contig(x)
        n = x.shape[-1]
        y = self._empty(x.shape)
        wp = self._row_param(w, n, "layer_norm weight")
        bp = self._row_param(b, n, "layer_norm bias")
        self._call("layer_norm", x, x.size // n, n, wp, bp, float(eps), y)
        return y

    def _row_param(self, w, n: int, what: str):
        if w is None:
            return ffi.NULL
        d = self._contig(w).reshape(-1)
        if d.size != n:
            raise ShapeError(f"{what} {getattr(w, 'name', '')!r} has {d.size} values for rows of {n}")
        return d

    def rope(self, x: np.ndarray, positions: np.ndarray, spec: RopeSpec) -> np.ndarray:
        x = self._contig(x)
        if x.ndim != 3:
            raise ShapeError(f"rope expects [n_tokens, n_heads, head_dim], got shape {x.shape}")
        n, heads, head_dim = x.shape
        positions = np.ascontiguousarray(positions, dtype=np.int32)
        if positions.shape != (n,):
            raise ShapeError(f"rope: {positions.shape} positions for {n} tokens")
        if spec.n_dims % 2 or not 0 < spec.n_dims <= head_dim:
            raise ShapeError(f"rope: n_dims {spec.n_dims} must be even and at most the head dimension {head_dim}")
        y = self._empty(x.shape)
        self._call(
            "rope", x, y, n, heads, head_dim, Input("positions", positions), spec.n_dims, int(spec.neox),
            spec.base, spec.freq_scale, self._freq_factors(spec), spec.ext_factor, spec.attn_factor,
            spec.beta_fast, spec.beta_slow, spec.n_ctx_orig,
        )  # fmt: skip
        return y

    def _freq_factors(self, spec: RopeSpec):
        if spec.freq_factors is None:
            return ffi.NULL
        cached = self._rope_factors.get(spec)
        if cached is None:
            ff = np.asarray(spec.freq_factors, np.float32)
            if ff.size < spec.n_dims // 2:
                raise ShapeError(f"rope: {ff.size} freq_factors for {spec.n_dims} rotated dimensions (need n_dims/2)")
            cached = self._rope_factors[spec] = (ff, _fptr(ff))
        return cached[1]

    def attention(self, q, k, v, state: CpuState, layer: int, positions: np.ndarray, spec: AttentionSpec) -> np.ndarray:
        q, k, v = self._contig(q), self._contig(k), self._contig(v)
        if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
            raise ShapeError(f"attention expects 3-D q, k, v, got {q.shape}, {k.shape}, {v.shape}")
        n, n_heads, k_dim = q.shape
        n_kv = k.shape[1]
        if k.shape[0] != n or v.shape[0] != n or k.shape[2] != k_dim or n_heads % n_kv:
            raise ShapeError(f"attention: q {q.shape}, k {k.shape}, v {v.shape} do not fit together")
        positions = np.ascontiguousarray(positions, dtype=np.int32)
        if positions.shape != (n,):
            raise ShapeError(f"attention: {positions.shape} positions for {n} tokens")
        start, _ = state.check_kv(layer, k, v)
        v_dim = v.shape[2]
        out = self._empty((n, n_heads * v_dim))
        k_cache, v_cache, cell_pos = state.cache_pointers(layer)
        rc = self._call(
            "attention", q, k, v, n, n_heads, n_kv, k_dim, v_dim, k_cache, v_cache, int(state.kv_type == "f16"),
            state.n_ctx, cell_pos, Input("positions", positions), float(spec.scale), int(spec.window or 0),
            float(spec.softcap or 0.0), int(self.attention_f16_accumulator), out,
            eager=(start,),
        )  # fmt: skip
        if rc != 0:
            raise MemoryError("attention: out of memory")
        return out

    def unary(self, op: str, x: np.ndarray) -> np.ndarray:
        code = UNARY_OPS.get(op)
        if code is None:
            raise UnsupportedOperation(f"backend 'cpu' has no unary op {op!r} (it has {', '.join(UNARY_OPS)})")
        x = self._contig(x)
        y = self._empty(x.shape)
        self._call("unary", code, x, y, x.size)
        return y

    def glu(self, op: str, gate: np.ndarray, up: np.ndarray) -> np.ndarray:
        code = GLU_OPS.get(op)
        if code is None:
            raise UnsupportedOperation(f"backend 'cpu' has no glu op {op!r} (it has {', '.join(GLU_OPS)})")
        gate, up = self._contig(gate), self._contig(up)
        if gate.shape != up.shape:
            raise ShapeError(f"{op}: gate {gate.shape} and up {up.shape} differ")
        y = self._empty(gate.shape)
        self._call("glu", code, gate, up, y, y.size)
        return y

    def add(self, a, b) -> np.ndarray:
        return self._binary(0, a, b)

    def mul(self, a, b) -> np.ndarray:
        return self._binary(1, a, b)

    def _binary(self, code: int, a, b) -> np.ndarray:
        """a (+ or *) b for tensors of one shape, or one of them a row broadcast over the other."""
        a, b = self._contig(a), self._contig(b)
        if a.size < b.size:
            a, b = b, a  # both ops commute
        n = a.shape[-1] if a.ndim else 1
        if a.shape == b.shape:
            rows, n, b_stride = 1, a.size, 0
        elif b.size == n and a.size and b.shape == (1,) * (b.ndim - 1) + (n,) and b.ndim <= a.ndim:
            rows, b_stride = a.size // n, 0
        else:  # a broadcast the kernel does not do: numpy, and no plan
            rec = self._tls.recorder
            if rec is not None:
                rec.fail(f"elementwise op on shapes {a.shape} and {b.shape}")
            return (np.add if code == 0 else np.multiply)(a, b, dtype=np.float32)
        y = self._empty(a.shape)
        self._call("binary", code, a, b, b_stride, y, rows, n)
        return y

    def scale(self, x, s: float) -> np.ndarray:
        x = self._contig(x)
        y = self._empty(x.shape)
        self._call("scale", x, float(s), y, x.size)
        return y

    def softcap(self, x, cap: float) -> np.ndarray:
        x = self._contig(x)
        y = self._empty(x.shape)
        self._call("softcap", x, float(cap), y, x.size)
        return y

    def conv1d_causal(self, x, w: CpuWeight, state: CpuState, layer: int) -> np.ndarray:
        """Depthwise causal conv over tokens: ``y[t, c] = sum_j w[c, j] * xx[t + j, c]``
        where xx is the carried last ``d_conv - 1`` inputs followed by x (ggml_ssm_conv)."""
        self._unrecordable("conv1d_causal (numpy, with state carried in Python)")
        x = _f32(x)
        kernel = w.dense()  # numpy shape [channels, d_conv]
        if x.ndim != 2 or kernel.ndim != 2 or kernel.shape[0] != x.shape[1]:
            raise ShapeError(f"conv1d_causal: input {x.shape} and weight {w.name!r} {w.shape} do not fit")
        channels, d_conv = kernel.shape
        carried = state.conv_state(layer, (d_conv - 1, channels))
        xx = np.concatenate([carried, x], axis=0)
        n = x.shape[0]
        y = np.zeros((n, channels), np.float32)
        for j in range(d_conv):
            y += xx[j : j + n] * kernel[:, j]
        state.conv[layer] = xx[n:].copy()
        return y

    def moe(self, x, router: CpuWeight, gate: CpuWeight, up: CpuWeight, down: CpuWeight, k: int, **kw) -> np.ndarray:
        """Top-k mixture of experts, as llama.cpp's build_moe_ffn.

        Options: ``gating`` "softmax" (default) or "sigmoid" for the router
        probabilities; ``selection_bias`` (a Weight of n_expert values added to the
        probabilities only to choose experts); ``norm_topk`` (renormalise the k chosen
        weights to sum 1); ``weight_scale`` (multiply them); ``activation`` "silu"
        (SwiGLU, default) or "gelu" (GeGLU). gate/up are [n_embd, n_ff, n_expert] and
        down [n_ff, n_embd, n_expert] in GGML order, like ffn_{gate,up,down}_exps."""
        self._unrecordable("moe (its routing runs in numpy)")
        unknown = set(kw) - {"gating", "selection_bias", "norm_topk", "weight_scale", "activation"}
        if unknown:
            raise UnsupportedOperation(f"backend 'cpu': moe has no option(s) {sorted(unknown)}")
        x = _f32(x)
        n_expert = router.shape[1]
        if len(gate.shape) != 3 or gate.shape[2] != n_expert or up.shape != gate.shape or down.shape[2] != n_expert:
            raise ShapeError(f"moe: expert tensors {gate.shape}, {up.shape}, {down.shape} for {n_expert} experts")
        if not 0 < k <= n_expert:
            raise ShapeError(f"moe: k={k} experts per token out of {n_expert}")
        logits = self.linear(x, router)
        gating = kw.get("gating", "softmax")
        if gating == "softmax":
            e = np.exp(logits - logits.max(axis=-1, keepdims=True))
            probs = e / e.sum(axis=-1, keepdims=True)
        elif gating == "sigmoid":
            probs = 1.0 / (1.0 + np.exp(-logits))
        else:
            raise UnsupportedOperation(f"backend 'cpu': moe gating {gating!r} (use 'softmax' or 'sigmoid')")
        probs = probs.astype(np.float32, copy=False)
        select = probs
        if kw.get("selection_bias") is not None:
            select = probs + _f32(kw["selection_bias"]).reshape(-1)
        top = np.argsort(-select, axis=-1, kind="stable")[:, :k]
        weights = np.take_along_axis(probs, top, axis=-1)
        if kw.get("norm_topk"):
            weights = weights / weights.sum(axis=-1, keepdims=True)
        if kw.get("weight_scale") is not None:
            weights = weights * np.float32(kw["weight_scale"])
        act = {"silu": "swiglu", "gelu": "geglu"}.get(kw.get("activation", "silu"))
        if act is None:
            raise UnsupportedOperation(f"backend 'cpu': moe activation {kw['activation']!r} (use 'silu' or 'gelu')")
        out = np.zeros((x.shape[0], down.shape[1]), np.float32)
        for e in np.unique(top):
            tokens, slot = np.nonzero(top == e)
            xe = x[tokens]
            h = self.glu(act, self._matmul(xe, gate, int(e), None), self._matmul(xe, up, int(e), None))
            ye = self._matmul(h, down, int(e), None)
            out[tokens] += ye * weights[tokens, slot][:, None]
        return out

    # -- reading back ----------------------------------------------------------------------

    def to_numpy(self, x) -> np.ndarray:
        copy = np.array(x, dtype=np.float32, copy=True)
        rec = self._tls.recorder
        if rec is not None:
            rec.set_output(x, copy)
        return copy

    def _unrecordable(self, what: str) -> None:
        rec = self._tls.recorder
        if rec is not None:
            rec.fail(f"{what} has no plan form")

    def close(self) -> None:
        ctx, self._ctx = getattr(self, "_ctx", None), None
        if ctx is not None:
            ffi.release(ctx)


assert set(CORE_OPS) == set(OPS), "capabilities.OPS must list cera.backend.OPS"
