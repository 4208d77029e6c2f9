"""Splitting a GGUF file as llama.cpp's gguf-split does, for the split-model tests."""

from __future__ import annotations


def write_split(src, out_prefix, max_tensors: int):
    """Split a GGUF file as llama.cpp's gguf-split does (gguf's writer with a tensor cap);
    returns the parts in order."""
    import gguf

    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    reader = gguf.GGUFReader(str(src))
    arch = reader.get_field("general.architecture").contents()
    writer = gguf.GGUFWriter(str(out_prefix) + ".gguf", arch, split_max_tensors=max_tensors)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in ("general.architecture", "general.alignment"):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return sorted(out_prefix.parent.glob(out_prefix.name + "-*-of-*.gguf"))
