"""The streaming network as cera keeps it: tensors, operators and state variables.

This is what `cera_audio_kws.convert` writes into the GGUF file (the structure as the JSON
string ``kws.graph``, constant data as GGUF tensors ``net.<index>``, initial state as
``state.<index>``) and what `cera_audio_kws.network` runs. It mirrors the TensorFlow Lite
graph of a microWakeWord model one to one — same tensors, same operators in the same
order, same quantization — less the two things a file format needs and a runtime does
not: the ``CALL_ONCE`` of the initialization subgraph (its ``ASSIGN_VARIABLE`` of
constants becomes each variable's initial value) and the ``VAR_HANDLE`` operators (each
resource tensor names its variable directly).

`check_graph` is the single list of what the runtime supports; the converter and the
loader both call it, so an unsupported layer is refused by name when converting, and a
hand-edited file is refused the same way when loading.
"""

from __future__ import annotations

import attrs
import numpy as np

from cera.errors import CeraError

GRAPH_FORMAT = 1

# Operator -> what the runtime accepts of it (checked by `check_graph`).
SUPPORTED_OPS = (
    "ASSIGN_VARIABLE",
    "CONCATENATION",
    "CONV_2D",
    "DEPTHWISE_CONV_2D",
    "FULLY_CONNECTED",
    "LOGISTIC",
    "QUANTIZE",
    "READ_VARIABLE",
    "RESHAPE",
    "SPLIT_V",
    "STRIDED_SLICE",
)
TENSOR_DTYPES = {"INT8": np.int8, "UINT8": np.uint8, "INT32": np.int32, "INT16": np.int16, "RESOURCE": None}


class UnsupportedLayer(CeraError):
    """The network uses an operator (or an option of one) that cera's runtime does not run."""


class GraphError(CeraError):
    """The network description is inconsistent (a damaged or hand-edited file)."""


@attrs.frozen
class TensorSpec:
    name: str
    type: str
    shape: tuple[int, ...]
    scales: tuple[float, ...] = ()
    zero_points: tuple[int, ...] = ()
    quantized_dimension: int = 0
    variable: int | None = None  # for RESOURCE tensors: the index of the variable they name

    @property
    def scale(self) -> float:
        return self.scales[0] if self.scales else 0.0

    @property
    def zero_point(self) -> int:
        return self.zero_points[0] if self.zero_points else 0

    def to_json(self) -> dict:
        d = {"name": self.name, "type": self.type, "shape": list(self.shape)}
        if self.scales:
            d["scales"] = list(self.scales)
            d["zero_points"] = list(self.zero_points)
            d["quantized_dimension"] = self.quantized_dimension
        if self.variable is not None:
            d["variable"] = self.variable
        return d


@attrs.frozen
class OperatorSpec:
    op: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    options: dict = attrs.field(factory=dict)

    def to_json(self) -> dict:
        return {"op": self.op, "inputs": list(self.inputs), "outputs": list(self.outputs), "options": self.options}


@attrs.frozen
class Variable:
    name: str
    tensor: TensorSpec  # type, shape and quantization of its value
    initial: np.ndarray


@attrs.frozen
class Graph:
    tensors: tuple[TensorSpec, ...]
    operators: tuple[OperatorSpec, ...]
    variables: tuple[Variable, ...]
    constants: dict  # tensor index -> np.ndarray
    input: int
    output: int

    def to_json(self) -> dict:
        return {
            "format": GRAPH_FORMAT,
            "tensors": [t.to_json() for t in self.tensors],
            "operators": [o.to_json() for o in self.operators],
            "variables": [{"name": v.name, **v.tensor.to_json()} for v in self.variables],
            "constants": sorted(self.constants),
            "input": self.input,
            "output": self.output,
        }


