"""The Vulkan backend: `cera.backend.Backend` on a GPU through wgpu (Vulkan, Metal, DX12).

- Weights are uploaded once, in their GGUF block layout (no dequantized copies); the WGSL
  kernels decode the blocks as they read them (wgsl/blocks.py).
- The state (`state.VulkanState`) holds each layer's KV cache on the device ([slot, kv
  head, cell, dim], f16 or f32) with the cells' positions, and the recurrent state and
  cross-attention memories ([slot, row, kv head, dim], f32) too; the host's record of the
  sequences (filled cells, positions, the rows each memory holds) is a
  `cera.state.HostState` of the same spec, whose rules sessions, the scheduler,
  checkpoints and the prefix cache rely on. Snapshots, restores and context shifts copy
  one slot between the device and the host; `copy_cells` copies slots on the device.
- `compile` lowers a graph to a fixed list of dispatches with their parameters and bind
  groups made once (compile.py); a run writes the per-run inputs once, records every
  dispatch into one compute pass, submits once and reads back only the declared outputs
  (a greedy step: one int32 per sequence).

Choosing things: ``VulkanBackend(device_index=0)`` or ``VulkanOptions``; adapters are
ordered discrete GPU first, software ones (lavapipe) last. Under ``--device auto`` a
software adapter is passed over (the CPU backend is faster there); ``--device vulkan``
uses it.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from cera.backend import Backend, BackendOptions, DeviceInfo, Weight
from cera.errors import (
    BackendUnavailable,
    ModelConfigError,
    ResourceExhausted,
    UnsupportedOperation,
    UnsupportedTensorType,
)

from . import device as gpu
from .capabilities import OPS, TENSOR_TYPES
from .state import VulkanState
from .tuning import VulkanTuning
from .wgsl import BLOCKS


@attrs.frozen
class VulkanOptions(BackendOptions):
    """``device_index``: which adapter (0: the best one, discrete GPUs first);
    ``profile``: time every kernel with timestamp queries (`VulkanExecutable.profile`)."""

    profile: bool = False


class VulkanWeight(Weight):
    """A weight on the device: its GGUF bytes in one buffer (padded to 4 bytes), and the
    host copy of small ones that kernels take as constants (norm weights, biases)."""

    def __init__(self, name: str, ggml_type: str, shape: tuple[int, ...], data: np.ndarray, buffer, nbytes: int):
        self.name = name
        self.ggml_type = ggml_type
        self.shape = tuple(int(d) for d in shape)
        self.buffer = buffer
        self.nbytes = nbytes
        block, size = BLOCKS[ggml_type]
        self.row_bytes = self.shape[0] // block * size
        self._data = data  # a view of the memory-mapped file: costs nothing
        self._dense: np.ndarray | None = None

    @property
    def n_rows(self) -> int:
        return math.prod(self.shape[1:]) if len(self.shape) > 1 else 1

    def dense(self) -> np.ndarray:
        """float32 values in numpy shape: for small operand tensors only."""
        if self._dense is None:
            from gguf.constants import GGMLQuantizationType
            from gguf.quants import dequantize

            if self.ggml_type == "F32":
                d = np.frombuffer(self._data.tobytes(), np.float32)
            else:
                d = dequantize(np.asarray(self._data).reshape(-1), GGMLQuantizationType[self.ggml_type])
            self._dense = np.asarray(d, np.float32).reshape(tuple(reversed(self.shape)))
        return self._dense

    def __repr__(self) -> str:
        return f"VulkanWeight({self.name!r}, {self.ggml_type}, shape={self.shape})"


class VulkanBackend(Backend):
    """The Vulkan backend. See the module docstring."""

    name = "vulkan"
    tensor_types = frozenset(TENSOR_TYPES)
    ops = frozenset(OPS)
    options_type = VulkanOptions

    def __init__(self, device_index: int = 0, memory_limit: int | None = None, profile: bool = False):
        if not isinstance(device_index, int) or device_index < 0:
            raise BackendUnavailable(
                f"backend 'vulkan': device_index must be a non-negative integer, got {device_index!r}"
            )
        self.device_index = device_index
        self.memory_limit = memory_limit
        self.profile = bool(profile)
        # products of many rows: None chooses (tiled on GPUs, row kernels on software
        # adapters); True/False forces it (tests run the tiled kernel on lavapipe)
        self.tiled: bool | None = None
        # products of a few rows: one of tuning.ROW_KERNELS, over the tuning's; None
        # chooses (CERA_VULKAN_ROW_KERNEL, else by the adapter: "unit-auto" on GPUs,
        # "subgroup" on software adapters)
        self.row_kernel: str | None = None
        self._ctx = None
        found = gpu.adapters()
        if not found:
            raise BackendUnavailable(
                "backend 'vulkan': no GPU adapter found (no Vulkan driver? on Debian `apt-get install "
                "mesa-vulkan-drivers` gives a software one, lavapipe)"
            )
        if device_index >= len(found):
            raise BackendUnavailable(
                f"backend 'vulkan' has {len(found)} adapter(s); device_index {device_index} does not exist"
            )
        self.adapter = found[device_index]

    @property
    def ctx(self) -> gpu.GpuContext:
        """The device, opened on first use (probing does not open it)."""
        if self._ctx is None:
            self._ctx = gpu.context(self.device_index)
        return self._ctx

    # -- device --------------------------------------------------------------------------------

    def probe(self) -> DeviceInfo:
        lim = self.adapter.limits
        memory = int(lim["max-buffer-size"])
        # wgpu reports no memory size; the largest buffer bounds one tensor, not the total,
        # so report the memory limit the user gave, if any, else nothing
        memory = self.memory_limit
        feats = [f for f in gpu.WANTED_FEATURES if f in set(self.adapter.features)]
        checks = ", ".join(gpu.shader_checks()) or "none"
        desc = (
            f"{gpu.describe(self.adapter)}; features: {', '.join(feats) or 'none'}; "
            f"largest binding {int(lim['max-storage-buffer-binding-size']) >> 20} MiB; shader checks: {checks}"
        )
        return DeviceInfo(usable=True, device=desc, memory_bytes=memory, software=gpu.is_software(self.adapter))

    # -- weights and state --------------------------------------------------------------------

    def upload(self, gguf, name: str) -> VulkanWeight:
        try:
            info = gguf.tensors[name]
        except KeyError:
            raise ModelConfigError(f"{getattr(gguf, 'path', 'the model file')}: has no tensor {name!r}") from None
        type_name = info.type_name
        reason = self.cannot_serve(type_name)
        if reason:
            raise UnsupportedTensorType(name, type_name, self.name, reason)
        data = gguf.tensor_data(name)
        raw = np.asarray(data).reshape(-1).view(np.uint8)
        nbytes = raw.nbytes
        ctx = self.ctx
        try:
            buf = ctx.buffer(nbytes + 4, label=name)
        except gpu.BufferTooLarge as e:
            raise ResourceExhausted(
                f"backend 'vulkan': tensor {name!r} ({e.size} bytes) exceeds the adapter's largest buffer ({e.limit})"
            ) from None
        pad = (-nbytes) % 4
        ctx.queue.write_buffer(buf, 0, raw if not pad else np.concatenate([raw, np.zeros(pad, np.uint8)]))
        return VulkanWeight(name, type_name, tuple(info.shape), data, buf, nbytes)

    def new_state(self, spec, n_ctx, n_slots=1, kv_type="f16", n_batch=512, swa_full=False, key_offsets=None):
        return VulkanState(self.ctx, spec, n_ctx, n_slots=n_slots, kv_type=kv_type, n_batch=n_batch, swa_full=swa_full,
                           key_offsets=key_offsets)  # fmt: skip

    # -- compiling -----------------------------------------------------------------------------

    def tuning(self) -> VulkanTuning:
        """The kernel variants a compile takes now: the ``CERA_VULKAN_*`` switches
        (`VulkanTuning.from_env`), with ``row_kernel`` where one is set on the backend."""
        t = VulkanTuning.from_env()
        if self.row_kernel is not None and self.row_kernel != t.row_kernel:
            t = attrs.evolve(t, row_kernel=self.row_kernel)
        return t

    def compile_key(self) -> tuple:
        # ``profile`` is read by each run: no recompiling
        return (self.device_index, self.tiled, self.tuning())

    def compile(self, graph, weights, state):
        from .compile import compile_graph

        self.check_ops(graph)
        bound = {}
        for name in graph.weights_used():
            w = weights.get(name)
            if w is None:
                raise ModelConfigError(f"the graph uses weight {name!r}, which was not uploaded")
            bound[name] = w
        if state is not None and not isinstance(state, VulkanState):
            raise UnsupportedOperation("backend 'vulkan' runs graphs on its own state (VulkanBackend.new_state)")
        return compile_graph(self, graph, bound, state, self.tuning())

    def close(self) -> None:
        pass
