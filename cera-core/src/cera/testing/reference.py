"""The reference backend: every op of `cera.graph.ops` run by its numpy reference.

Small, slow and obviously correct: weights are dequantized to float32 (by the `gguf`
package, the format's own reference), graphs run node by node (`cera.graph.builder.run_eager`),
state lives in numpy (`cera.state.HostState`). It is the yardstick of the conformance
suite, and it runs whole models: on the tiny test models it reproduces the stored
Hugging Face logits (see tests/core/test_reference_backend.py for the tolerance).

It registers no plugin: tests and third-party backends construct it directly.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

from ..backend import Backend, DeviceInfo, Executable, StepInputs, Weight
from ..errors import ShapeError, UnsupportedTensorType
from ..graph.builder import run_eager
from ..graph.ops import OPS, RunContext


class ReferenceWeight(Weight):
    """A weight as float32 numpy values (numpy order), and its stored type."""

    def __init__(self, name: str, ggml_type: str, shape: tuple[int, ...], values: np.ndarray):
        self.name = name
        self.ggml_type = ggml_type
        self.shape = tuple(int(d) for d in shape)
        self.values = values

    def __repr__(self) -> str:
        return f"ReferenceWeight({self.name!r}, {self.ggml_type}, shape={self.shape})"


def _types() -> frozenset[str]:
    names = set()
    for t in GGMLQuantizationType:
        try:
            dequantize(np.zeros(GGML_QUANT_SIZES[t][1], np.uint8), t)
        except Exception:  # noqa: BLE001 - a type gguf cannot dequantize is not served
            continue
        names.add(t.name)
    return frozenset(names)


class ReferenceBackend(Backend):
    name = "reference"
    ops = frozenset(OPS)

    def __init__(self, **_options):
        self.tensor_types = _types()

    def probe(self) -> DeviceInfo:
        return DeviceInfo(usable=True, device="numpy reference (float64 sums, slow)")

    def upload(self, gguf, name: str) -> ReferenceWeight:
        info = gguf.tensors[name]
        self.check_weight_type(name, info.type_name)
        data = gguf.tensor_data(name)
        return self.weight(name, data, info.type_name, info.shape)

    def weight(self, name: str, data: np.ndarray, ggml_type: str = "F32", shape=None) -> ReferenceWeight:
        """A weight from stored values (F32/F16 as floats, others as their bytes)."""
        if ggml_type not in self.tensor_types:
            raise UnsupportedTensorType(name, ggml_type, self.name)
        qt = GGMLQuantizationType[ggml_type]
        if ggml_type in ("F32", "F16"):
            values = np.asarray(data, dtype=np.float32)
            shape = tuple(reversed(values.shape)) if shape is None else tuple(shape)
        else:
            if shape is None:
                raise ShapeError(f"weight {name!r} of type {ggml_type}: pass its GGML shape")
            raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
            block, size = GGML_QUANT_SIZES[qt]
            if shape[0] % block or math.prod(shape) // block * size != raw.nbytes:
                raise ShapeError(f"weight {name!r}: {raw.nbytes} bytes do not hold a {ggml_type} tensor of shape {shape}")
            values = dequantize(raw.reshape(-1, shape[0] // block * size), qt).astype(np.float32)
        values = np.ascontiguousarray(values.reshape(tuple(reversed(shape))), dtype=np.float32)
        return ReferenceWeight(name, ggml_type, shape, values)

    def compile(self, graph, weights: Mapping[str, Weight], state) -> Executable:
        self.check_ops(graph)
        missing = [n for n in graph.weights_used() if n not in weights]
        if missing:
            raise ShapeError(f"the graph uses weights that were not bound: {missing[:5]}")
        return ReferenceExecutable(graph, {n: weights[n].values for n in graph.weights_used()}, state)


class ReferenceExecutable(Executable):
    def __init__(self, graph, weights: dict, state):
        self.graph = graph
        self.weights = weights
        self.kv_f16 = getattr(state, "kv_type", "f16") == "f16"
        self._lock = threading.Lock()

    def run(self, state, inputs: StepInputs) -> dict[str, np.ndarray]:
        ctx = RunContext(
            positions=np.asarray(inputs.positions, np.int32),
            groups=self.graph.layout.groups,
            slots=np.asarray(inputs.slots, np.int32),
            starts=np.asarray(inputs.starts, np.int32),
            state=state,
            kv_f16=self.kv_f16,
        )
        values = {"tokens": inputs.tokens, "positions": inputs.positions, **inputs.extra}
        kernels = {name: d.reference for name, d in OPS.items()}
        with self._lock:
            return run_eager(self.graph, kernels, self.weights, values, ctx)


__all__ = ["ReferenceBackend", "ReferenceWeight"]


def load(source, manager=None):
    """A model loaded on the reference backend (the families found as usual)."""
    from ..engine import LoadedModel, read_model
    from ..formats.gguf import GGUFFile
    from ..plugins.manager import get_manager
    from ..sources import resolve

    path = resolve(source, quiet=True).path
    gguf = GGUFFile(path)
    try:
        family, model, weights = read_model(gguf, manager or get_manager())
        backend = ReferenceBackend()
        uploaded = {name: backend.upload(gguf, name) for name in sorted(weights.used)}
        return LoadedModel(path, gguf, model, backend, family.name, [], uploaded)
    except BaseException:
        gguf.close()
        raise
