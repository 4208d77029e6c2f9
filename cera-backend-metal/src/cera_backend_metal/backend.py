"""The Metal backend: `cera.backend.Backend` on MLX (Apple GPUs through Metal; MLX's CPU
device where ``CERA_METAL_DEVICE=cpu`` asks for it).

- Weights become MLX arrays at load (weights.py): MLX's affine quantized layout made from
  the GGUF blocks where a type maps exactly (blocks.py), float arrays otherwise;
  capabilities.TYPES and README.md say which type runs how.
- The state (state.MetalState) keeps KV caches, recurrent state and cross-attention
  memories as MLX arrays on the device, one per slot; the host keeps the bookkeeping.
- `compile` turns a graph into one MLX program (compile.MetalExecutable); decode steps go
  through `mx.compile`, and every step is evaluated once, reading back only the outputs.

Under ``--device auto`` MLX's CPU device is passed over (it is a correctness tool: the
CPU backend is much faster there); ``--device metal`` with ``CERA_METAL_DEVICE=cpu`` uses it.
"""

from __future__ import annotations

import attrs

from cera.backend import Backend, BackendOptions, DeviceInfo
from cera.errors import (
    BackendUnavailable,
    ModelConfigError,
    ResourceExhausted,
    UnsupportedOperation,
    UnsupportedTensorType,
)

from . import device as dev
from .capabilities import OPS, TENSOR_TYPES, TYPES
from .plugin import unavailable_reason


@attrs.frozen
class MetalOptions(BackendOptions):
    """``device_index``: 0 (MLX drives one GPU)."""


class MetalBackend(Backend):
    """See the module docstring."""

    name = "metal"
    tensor_types = frozenset(TENSOR_TYPES)
    ops = frozenset(OPS)
    options_type = MetalOptions

    def __init__(self, device_index: int = 0, memory_limit: int | None = None):
        why = unavailable_reason()
        if why:
            raise BackendUnavailable(f"backend 'metal': {why}")
        if device_index != 0:
            raise BackendUnavailable(f"backend 'metal' drives one device (index 0), not device_index {device_index!r}")
        self.memory_limit = memory_limit
        try:
            self.device = dev.open_device()
        except RuntimeError as e:
            raise BackendUnavailable(f"backend 'metal': {e}") from None
        self.description, self.memory, self.on_cpu = dev.describe(self.device)
        self.uploaded_bytes = 0  # weights on the device so far: checked against the memory

    def probe(self) -> DeviceInfo:
        return DeviceInfo(
            usable=True,
            device=f"{self.description}; types: {type_summary()}",
            memory_bytes=self.memory_limit or self.memory,
            software=self.on_cpu,
        )

    def cannot_serve(self, tensor_type: str) -> str | None:
        if tensor_type in self.tensor_types:
            return None
        return (
            f"backend 'metal' has no MLX layout or decoder for {tensor_type} (it runs "
            f"{', '.join(TENSOR_TYPES)}); use --device cpu, or requantize the file"
        )

    # -- weights and state --------------------------------------------------------------------

    def upload(self, gguf, name: str):
        from . import weights

        try:
            info = gguf.tensors[name]
        except KeyError:
            raise ModelConfigError(f"{getattr(gguf, 'path', 'the model file')}: has no tensor {name!r}") from None
        reason = self.cannot_serve(info.type_name)
        if reason:
            raise UnsupportedTensorType(name, info.type_name, self.name, reason)
        need = weights.footprint(info)
        limit = self.memory_limit or self.memory
        if limit is not None and self.uploaded_bytes + need > limit:
            raise ResourceExhausted(
                f"backend 'metal': tensor {name!r} ({info.type_name}, {need / 2**20:.0f} MiB here) does not fit: the "
                f"weights would take {(self.uploaded_bytes + need) / 2**30:.1f} GiB of {limit / 2**30:.1f} GiB "
                f"(README.md's table gives each type's bytes; Q6_K, Q2_K, Q3_K and IQ types take 4 a weight); "
                f"use a smaller model or --device cpu"
            )
        with self.on_device():
            w = weights.load(gguf, name, info, TYPES[info.type_name][0])
        self.uploaded_bytes += w.nbytes
        return w

    def new_state(self, spec, n_ctx, n_slots=1, kv_type="f16", n_batch=512, swa_full=False, key_offsets=None):
        from .state import MetalState

        with self.on_device():
            state = MetalState(spec, n_ctx, n_slots=n_slots, kv_type=kv_type, n_batch=n_batch, swa_full=swa_full)
        if key_offsets:  # only TurboQuant caches keep keys less an offset, and MetalState refuses them
            raise UnsupportedOperation(f"backend 'metal' keeps no key offsets (they belong to TurboQuant caches), "
                                       f"and this state keeps {kv_type}")  # fmt: skip
        return state

    def on_device(self):
        """A context in which MLX's operations run on this backend's device (MLX's default
        device, which other code in the process may use, stays as it is)."""
        import mlx.core as mx

        return mx.stream(self.device)

    # -- compiling -----------------------------------------------------------------------------

    def compile_key(self) -> tuple:
        return (str(self.device),)

    def compile(self, graph, weights, state):
        from .compile import MetalExecutable
        from .state import MetalState

        self.check_ops(graph)
        bound = {}
        for name in graph.weights_used():
            w = weights.get(name)
            if w is None:
                raise ModelConfigError(f"the graph uses weight {name!r}, which was not uploaded")
            bound[name] = w
        if state is not None and not isinstance(state, MetalState):
            raise UnsupportedOperation("backend 'metal' runs graphs on its own state (MetalBackend.new_state)")
        return MetalExecutable(self, graph, bound, state)


def type_summary() -> str:
    """Which types run how, in one line (for `cera inspect --probe` and `cera plugins`)."""
    from .capabilities import DEQUANTIZED, QUANTIZED

    return (
        f"{'/'.join(QUANTIZED)} in MLX's affine quantized layout (exact); F32/F16/BF16 as MLX arrays; "
        f"{'/'.join(DEQUANTIZED)} dequantized to float32 at load"
    )
