"""The Model interface that family plugins implement.

A family is three things, each a step of loading (`cera.engine`):

1. `read_config` (a classmethod, pure): the file's `{arch}.*` metadata to a config; every
   key is understood or refused (`cera.blocks.hparams.HParams`).
2. `__init__(config, weights)`: bind the tensors by name (`Weights` hands out graph
   references and records what was asked for; a tensor of the file that the family never
   asks for is refused, naming it) and declare per-layer state (`self.state`, a
   `cera.state.StateSpec`).
3. `forward(g)`: the forward pass, written with the op vocabulary on a
   `cera.graph.builder.GraphBuilder`, ending in the head (`emit_logits` / `emit_hidden`).

A family never imports a backend and never touches weight bytes (except small host
tables such as RoPE frequency factors, read with `Weights.host`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import InvalidModelFile, ModelConfigError
from .graph.builder import Graph, GraphBuilder, Layout, Outputs, WeightRef
from .state import StateSpec


class Weights:
    """The tensors of a model file as graph references, by name.

    ``weights[name]`` is a `WeightRef` (name, type, GGML shape); `get` returns None for an
    absent optional tensor; `host` reads a small float tensor's values. Every name asked
    for is recorded, so `check_all_used` can refuse a tensor nobody understood."""

    def __init__(self, tensors: Mapping[str, tuple[str, tuple[int, ...]]], reader=None, source: str = "the model"):
        self.tensors = dict(tensors)
        self.reader = reader  # name -> numpy array of stored values (for host())
        self.source = source
        self.used: set[str] = set()

    @classmethod
    def from_gguf(cls, gguf) -> Weights:
        tensors = {name: (info.type_name, tuple(info.shape)) for name, info in gguf.tensors.items()}
        return cls(tensors, gguf.tensor_data, str(gguf.path))

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def __getitem__(self, name: str) -> WeightRef:
        if name not in self.tensors:
            raise InvalidModelFile(self.source, None, f"required tensor {name!r} is missing")
        self.used.add(name)
        ggml_type, shape = self.tensors[name]
        return WeightRef(name, ggml_type, shape)

    def get(self, name: str) -> WeightRef | None:
        return self[name] if name in self.tensors else None

    def shape(self, name: str) -> tuple[int, ...]:
        return self.tensors[name][1]

    def host(self, name: str) -> np.ndarray | None:
        """A small F32/F16 tensor's values on the host (e.g. rope_freqs), or None if absent."""
        if name not in self.tensors:
            return None
        self.used.add(name)
        ggml_type, _ = self.tensors[name]
        if ggml_type not in ("F32", "F16") or self.reader is None:
            raise ModelConfigError(f"{self.source}: tensor {name!r} should be F32 or F16, is {ggml_type}")
        return np.asarray(self.reader(name), dtype=np.float32)

    def unused(self) -> list[str]:
        return sorted(set(self.tensors) - self.used)

    def check_all_used(self, family: str) -> None:
        """Refuse tensors the family did not ask for: a tensor we do not understand may
        change the maths, and computing without it would give wrong tokens that look right."""
        extra = self.unused()
        if extra:
            more = f" (and {len(extra) - 3} more)" if len(extra) > 3 else ""
            raise ModelConfigError(
                f"{self.source}: the {family} family does not understand tensor "
                f"{', '.join(repr(n) for n in extra[:3])}{more}; it may change how the model computes, "
                f"so cera refuses to guess. The file may be of a newer variant: update the family plugin, or report it"
            )


class Model(ABC):
    """A model of one family, bound to a file's tensors. See the module docstring."""

    family: str = "?"

    def __init__(self, config: Any, weights: Weights):
        self.config = config
        self.weights = weights
        self.state = StateSpec()

    @classmethod
    @abstractmethod
    def read_config(cls, gguf) -> Any:
        """The config from the file's metadata (pure: reads nothing but metadata)."""

    @abstractmethod
    def forward(self, g: GraphBuilder) -> None:
        """Build the forward pass of ``g.tokens`` at ``g.positions`` into ``g``."""

    @property
    @abstractmethod
    def n_vocab(self) -> int:
        """Rows of the output head (0 for a model without one)."""

    @property
    def limits_vocab(self) -> bool:
        """Whether the head computes only the first ``Outputs.vocab`` tokens' logits when
        asked (`GraphBuilder.head_weight`). False here."""
        return False

    @property
    def n_ctx_train(self) -> int:
        return int(getattr(self.config, "n_ctx_train", 0) or 0)

    def position_inputs(self, positions: np.ndarray) -> dict[str, np.ndarray]:
        """Graph inputs (declared with ``g.input`` in `forward`) whose values follow from
        the rows' positions alone, by name; the runtime computes them on the host for every
        pass, as llama.cpp sets such inputs (mistral3's attention temperature). None here."""
        return {}

    def build(self, layout: Layout, outputs: Outputs, n_ctx: int = 0, adapters=None) -> Graph:
        """The graph of one pass of this shape: ``layout`` sequences, ``outputs`` wanted,
        for a state of ``n_ctx`` cells per sequence (a few families depend on it), with the
        LoRA ``adapters`` (`cera.adapters.ActiveAdapters`) beside the weights they adapt."""
        g = GraphBuilder(layout, outputs)
        g.n_ctx = n_ctx
        if adapters:
            g.adapters = adapters.by_target()
        self.forward(g)
        graph = g.finish()
        if adapters:
            missed = sorted(set(g.adapters) - g.adapted)
            if missed:
                from .errors import AdapterError

                raise AdapterError(
                    f"the {self.family} family's graph does not use {missed[0]!r} in a product that can be "
                    f"adapted (a linear or an embedding); the adapter cannot be applied to this model"
                )
        return graph


__all__ = ["Model", "Weights"]
