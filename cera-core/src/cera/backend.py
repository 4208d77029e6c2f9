"""The Backend interface: a device and the op vocabulary every model is written against.

A model family never touches device memory directly. It asks the backend to upload its
weights (which stay in their GGUF quantized form wherever the backend has a kernel) and
writes its forward pass with the ops below. The CPU backend's numpy/C implementation is
the reference that every other backend is tested against, op by op.

Conventions (all backends):

- Activations are 2-D or 3-D row-major tensors of float32 values: ``[n_tokens, dim]`` or
  ``[n_tokens, n_heads, head_dim]``. Backends return their own tensor type; only
  `to_numpy` crosses back to the host.
- A weight of GGUF shape ``(ne0=in, ne1=out)`` is used as ``y = x @ W.T``: `linear` maps
  ``[n, in] -> [n, out]``.
- Positions are int32 arrays ``[n_tokens]``; token ids are int32 arrays ``[n_tokens]``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import attrs
import numpy as np

# The op vocabulary. A backend declares the subset it implements; a model lists what it needs.
OPS = (
    "embedding",  # rows of a (possibly quantized) table, as float32
    "linear",  # x @ W.T (+ bias), W quantized or float
    "rms_norm",  # x / sqrt(mean(x^2) + eps) * w
    "layer_norm",  # (x - mean) / sqrt(var + eps) * w + b
    "rope",  # rotary position embedding, normal or NeoX pairing, scaled frequency tables
    "attention",  # store K/V for the batch in the cache, attend over it (GQA, causal/sliding mask, softcap)
    "silu",
    "gelu",  # tanh approximation, as ggml_gelu
    "gelu_erf",
    "relu",
    "swiglu",  # silu(gate) * up
    "geglu",  # gelu(gate) * up
    "add",
    "mul",
    "scale",
    "softcap",  # cap * tanh(x / cap)
    "conv1d_causal",  # depthwise causal conv1d with carried state
    "moe",  # top-k expert routing and the expert FFNs
)


@attrs.frozen
class DeviceInfo:
    """What `Backend.probe` reports."""

    usable: bool
    device: str
    memory_bytes: int | None = None
    reason: str | None = None  # why not usable


@attrs.frozen
class RopeSpec:
    """How one attention layer rotates its queries and keys.

    ``n_dims`` is the number of rotated dimensions at the start of each head (the rest
    pass through). ``neox`` pairs dimension i with i + n_dims/2 (GPT-NeoX style, used by
    qwen2, gemma, phi3, ...); otherwise i pairs with i+1 (original llama). Frequencies
    follow llama.cpp's rope_yarn: theta_i = pos * base^(-2i/n_dims) / freq_factors[i],
    interpolated by ``freq_scale`` (1/linear factor) with the YaRN ramp when
    ``ext_factor`` is non-zero, and the result multiplied by ``attn_factor``.
    """

    n_dims: int
    base: float = 10000.0
    neox: bool = False
    freq_scale: float = 1.0
    freq_factors: tuple[float, ...] | None = None
    ext_factor: float = 0.0
    attn_factor: float = 1.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    n_ctx_orig: int = 0


@attrs.frozen
class AttentionSpec:
    """One attention layer's masking and scaling.

    ``window``: sliding-window size; a key at position p_k is visible from a query at p_q
    when ``0 <= p_q - p_k < window`` (llama.cpp's standard SWA). None: full causal.
    ``softcap``: soft-capping of the attention logits (gemma2), applied to the scaled
    logits: ``softcap * tanh(scale * q.k / softcap)``, as llama.cpp's flash attention does.
    """

    scale: float
    window: int | None = None
    softcap: float | None = None


@attrs.frozen
class KVLayerSpec:
    """The cache shape of one attention layer."""

    n_kv_heads: int
    k_dim: int  # head dimension of keys
    v_dim: int  # head dimension of values


class Weight:
    """A tensor uploaded to a backend, in its stored (possibly quantized) form."""

    name: str
    ggml_type: str
    shape: tuple[int, ...]  # GGML order


class State(ABC):
    """Per-session model state, owned by the backend: the KV cache (and conv/recurrent state).

    Cells are filled in order. A forward pass over n tokens writes cells
    ``[n_filled, n_filled + n)``; the session calls `commit` when the pass succeeded.
    Each cell remembers the position of its token, which is what masks compare.
    """

    n_ctx: int
    n_filled: int

    @abstractmethod
    def begin(self, positions: np.ndarray) -> None:
        """Reserve cells for a batch at these positions (before a forward pass)."""

    @abstractmethod
    def commit(self) -> None:
        """Keep the cells written by the last forward pass."""

    @abstractmethod
    def rollback(self) -> None:
        """Drop the cells of a forward pass that failed or was cancelled."""

    @abstractmethod
    def truncate(self, n: int) -> None:
        """Keep only the first n cells."""

    @abstractmethod
    def snapshot(self) -> Any:
        """An opaque copy of the state, for `restore`."""

    @abstractmethod
    def restore(self, snap: Any) -> None:
        """Return to a snapshot taken from this state."""


class Backend(ABC):
    """A compute device. See the module docstring for the op conventions."""

    name: str = "?"
    tensor_types: frozenset[str] = frozenset()
    ops: frozenset[str] = frozenset()

    @abstractmethod
    def probe(self) -> DeviceInfo:
        """Whether the backend can run here, and on what."""

    # -- weights and state ------------------------------------------------------

    @abstractmethod
    def upload(self, gguf, name: str) -> Weight:
        """Make tensor ``name`` of a `cera.gguf.GGUFFile` available to the ops.

        Raises `cera.errors.UnsupportedTensorType` naming the tensor, its type and this
        backend when there is no kernel for the type.
        """

    @abstractmethod
    def new_state(self, layers: list[KVLayerSpec], n_ctx: int, kv_type: str = "f16") -> State:
        """A fresh KV cache for one session: one entry per attention layer."""

    def execute(self, model, state: State, tokens: np.ndarray, positions: np.ndarray, output: str) -> Any:
        """Run one forward pass of ``model``. The default calls ``model.forward`` directly;
        a backend that can record a pass once and replay it (a GPU command buffer, a
        C-side execution plan) overrides this, so a family's forward stays plain code.

        What such a backend relies on: the ops a forward issues, and their non-tensor
        arguments, depend only on the model, the state's configuration (not its contents),
        the number of tokens and ``output``; per-token values reach the ops only through
        ``tokens`` and ``positions``; tensors go from op to op (numpy math on an op's
        result, or reading one back before the end, makes the pass unrecordable, and a
        backend then runs it op by op)."""
        return model.forward(state, tokens, positions, output)

    def cannot_serve(self, tensor_type: str) -> str | None:
        """None if this backend has a kernel for a GGML type, else why not."""
        if tensor_type in self.tensor_types:
            return None
        return f"backend {self.name!r} has no kernel for {tensor_type}"

    # -- ops ----------------------------------------------------------------------

    @abstractmethod
    def embedding(self, table: Weight, ids: np.ndarray) -> Any:
        """Rows ``ids`` of an embedding table, ``[n] -> [n, dim]`` float32."""

    @abstractmethod
    def linear(self, x: Any, w: Weight, bias: Weight | None = None) -> Any:
        """``x @ W.T + bias``: ``[n, in] -> [n, out]``."""

    @abstractmethod
    def rms_norm(self, x: Any, w: Weight | None, eps: float) -> Any:
        """RMS norm over the last dimension, times ``w`` (broadcast) when given."""

    @abstractmethod
    def layer_norm(self, x: Any, w: Weight | None, b: Weight | None, eps: float) -> Any:
        """Layer norm over the last dimension, times ``w`` plus ``b`` when given."""

    @abstractmethod
    def rope(self, x: Any, positions: np.ndarray, spec: RopeSpec) -> Any:
        """Rotate ``x`` ``[n, heads, head_dim]`` by the positions."""

    @abstractmethod
    def attention(
        self, q: Any, k: Any, v: Any, state: State, layer: int, positions: np.ndarray, spec: AttentionSpec
    ) -> Any:
        """Write ``k``/``v`` ``[n, n_kv_heads, dim]`` into the state's cells for this batch,
        then attend ``q`` ``[n, n_heads, k_dim]`` over every visible cell of ``layer``.
        Query heads are grouped onto KV heads (head h uses KV head h // (n_heads/n_kv_heads)).
        Returns ``[n, n_heads * v_dim]``."""

    @abstractmethod
    def unary(self, op: str, x: Any) -> Any:
        """One of "silu", "gelu", "gelu_erf", "relu" applied elementwise."""

    @abstractmethod
    def glu(self, op: str, gate: Any, up: Any) -> Any:
        """"swiglu": silu(gate) * up, or "geglu": gelu(gate) * up."""

    @abstractmethod
    def add(self, a: Any, b: Any) -> Any:
        """Elementwise sum; ``b`` may be a Weight broadcast over rows."""

    @abstractmethod
    def mul(self, a: Any, b: Any) -> Any:
        """Elementwise product; ``b`` may be a Weight broadcast over rows."""

    @abstractmethod
    def scale(self, x: Any, s: float) -> Any:
        """``x * s``."""

    @abstractmethod
    def softcap(self, x: Any, cap: float) -> Any:
        """``cap * tanh(x / cap)``."""

    def conv1d_causal(self, x: Any, w: Weight, state: State, layer: int) -> Any:
        """Depthwise causal conv1d over tokens, carrying the last kernel-1 inputs in state."""
        from .errors import UnsupportedOperation

        raise UnsupportedOperation(f"backend {self.name!r} does not implement conv1d_causal")

    def moe(self, x: Any, router: Weight, gate: Weight, up: Weight, down: Weight, k: int, **kw) -> Any:
        """Top-k softmax routing over experts and the weighted sum of their SwiGLU FFNs."""
        from .errors import UnsupportedOperation

        raise UnsupportedOperation(f"backend {self.name!r} does not implement moe")

    # -- reading back -------------------------------------------------------------

    @abstractmethod
    def to_numpy(self, x: Any) -> np.ndarray:
        """Copy a tensor to the host as float32."""

    def rows(self, x: Any, index: slice | list[int]) -> Any:
        """A subset of rows (e.g. the last position before the output head)."""
        return x[index]

    def split(self, x: Any, sizes: tuple[int, ...]) -> list[Any]:
        """Split the last dimension into consecutive parts of the given sizes (fused projections)."""
        out, start = [], 0
        for s in sizes:
            out.append(x[..., start : start + s])
            start += s
        return out

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        """The same values viewed with another shape (row-major), e.g. ``[n, H*d] -> [n, H, d]``."""
        return x.reshape(shape)

    def close(self) -> None:  # noqa: B027 - optional hook: most backends hold nothing to release
        """Release device resources."""
