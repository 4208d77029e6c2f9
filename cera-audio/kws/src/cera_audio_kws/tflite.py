"""A reader for TensorFlow Lite model files (.tflite), without TensorFlow.

A .tflite file is a FlatBuffer of the schema in TensorFlow's ``lite/schema/schema.fbs``.
This module reads the part of that schema a quantized streaming network needs: the
subgraphs with their tensors (shape, type, quantization, constant data) and operators
(builtin code, inputs, outputs, options). Every offset and length is checked against the
file before it is followed, so a damaged or hostile file gives a `TFLiteError` naming the
byte offset and what is wrong, never a crash or a large allocation.

FlatBuffer layout, as used here: a table starts with a signed 32-bit offset back to its
vtable; the vtable holds its own size, the table's size and one 16-bit offset per field
(0: absent, so the schema's default applies). Tables, vectors and strings are reached
through unsigned 32-bit offsets relative to where the offset is stored; a vector or string
starts with its 32-bit length.
"""

from __future__ import annotations

import struct
from pathlib import Path

import attrs
import numpy as np

from cera.errors import CeraError

FILE_IDENTIFIER = b"TFL3"

# TensorType -> (name, numpy dtype or None where the data is not a plain array)
TENSOR_TYPES = {
    0: ("FLOAT32", np.float32),
    1: ("FLOAT16", np.float16),
    2: ("INT32", np.int32),
    3: ("UINT8", np.uint8),
    4: ("INT64", np.int64),
    5: ("STRING", None),
    6: ("BOOL", np.bool_),
    7: ("INT16", np.int16),
    8: ("COMPLEX64", None),
    9: ("INT8", np.int8),
    10: ("FLOAT64", np.float64),
    11: ("COMPLEX128", None),
    12: ("UINT64", np.uint64),
    13: ("RESOURCE", None),
    14: ("VARIANT", None),
    15: ("UINT32", np.uint32),
    16: ("UINT16", np.uint16),
    17: ("INT4", None),
}

# BuiltinOperator codes of the schema, by name (the names TensorFlow Lite prints).
_OPERATOR_NAMES = (
    "ADD AVERAGE_POOL_2D CONCATENATION CONV_2D DEPTHWISE_CONV_2D DEPTH_TO_SPACE DEQUANTIZE "
    "EMBEDDING_LOOKUP FLOOR FULLY_CONNECTED HASHTABLE_LOOKUP L2_NORMALIZATION L2_POOL_2D "
    "LOCAL_RESPONSE_NORMALIZATION LOGISTIC LSH_PROJECTION LSTM MAX_POOL_2D MUL RELU RELU_N1_TO_1 "
    "RELU6 RESHAPE RESIZE_BILINEAR RNN SOFTMAX SPACE_TO_DEPTH SVDF TANH CONCAT_EMBEDDINGS SKIP_GRAM "
    "CALL CUSTOM EMBEDDING_LOOKUP_SPARSE PAD UNIDIRECTIONAL_SEQUENCE_RNN GATHER BATCH_TO_SPACE_ND "
    "SPACE_TO_BATCH_ND TRANSPOSE MEAN SUB DIV SQUEEZE UNIDIRECTIONAL_SEQUENCE_LSTM STRIDED_SLICE "
    "BIDIRECTIONAL_SEQUENCE_RNN EXP TOPK_V2 SPLIT LOG_SOFTMAX DELEGATE BIDIRECTIONAL_SEQUENCE_LSTM "
    "CAST PRELU MAXIMUM ARG_MAX MINIMUM LESS NEG PADV2 GREATER GREATER_EQUAL LESS_EQUAL SELECT SLICE "
    "SIN TRANSPOSE_CONV SPARSE_TO_DENSE TILE EXPAND_DIMS EQUAL NOT_EQUAL LOG SUM SQRT RSQRT SHAPE POW "
    "ARG_MIN FAKE_QUANT REDUCE_PROD REDUCE_MAX PACK LOGICAL_OR ONE_HOT LOGICAL_AND LOGICAL_NOT UNPACK "
    "REDUCE_MIN FLOOR_DIV REDUCE_ANY SQUARE ZEROS_LIKE FILL FLOOR_MOD RANGE RESIZE_NEAREST_NEIGHBOR "
    "LEAKY_RELU SQUARED_DIFFERENCE MIRROR_PAD ABS SPLIT_V UNIQUE CEIL REVERSE_V2 ADD_N GATHER_ND COS "
    "WHERE RANK ELU REVERSE_SEQUENCE MATRIX_DIAG QUANTIZE MATRIX_SET_DIAG ROUND HARD_SWISH IF WHILE "
    "NON_MAX_SUPPRESSION_V4 NON_MAX_SUPPRESSION_V5 SCATTER_ND SELECT_V2 DENSIFY SEGMENT_SUM "
    "BATCH_MATMUL PLACEHOLDER_FOR_GREATER_OP_CODES CUMSUM CALL_ONCE BROADCAST_TO RFFT2D CONV_3D IMAG "
    "REAL COMPLEX_ABS HASHTABLE HASHTABLE_FIND HASHTABLE_IMPORT HASHTABLE_SIZE REDUCE_ALL "
    "CONV_3D_TRANSPOSE VAR_HANDLE READ_VARIABLE ASSIGN_VARIABLE"
).split()


