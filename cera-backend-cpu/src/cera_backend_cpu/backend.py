"""The CPU backend: `cera.backend.Backend` on numpy memory and the C kernels.

Weights stay in the memory-mapped GGUF bytes, quantized; products quantize the
activations to the 8-bit format llama.cpp pairs with each weight type and run the C dot
products on a thread pool inside C, with the GIL released. State lives in numpy arrays
(`cera.state.HostState`) that the kernels read through pointers.

`compile` turns a graph into a C execution plan (compile.py): a decode step is one C
call. The op methods below are the same kernels one call at a time, on numpy arrays:
the backend's eager form, for tests of single ops and for debugging.

Choosing things: ``CpuBackend(threads=None, variant=None)`` or ``CpuOptions``;
``threads`` defaults to $CERA_THREADS, else the physical cores; ``variant`` defaults to
$CERA_CPU_VARIANT, else the best kernel variant this CPU supports (scalar, avx2, avx512,
avx512vnni, neon).
"""

from __future__ import annotations

import math
import os
import platform
from typing import Any

import attrs
import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from cera.backend import AttentionSpec, Backend, BackendOptions, DeviceInfo, RopeSpec, Weight
from cera.errors import (
    BackendUnavailable,
    ModelConfigError,
    ResourceExhausted,
    ShapeError,
    UnsupportedOperation,
    UnsupportedTensorType,
)
from cera.graph.ops import OPS as OP_TABLE
from cera.graph.ops import names as op_names
from cera.graph.ops import limit_groups
from cera.state import KV_CODES, HostState, kv_row_shape

from ._native import best_variant, compiled_variants, cpu_features, ffi, lib
from .capabilities import OPS, TENSOR_TYPES
from .compile import CpuExecutable
from .threads import physical_cores
from .turboquant import register_state

UNARY_OPS = OP_TABLE["unary"].codes("kind")  # activation -> the kernels' code
GLU_OPS = OP_TABLE["glu"].codes("kind")


@attrs.frozen
class CpuOptions(BackendOptions):
    """``threads``: worker threads (default $CERA_THREADS, else the physical cores);
    ``variant``: the SIMD kernel variant (default $CERA_CPU_VARIANT, else the best here)."""

    threads: int | None = None
    variant: str | None = None


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


