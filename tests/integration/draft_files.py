"""A draft model for the speculative decoding tests: SmolLM2-135M cut to its first layers.

The file keeps the vocabulary, embeddings, output norm and the first ``n_layers`` blocks
of the real SmolLM2 test file (tensors copied byte for byte, ``llama.block_count`` set),
so it shares the target's vocabulary and agrees with it often but not always: a draft
that the target refuses now and then, as a real smaller model of a family is. Made on
demand into the test cache (``$CERA_TEST_CACHE`` or ``~/.cache/cera/test-quantized``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path


def cache_dir() -> Path:
    root = os.environ.get("CERA_TEST_CACHE")
    path = Path(root) if root else Path.home() / ".cache" / "cera" / "test-quantized"
    path.mkdir(parents=True, exist_ok=True)
    return path


def truncated_smollm2(source: Path, n_layers: int) -> Path:
    """``source`` (the SmolLM2 GGUF) with its first ``n_layers`` blocks only."""
    import gguf

    out = cache_dir() / f"smollm2-135m-first{n_layers}.gguf"
    if out.exists():
        return out
    reader = gguf.GGUFReader(str(source))
    arch = "llama"
    tmp = out.with_suffix(".tmp")
    writer = gguf.GGUFWriter(str(tmp), arch=arch)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = n_layers if field.name == f"{arch}.block_count" else field.contents()
        writer.add_key_value(field.name, value, vtype, sub_type=sub)
    kept = [t for t in reader.tensors
            if not (m := re.match(r"blk\.(\d+)\.", t.name)) or int(m.group(1)) < n_layers]  # fmt: skip
    for t in kept:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in kept:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    writer.close()
    tmp.replace(out)
    return out