def operator_name(code: int) -> str:
    if 0 <= code < len(_OPERATOR_NAMES):
        return _OPERATOR_NAMES[code]
    return f"BUILTIN_{code}"


# Fields of each options table read here: name -> (field index, struct format, default).
# Enum and bool fields are bytes; the defaults are the schema's.
_OPTIONS = {
    "CONV_2D": {"padding": (0, "b", 0), "stride_w": (1, "i", 0), "stride_h": (2, "i", 0),
                "fused_activation_function": (3, "b", 0), "dilation_w_factor": (4, "i", 1),
                "dilation_h_factor": (5, "i", 1)},
    "DEPTHWISE_CONV_2D": {"padding": (0, "b", 0), "stride_w": (1, "i", 0), "stride_h": (2, "i", 0),
                          "depth_multiplier": (3, "i", 0), "fused_activation_function": (4, "b", 0),
                          "dilation_w_factor": (5, "i", 1), "dilation_h_factor": (6, "i", 1)},
    "CONCATENATION": {"axis": (0, "i", 0), "fused_activation_function": (1, "b", 0)},
    "FULLY_CONNECTED": {"fused_activation_function": (0, "b", 0), "weights_format": (1, "b", 0),
                        "keep_num_dims": (2, "?", False), "asymmetric_quantize_inputs": (3, "?", False)},
    "STRIDED_SLICE": {"begin_mask": (0, "i", 0), "end_mask": (1, "i", 0), "ellipsis_mask": (2, "i", 0),
                      "new_axis_mask": (3, "i", 0), "shrink_axis_mask": (4, "i", 0), "offset": (5, "?", False)},
    "SPLIT_V": {"num_splits": (0, "i", 0)},
    "CALL_ONCE": {"init_subgraph_index": (0, "i", 0)},
    "VAR_HANDLE": {"container": (0, "str", ""), "shared_name": (1, "str", "")},
    "AVERAGE_POOL_2D": {"padding": (0, "b", 0), "stride_w": (1, "i", 0), "stride_h": (2, "i", 0),
                        "filter_width": (3, "i", 0), "filter_height": (4, "i", 0),
                        "fused_activation_function": (5, "b", 0)},
    "MAX_POOL_2D": {"padding": (0, "b", 0), "stride_w": (1, "i", 0), "stride_h": (2, "i", 0),
                    "filter_width": (3, "i", 0), "filter_height": (4, "i", 0),
                    "fused_activation_function": (5, "b", 0)},
    "ADD": {"fused_activation_function": (0, "b", 0)},
    "MUL": {"fused_activation_function": (0, "b", 0)},
}
PADDINGS = {0: "SAME", 1: "VALID"}
ACTIVATIONS = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH", 5: "SIGN_BIT"}


class TFLiteError(CeraError):
    """A .tflite file that is damaged, or not one this reader understands."""


@attrs.frozen
class Tensor:
    index: int
    name: str
    type: str  # TENSOR_TYPES name
    shape: tuple[int, ...]
    scales: tuple[float, ...]  # empty: not quantized
    zero_points: tuple[int, ...]
    quantized_dimension: int
    data: np.ndarray | None  # constant data (a copy), None for activations and variables
    is_variable: bool


@attrs.frozen
class Operator:
    index: int
    name: str  # builtin operator name, or "CUSTOM:<code>"
    inputs: tuple[int, ...]  # tensor indices; -1: an optional input left out
    outputs: tuple[int, ...]
    options: dict