def tensor_from_json(d: dict, where: str) -> TensorSpec:
    try:
        spec = TensorSpec(
            name=str(d["name"]),
            type=str(d["type"]),
            shape=tuple(int(x) for x in d["shape"]),
            scales=tuple(float(x) for x in d.get("scales", ())),
            zero_points=tuple(int(x) for x in d.get("zero_points", ())),
            quantized_dimension=int(d.get("quantized_dimension", 0)),
            variable=None if d.get("variable") is None else int(d["variable"]),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise GraphError(f"{where}: a tensor entry is malformed ({type(e).__name__}: {e})") from None
    if spec.type not in TENSOR_DTYPES:
        raise UnsupportedLayer(f"{where}: tensor {spec.name!r} is {spec.type}; the runtime handles {', '.join(TENSOR_DTYPES)}")
    if any(n <= 0 for n in spec.shape) or np.prod(spec.shape, dtype=np.int64) > 1 << 24:
        raise GraphError(f"{where}: tensor {spec.name!r} has shape {spec.shape}")
    return spec


def graph_from_json(doc: dict, constants: dict, initials: list, where: str) -> Graph:
    """The graph of a ``kws.graph`` document, with its constant and initial-state arrays."""
    if not isinstance(doc, dict) or doc.get("format") != GRAPH_FORMAT:
        raise GraphError(f"{where}: kws.graph is not a network description of format {GRAPH_FORMAT}")
    try:
        tensors = tuple(tensor_from_json(t, where) for t in doc["tensors"])
        operators = tuple(
            OperatorSpec(str(o["op"]), tuple(int(i) for i in o["inputs"]), tuple(int(i) for i in o["outputs"]),
                         dict(o.get("options", {})))
            for o in doc["operators"]
        )
        var_specs = [tensor_from_json(v, where) for v in doc["variables"]]
        names = [str(v["name"]) for v in doc["variables"]]
        inp, out = int(doc["input"]), int(doc["output"])
    except (KeyError, TypeError, ValueError) as e:
        raise GraphError(f"{where}: kws.graph is malformed ({type(e).__name__}: {e})") from None
    if len(initials) != len(var_specs):
        raise GraphError(f"{where}: {len(var_specs)} state variables but {len(initials)} initial values")
    variables = tuple(Variable(n, s, a) for n, s, a in zip(names, var_specs, initials, strict=True))
    graph = Graph(tensors, operators, variables, constants, inp, out)
    check_graph(graph, where)
    return graph


def _fail(where, k, op, what):
    raise UnsupportedLayer(f"{where}: operator {k} ({op.op}): {what}")


def check_graph(graph: Graph, where: str) -> None:
    """Refuse, by name, anything the runtime does not run exactly; check the wiring."""
    n = len(graph.tensors)
    for i in (graph.input, graph.output):
        if not 0 <= i < n:
            raise GraphError(f"{where}: the network's input or output names tensor {i} of {n}")
    for i, arr in graph.constants.items():
        if not 0 <= i < n:
            raise GraphError(f"{where}: constant data for tensor {i} of {n}")
        t = graph.tensors[i]
        if tuple(arr.shape) != t.shape or arr.dtype != TENSOR_DTYPES[t.type]:
            raise GraphError(f"{where}: constant {t.name!r} is {arr.dtype}{arr.shape}, declared {t.type}{t.shape}")
    for v in graph.variables:
        if v.tensor.type != "INT8" or tuple(v.initial.shape) != v.tensor.shape or v.initial.dtype != np.int8:
            raise UnsupportedLayer(f"{where}: state variable {v.name!r} is {v.tensor.type}{v.tensor.shape}; "
                                   f"the runtime keeps INT8 state only")
    written = {graph.input, *graph.constants}
    for t_index, t in enumerate(graph.tensors):
        if t.type == "RESOURCE":
            if t.variable is None or not 0 <= t.variable < len(graph.variables):
                raise GraphError(f"{where}: resource tensor {t.name!r} names no state variable")
            written.add(t_index)
    for k, op in enumerate(graph.operators):
        if op.op not in SUPPORTED_OPS:
            raise UnsupportedLayer(
                f"{where}: operator {k} is {op.op}, which cera's keyword-spotting runtime does not run "
                f"(it runs {', '.join(SUPPORTED_OPS)})"
            )
        for i in op.inputs:
            if not 0 <= i < n:
                _fail(where, k, op, f"input tensor {i} of {n}")
            if i not in written:
                _fail(where, k, op, f"input {graph.tensors[i].name!r} is read before it is written")
        for i in op.outputs:
            if not 0 <= i < n:
                _fail(where, k, op, f"output tensor {i} of {n}")
            written.add(i)
        _check_op(graph, where, k, op)
    if graph.output not in written:
        raise GraphError(f"{where}: the network's output is never written")


_ARITY = {
    "ASSIGN_VARIABLE": (2, 0), "CONCATENATION": (None, 1), "CONV_2D": (3, 1), "DEPTHWISE_CONV_2D": (3, 1),
    "FULLY_CONNECTED": (3, 1), "LOGISTIC": (1, 1), "QUANTIZE": (1, 1), "READ_VARIABLE": (1, 1),
    "RESHAPE": (None, 1), "SPLIT_V": (3, None), "STRIDED_SLICE": (4, 1),
}


def _check_op(graph: Graph, where: str, k: int, op: OperatorSpec) -> None:
    T = graph.tensors
    n_in, n_out = _ARITY[op.op]
    if (n_in is not None and len(op.inputs) != n_in) or (n_out is not None and len(op.outputs) != n_out):
        _fail(where, k, op, f"{len(op.inputs)} inputs and {len(op.outputs)} outputs")
    o = op.options
    act = o.get("fused_activation_function", 0)
    if act not in (0, 1, 2, 3):
        _fail(where, k, op, f"fused activation {act} (only NONE, RELU, RELU_N1_TO_1, RELU6 are run)")
    if op.op in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        if o.get("padding") not in (0, 1):
            _fail(where, k, op, f"padding {o.get('padding')} (SAME is 0, VALID 1)")
        x, w = T[op.inputs[0]], T[op.inputs[1]]
        if len(x.shape) != 4 or len(w.shape) != 4 or x.type != "INT8" or w.type != "INT8":
            _fail(where, k, op, "input and filter must be 4-D INT8")
        if op.inputs[1] not in graph.constants or op.inputs[2] not in graph.constants:
            _fail(where, k, op, "filter and bias must be constants")
        if T[op.inputs[2]].type != "INT32":
            _fail(where, k, op, "bias must be INT32")
        if any(z != 0 for z in w.zero_points):
            _fail(where, k, op, "filter zero points must be 0 (symmetric int8 weights)")
        if min(o.get("stride_h", 0), o.get("stride_w", 0), o.get("dilation_h_factor", 1), o.get("dilation_w_factor", 1)) < 1:
            _fail(where, k, op, "strides and dilations must be positive")
    if op.op == "FULLY_CONNECTED":
        if op.inputs[1] not in graph.constants or op.inputs[2] not in graph.constants:
            _fail(where, k, op, "weights and bias must be constants")
        if o.get("weights_format", 0) != 0 or T[op.inputs[1]].type != "INT8":
            _fail(where, k, op, "weights must be plain INT8")
    if op.op == "STRIDED_SLICE":
        if any(o.get(m, 0) for m in ("ellipsis_mask", "new_axis_mask", "shrink_axis_mask")) or o.get("offset"):
            _fail(where, k, op, "ellipsis, new-axis, shrink-axis masks and offset mode are not run")
        if not all(i in graph.constants for i in op.inputs[1:]):
            _fail(where, k, op, "begin, end and strides must be constants")
    if op.op == "SPLIT_V" and not all(i in graph.constants for i in op.inputs[1:]):
        _fail(where, k, op, "sizes and axis must be constants")
    if op.op in ("LOGISTIC", "QUANTIZE"):
        if T[op.inputs[0]].type != "INT8" or T[op.outputs[0]].type not in ("INT8", "UINT8"):
            _fail(where, k, op, "only INT8 input and INT8/UINT8 output are run")
    if op.op in ("READ_VARIABLE", "ASSIGN_VARIABLE") and T[op.inputs[0]].type != "RESOURCE":
        _fail(where, k, op, "the first input must be a resource tensor")
    if op.op in ("CONCATENATION", "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "STRIDED_SLICE", "SPLIT_V"):
        for i in list(op.inputs[:1] if op.op != "CONCATENATION" else op.inputs) + list(op.outputs):
            if T[i].type != "INT8":
                _fail(where, k, op, f"tensor {T[i].name!r} is {T[i].type}; only INT8 activations are run")
            if T[i].type == "INT8" and len(T[i].scales) != 1:
                _fail(where, k, op, f"activation {T[i].name!r} must have one scale (per-tensor quantization)")