class CpuBackend(Backend):
    """The CPU backend. See the module docstring."""

    name = "cpu"
    tensor_types = frozenset(TENSOR_TYPES)
    weight_row_prefix = True  # a product reads the first N rows of a weight as they lie
    ops = frozenset(OPS)
    options_type = CpuOptions

    def __init__(self, threads: int | None = None, variant: str | None = None, device_index: int = 0,
                 memory_limit: int | None = None):  # fmt: skip
        if device_index not in (0, None):
            raise BackendUnavailable(f"backend 'cpu' has one device (index 0), not {device_index!r}")
        self.memory_limit = memory_limit
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
        # Compiled graphs run fused, as one C plan; CERA_CPU_PLANS=0 runs them step by step,
        # unfused (the same kernels op by op: to compare, or to rule fusion out in a bug hunt).
        self.use_plans = os.environ.get("CERA_CPU_PLANS", "1").strip() != "0"
        # In decode passes an adapted product is one step with its LoRA terms (csrc/matmul.c);
        # CERA_CPU_LORA_STEPS=0 runs the terms as separate ops (the same bits: to compare).
        self.lora_steps = os.environ.get("CERA_CPU_LORA_STEPS", "1").strip() != "0"

    # -- device --------------------------------------------------------------------------

    def probe(self) -> DeviceInfo:
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            memory = None
        cpu = platform.processor() or platform.machine()
        if self.memory_limit is not None:
            memory = min(memory or self.memory_limit, self.memory_limit)
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

    def compile_key(self) -> tuple:
        return (self.use_plans, bool(self.attention_f16_accumulator), self.lora_steps)

    def compile(self, graph, weights, state) -> CpuExecutable:
        """A graph as a C execution plan (compile.py); ops the C kernels lack run on the host."""
        self.check_ops(graph)
        bound = {}
        for name in graph.weights_used():
            w = weights.get(name)
            if w is None:
                raise ShapeError(f"the graph uses weight {name!r}, which was not uploaded")
            bound[name] = w
        return CpuExecutable(self, graph, bound, state, eager=not self.use_plans)

    # -- the eager kernels: one C call per op on numpy arrays --------------------------------

    def _call(self, name: str, *args) -> int:
        """Run C function ``cera_<name>`` (numpy arrays become pointers)."""
        c_args = []
        for a in args:
            if isinstance(a, np.ndarray):
                a = ffi.from_buffer(_C_TYPES.get(a.dtype.char, "char[]"), a)
            c_args.append(a)
        return getattr(lib, "cera_" + name)(self._ctx, *c_args)

    @staticmethod
    def _empty(shape) -> np.ndarray:
        return np.empty(shape, np.float32)

    @staticmethod
    def _contig(x) -> np.ndarray:
        return _f32(x)

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
        self._call("get_rows", table.type_id, table.ptr, table.row_bytes, dim, n_rows, ids, ids.size, out)
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
            "rope", x, y, n, heads, head_dim, positions, spec.n_dims, int(spec.neox),
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

    def attention(self, q, k, v, state: HostState, ref, slot: int, start: int, positions, spec: AttentionSpec) -> np.ndarray:
        """One sequence's attention: store k/v ``[n, kv_heads, dim]`` at cells [start,
        start + n) of ``slot`` of declared state ``ref`` (after ``state.begin``), attend
        q ``[n, heads, dk]`` over what it holds. Returns ``[n, heads * dv]``."""
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
        index = getattr(ref, "index", ref)
        kc, vc = state.k[index][slot], state.v[index][slot]
        if kc.shape[0] != n_kv or kc.shape[2] != kv_row_shape(state.kv_type, k_dim, True) or vc.shape[2] != kv_row_shape(state.kv_type, v.shape[2], False):
            raise ShapeError(f"attention: state {index} caches {kc.shape[0]} x {kc.shape[2]} / {vc.shape[2]}, got k {k.shape}, v {v.shape}")
        v_dim = v.shape[2]
        register_state(state)
        out = self._empty((n, n_heads * v_dim))
        rc = self._call(
            "attention", q, k, v, n, n_heads, n_kv, k_dim, v_dim, ffi.from_buffer(kc), ffi.from_buffer(vc),
            KV_CODES[state.kv_type], kc.shape[1], state.n_ctx, state.pos[slot], positions, float(spec.scale),
            int(spec.window or 0), float(spec.softcap or 0.0), int(self.attention_f16_accumulator), out, int(start),
        )  # fmt: skip
        if rc == -2:
            raise ResourceExhausted("attention: out of memory")
        if rc != 0:
            raise ShapeError(f"attention: the kernel refused its arguments (error {rc})")
        return out

    def argmax(self, x) -> np.ndarray:
        x = self._contig(x)
        out = np.empty(x.shape[:-1], np.int32)
        self._call("argmax", x, x.size // x.shape[-1], x.shape[-1], out)
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
        else:  # a broadcast the kernel does not do: numpy
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

    def moe(self, x, router: CpuWeight, gate: CpuWeight, up: CpuWeight, down: CpuWeight, k: int, **kw) -> np.ndarray:
        """Top-k mixture of experts, as llama.cpp's build_moe_ffn.

        Options: ``gating`` "softmax" (default) or "sigmoid" for the router
        probabilities; ``selection_bias`` (a Weight of n_expert values added to the
        probabilities only to choose experts); ``norm_topk`` (renormalise the k chosen
        weights to sum 1); ``weight_scale`` (multiply them); ``activation`` "silu"
        (SwiGLU, default) or "gelu" (GeGLU); ``groups``/``groups_used`` (group-limited
        routing, `cera.graph.ops.limit_groups`). gate/up are [n_embd, n_ff, n_expert] and
        down [n_ff, n_embd, n_expert] in GGML order, like ffn_{gate,up,down}_exps."""
        unknown = set(kw) - {"gating", "selection_bias", "norm_topk", "weight_scale", "activation", "groups", "groups_used"}
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
        select = limit_groups(select, kw.get("groups", 1), kw.get("groups_used", 1))
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

    def to_numpy(self, x) -> np.ndarray:
        return np.array(x, dtype=np.float32, copy=True)

    def close(self) -> None:
        ctx, self._ctx = getattr(self, "_ctx", None), None
        if ctx is not None:
            ffi.release(ctx)


assert set(OPS) <= set(op_names()), "capabilities.OPS names ops that cera.graph.ops does not have"