@attrs.frozen
class Subgraph:
    name: str
    tensors: tuple[Tensor, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    operators: tuple[Operator, ...]


@attrs.frozen
class Model:
    path: str
    version: int
    description: str
    subgraphs: tuple[Subgraph, ...]


class _Reader:
    def __init__(self, data: bytes, path: str):
        self.data = data
        self.path = path

    def fail(self, pos: int, what: str):
        raise TFLiteError(f"{self.path}: byte {pos}: {what}; the file is damaged or not a TensorFlow Lite model")

    def scalar(self, pos: int, fmt: str):
        size = struct.calcsize("<" + fmt)
        if pos < 0 or pos + size > len(self.data):
            self.fail(pos, f"a {size}-byte value runs past the end of the file ({len(self.data)} bytes)")
        return struct.unpack_from("<" + fmt, self.data, pos)[0]

    def deref(self, pos: int) -> int:
        target = pos + self.scalar(pos, "I")
        if target >= len(self.data):
            self.fail(pos, f"an offset points past the end of the file (to byte {target})")
        return target

    def table(self, pos: int) -> _Table:
        vt = pos - self.scalar(pos, "i")
        vt_size = self.scalar(vt, "H")
        if vt_size < 4 or vt_size % 2 or vt + vt_size > len(self.data):
            self.fail(vt, f"a vtable of {vt_size} bytes")
        return _Table(self, pos, vt, (vt_size - 4) // 2)

    def vector(self, pos: int, elem_size: int) -> tuple[int, int]:
        """(start of the elements, count) of the vector at ``pos``, its bytes checked."""
        n = self.scalar(pos, "I")
        start = pos + 4
        if start + n * elem_size > len(self.data):
            self.fail(pos, f"a vector of {n} elements of {elem_size} bytes runs past the end of the file")
        return start, n

    def string(self, pos: int) -> str:
        start, n = self.vector(pos, 1)
        try:
            return self.data[start : start + n].decode("utf-8")
        except UnicodeDecodeError:
            self.fail(pos, "a string that is not UTF-8")


class _Table:
    def __init__(self, r: _Reader, pos: int, vt: int, n_fields: int):
        self.r, self.pos, self.vt, self.n_fields = r, pos, vt, n_fields

    def field(self, i: int) -> int | None:
        if i >= self.n_fields:
            return None
        off = self.r.scalar(self.vt + 4 + 2 * i, "H")
        return self.pos + off if off else None

    def scalar(self, i: int, fmt: str, default=0):
        p = self.field(i)
        return default if p is None else self.r.scalar(p, fmt)

    def table(self, i: int) -> _Table | None:
        p = self.field(i)
        return None if p is None else self.r.table(self.r.deref(p))

    def string(self, i: int, default: str = "") -> str:
        p = self.field(i)
        return default if p is None else self.r.string(self.r.deref(p))

    def scalars(self, i: int, fmt: str) -> tuple:
        p = self.field(i)
        if p is None:
            return ()
        size = struct.calcsize("<" + fmt)
        start, n = self.r.vector(self.r.deref(p), size)
        return struct.unpack_from(f"<{n}{fmt}", self.r.data, start)

    def bytes(self, i: int) -> memoryview | None:
        p = self.field(i)
        if p is None:
            return None
        start, n = self.r.vector(self.r.deref(p), 1)
        return memoryview(self.r.data)[start : start + n]

    def tables(self, i: int) -> list[_Table]:
        p = self.field(i)
        if p is None:
            return []
        start, n = self.r.vector(self.r.deref(p), 4)
        return [self.r.table(self.r.deref(start + 4 * k)) for k in range(n)]


def _buffer_bytes(r: _Reader, buf: _Table) -> memoryview | None:
    data = buf.bytes(0)
    if data is not None and len(data):
        return data
    offset, size = buf.scalar(1, "Q"), buf.scalar(2, "Q")
    if offset > 1 and size:  # data stored after the FlatBuffer (large models)
        if offset + size > len(r.data):
            r.fail(buf.pos, f"a buffer at offset {offset} of {size} bytes runs past the end of the file")
        return memoryview(r.data)[offset : offset + size]
    return None


def _tensor(r: _Reader, t: _Table, index: int, buffers: list[memoryview | None]) -> Tensor:
    shape = tuple(int(d) for d in t.scalars(0, "i"))
    type_code = t.scalar(1, "b")
    if type_code not in TENSOR_TYPES:
        r.fail(t.pos, f"tensor {index} has unknown type code {type_code}")
    type_name, dtype = TENSOR_TYPES[type_code]
    name = t.string(3)
    scales, zero_points, qdim = (), (), 0
    q = t.table(4)
    if q is not None:
        scales = tuple(float(s) for s in q.scalars(2, "f"))
        zero_points = tuple(int(z) for z in q.scalars(3, "q"))
        qdim = q.scalar(6, "i")
        if q.scalar(4, "B"):
            raise TFLiteError(f"{r.path}: tensor {name!r} uses custom quantization details, which cera does not read")
        if zero_points and len(zero_points) != len(scales):
            r.fail(q.pos, f"tensor {name!r} has {len(scales)} scales but {len(zero_points)} zero points")
    if any(d < 0 for d in shape):
        raise TFLiteError(f"{r.path}: tensor {name!r} has a dynamic shape {shape}; only fixed shapes are supported")
    buf_index = t.scalar(2, "I")
    if buf_index >= len(buffers):
        r.fail(t.pos, f"tensor {name!r} names buffer {buf_index} of {len(buffers)}")
    raw = buffers[buf_index]
    data = None
    if raw is not None:
        if dtype is None:
            raise TFLiteError(f"{r.path}: tensor {name!r} holds constant {type_name} data, which cera does not read")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if count * np.dtype(dtype).itemsize != len(raw):
            raise TFLiteError(
                f"{r.path}: tensor {name!r} of shape {shape} ({type_name}) has {len(raw)} bytes of data, "
                f"expected {count * np.dtype(dtype).itemsize}"
            )
        data = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype).reshape(shape)
    return Tensor(index, name, type_name, shape, scales, zero_points, qdim, data, bool(t.scalar(5, "?", False)))


def _options(r: _Reader, op: _Table, name: str) -> dict:
    spec = _OPTIONS.get(name)
    opts = op.table(4)
    if spec is None or opts is None:
        return {}
    out = {}
    for key, (i, fmt, default) in spec.items():
        out[key] = opts.string(i, default) if fmt == "str" else opts.scalar(i, fmt, default)
    return out


def read_tflite(path) -> Model:
    """Read a .tflite file: every subgraph's tensors (with constant data) and operators."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TFLiteError(f"{path}: cannot read the model file ({e.strerror or e})") from None
    return parse_tflite(data, str(path))


def parse_tflite(data: bytes, path: str = "<bytes>") -> Model:
    r = _Reader(data, path)
    if len(data) < 8 or data[4:8] != FILE_IDENTIFIER:
        raise TFLiteError(
            f"{path}: not a TensorFlow Lite model (no {FILE_IDENTIFIER.decode()} identifier at byte 4)"
        )
    root = r.table(r.deref(0))
    version = root.scalar(0, "I")
    if version != 3:
        raise TFLiteError(f"{path}: TensorFlow Lite schema version {version}; cera reads version 3")
    codes = []
    for oc in root.tables(1):
        code = max(oc.scalar(0, "b"), oc.scalar(3, "i"))
        codes.append(f"CUSTOM:{oc.string(1)}" if code == 32 else operator_name(code))
    buffers = [_buffer_bytes(r, b) for b in root.tables(4)]
    subgraphs = []
    for sg in root.tables(2):
        tensors = tuple(_tensor(r, t, i, buffers) for i, t in enumerate(sg.tables(0)))
        operators = []
        for k, op in enumerate(sg.tables(3)):
            idx = op.scalar(0, "I")
            if idx >= len(codes):
                r.fail(op.pos, f"operator {k} names operator code {idx} of {len(codes)}")
            name = codes[idx]
            ins, outs = tuple(op.scalars(1, "i")), tuple(op.scalars(2, "i"))
            for t in ins + outs:
                if t < -1 or t >= len(tensors):
                    r.fail(op.pos, f"operator {k} ({name}) names tensor {t} of {len(tensors)}")
            operators.append(Operator(k, name, ins, outs, _options(r, op, name)))
        ins, outs = tuple(sg.scalars(1, "i")), tuple(sg.scalars(2, "i"))
        for t in ins + outs:
            if not 0 <= t < len(tensors):
                r.fail(sg.pos, f"a subgraph input or output names tensor {t} of {len(tensors)}")
        subgraphs.append(Subgraph(sg.string(4), tensors, ins, outs, tuple(operators)))
    if not subgraphs:
        raise TFLiteError(f"{path}: the model has no subgraph")
    return Model(path, version, root.string(3), tuple(subgraphs))
