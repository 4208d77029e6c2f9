"""Writing altered copies of a GGUF file for bad-input tests (with the gguf package)."""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter

_SCALAR_WRITERS = {
    GGUFValueType.UINT8: "add_uint8",
    GGUFValueType.INT8: "add_int8",
    GGUFValueType.UINT16: "add_uint16",
    GGUFValueType.INT16: "add_int16",
    GGUFValueType.UINT32: "add_uint32",
    GGUFValueType.INT32: "add_int32",
    GGUFValueType.FLOAT32: "add_float32",
    GGUFValueType.UINT64: "add_uint64",
    GGUFValueType.INT64: "add_int64",
    GGUFValueType.FLOAT64: "add_float64",
    GGUFValueType.BOOL: "add_bool",
    GGUFValueType.STRING: "add_string",
}

DROP = object()


def rewrite(src, dst, *, arch: str | None = None, kv: dict | None = None, tensors: dict | None = None, raw: dict | None = None):
    """Copy ``src`` to ``dst``, changing metadata (``kv``: key -> value, or DROP) and tensors
    (``tensors``: name -> float array, or DROP; ``raw``: name -> (uint8 bytes array, ggml type))."""
    reader = GGUFReader(str(src))
    kv = dict(kv or {})
    tensors = dict(tensors or {})
    raw = dict(raw or {})
    old_arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(str(dst), arch or old_arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        if key in kv:
            value = kv.pop(key)
            if value is DROP:
                continue
            _add(writer, key, value)
            continue
        if field.types[0] == GGUFValueType.ARRAY:
            writer.add_array(key, list(field.contents()))
        else:
            getattr(writer, _SCALAR_WRITERS[field.types[0]])(key, field.contents())
    for key, value in kv.items():
        if value is not DROP:
            _add(writer, key, value)
    for t in reader.tensors:
        if t.name in raw:
            data, qtype = raw.pop(t.name)
            writer.add_tensor(t.name, data, raw_dtype=qtype)
            continue
        value = tensors.pop(t.name, None)
        if value is DROP:
            continue
        if value is None:
            value = np.array(t.data).reshape(tuple(reversed([int(d) for d in t.shape])))
        writer.add_tensor(t.name, value)
    for name, value in tensors.items():
        if value is not DROP:
            writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def _add(writer, key, value):
    if isinstance(value, str):
        writer.add_string(key, value)
    elif isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int):
        writer.add_uint32(key, value)
    elif isinstance(value, float):
        writer.add_float32(key, value)
    else:
        writer.add_array(key, list(value))


__all__ = ["DROP", "GGMLQuantizationType", "rewrite"]
