"""The Backend interface: a device that compiles graphs and runs them.

A model family never touches device memory and never calls a backend: it builds a graph
(`cera.graph.builder`) with the op vocabulary of `cera.graph.ops`. A backend

- says whether it can run here (`probe`) and what it serves (`tensor_types`, `ops`);
- uploads weights (`upload`), which stay in their GGUF block form wherever it has a kernel;
- stores the per-sequence state a family declares (`new_state`, `cera.state`), several
  sequences in one store;
- compiles a graph into an `Executable` (once per shape class: the core caches them) and
  runs it: inputs in (token ids, positions, which state slot each sequence uses), the
  declared outputs out, and nothing else read back;
- takes typed options (`options_type`: device index, threads, memory limit, ...).

The conformance suite (`cera.testing.conformance`) checks a backend op by op and model by
model against the numpy reference backend (`cera.testing.reference`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from .errors import UnsupportedOperation, UnsupportedTensorType
from .graph.ops import OPS, AttentionSpec, RopeSpec  # noqa: F401 - re-exported: families import them from here too
from .state import HostState, StateSpec


@attrs.frozen
class DeviceInfo:
    """What `Backend.probe` reports."""

    usable: bool
    device: str
    memory_bytes: int | None = None
    reason: str | None = None  # why not usable
    # an emulated device that computes on the CPU (Vulkan's lavapipe): usable when asked
    # for by name, passed over under device="auto", where the CPU backend is faster
    software: bool = False


@attrs.frozen
class BackendOptions:
    """Options every backend understands; a backend subclasses this with its own fields
    (the CPU adds ``threads`` and ``variant``). ``memory_limit``: bytes the backend may
    use for weights and state (None: what `probe` reports)."""

    device_index: int = 0
    memory_limit: int | None = None


class Weight:
    """A tensor uploaded to a backend, in its stored (possibly quantized) form."""

    name: str
    ggml_type: str
    shape: tuple[int, ...]  # GGML order


@attrs.frozen
class StepInputs:
    """The per-run inputs of a compiled graph.

    ``tokens``/``positions``: int32 per row; ``slots``: the state slot of each sequence of
    the layout; ``starts``: how many cells each of those sequences held before this pass
    (where its new cells go); ``extra``: other declared inputs by name (features of an
    encoder)."""

    tokens: np.ndarray
    positions: np.ndarray
    slots: np.ndarray
    starts: np.ndarray
    extra: Mapping[str, np.ndarray] = attrs.field(factory=dict)


class Executable(ABC):
    """A graph compiled by a backend for one shape class."""

    graph: Any

    @abstractmethod
    def run(self, state: HostState | None, inputs: StepInputs) -> dict[str, np.ndarray]:
        """Run once; returns the graph's outputs as host arrays (copies)."""


class Backend(ABC):
    """A compute device. See the module docstring."""

    name: str = "?"
    tensor_types: frozenset[str] = frozenset()
    # whether a graph may use a weight as its first rows (a WeightRef with fewer rows than the
    # uploaded weight: `GraphBuilder.head_weight`)
    weight_row_prefix: bool = False
    ops: frozenset[str] = frozenset()
    options_type: type[BackendOptions] = BackendOptions

    @abstractmethod
    def probe(self) -> DeviceInfo:
        """Whether the backend can run here, and on what."""

    # -- weights and state --------------------------------------------------------------------

    @abstractmethod
    def upload(self, gguf, name: str) -> Weight:
        """Make tensor ``name`` of a `cera.formats.gguf.GGUFFile` available to compiled graphs.

        Raises `cera.errors.UnsupportedTensorType` naming the tensor, its type and this
        backend when there is no kernel for the type."""

    def new_state(self, spec: StateSpec, n_ctx: int, n_slots: int = 1, kv_type: str = "f16", n_batch: int = 512,
                  swa_full: bool = False, key_offsets: dict | None = None):  # fmt: skip
        """Storage for a family's declared state, ``n_slots`` sequences of ``n_ctx`` cells
        (sliding-window caches sized to the window unless ``swa_full``). Host backends
        keep it in numpy (`HostState`); a device backend returns its own. ``key_offsets``:
        what a TurboQuant cache keeps its keys less (`cera.state.check_key_offsets`)."""
        return HostState(spec, n_ctx, n_slots=n_slots, kv_type=kv_type, n_batch=n_batch, swa_full=swa_full,
                         key_offsets=key_offsets)  # fmt: skip

    # -- compiling --------------------------------------------------------------------------------

    @abstractmethod
    def compile(self, graph, weights: Mapping[str, Weight], state) -> Executable:
        """Compile ``graph`` (bound to the uploaded ``weights`` by name) for states shaped
        like ``state`` (same spec, context and cache type; the state itself is given to
        each run)."""

    def compile_key(self) -> tuple:
        """Settings of this backend that change what `compile` produces (part of the key
        under which compiled graphs are cached)."""
        return ()

    def missing_ops(self, ops) -> list[str]:
        """The ops of ``ops`` this backend does not implement."""
        return sorted(set(ops) - set(self.ops))

    def cannot_serve(self, tensor_type: str) -> str | None:
        """None if this backend has a kernel for a GGML type, else why not."""
        if tensor_type in self.tensor_types:
            return None
        return f"backend {self.name!r} has no kernel for {tensor_type}"

    def check_weight_type(self, name: str, ggml_type: str) -> None:
        reason = self.cannot_serve(ggml_type)
        if reason:
            raise UnsupportedTensorType(name, ggml_type, self.name, reason)

    def check_ops(self, graph) -> None:
        missing = self.missing_ops(graph.ops_used())
        if missing:
            raise UnsupportedOperation(f"backend {self.name!r} lacks ops {missing} that this model's graph uses")

    def close(self) -> None:  # noqa: B027 - optional hook: most backends hold nothing to release
        """Release device resources."""


assert all(name in OPS for name in ("embedding", "linear", "attention")), "the op table is incomplete"
