"""GGUF files of one tensor type each, made from the SmolLM2 test file with llama.cpp's quantizer.

The per-type fidelity tests need a file per tensor type that people download (Q5_K,
Q3_K, Q2_K, IQ4_NL, IQ4_XS, the IQ2/IQ3/IQ1 types, the ternary TQ types, F16, BF16, F32).
None ships on PyPI, so they are made here from the real SmolLM2-135M file: every weight is
dequantized (the gguf package) and quantized again by ggml's own ``ggml_quantize_chunk``
from llama-cpp-python's library, the function llama-quantize calls per tensor. Where a
tensor's rows do not fit the type's 256-value blocks (SmolLM2's hidden size is 576), the
tensor takes the type llama-quantize falls back to for it. The types that llama-quantize
refuses to make without an importance matrix get one of ones (uniform weights).

The files are large (up to 540 MB for F32), so they are made on demand into a cache
(``$CERA_TEST_CACHE`` or ``~/.cache/cera/test-quantized``), never committed. Making one
is deterministic: the same bytes every time (the stored references record each file's
SHA-256, and a test whose file differs says so instead of comparing).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from pathlib import Path

import numpy as np

SOURCE = "smollm2-135m-instruct-q4_1"

# ggml type ids (enum ggml_type)
TYPE_IDS = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8,
    "Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14,
    "IQ2_XXS": 16, "IQ2_XS": 17, "IQ3_XXS": 18, "IQ1_S": 19, "IQ4_NL": 20, "IQ3_S": 21,
    "IQ2_S": 22, "IQ4_XS": 23, "IQ1_M": 29, "BF16": 30, "TQ1_0": 34, "TQ2_0": 35,
}  # fmt: skip
BLOCK = {name: (256 if name.endswith("_K") or name.startswith(("IQ1", "IQ2", "IQ3", "TQ")) or name == "IQ4_XS"
                else 1 if name in ("F32", "F16", "BF16") else 32) for name in TYPE_IDS}  # fmt: skip
# what llama-quantize uses for a tensor whose rows the type's blocks do not divide
# (llama-quant.cpp: the K and IQ types fall back to a 32-value format)
FALLBACK = {"Q2_K": "IQ4_NL", "Q3_K": "IQ4_NL", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}
FALLBACK.update({t: "IQ4_NL" for t in TYPE_IDS if t.startswith(("IQ1", "IQ2", "IQ3", "TQ")) or t == "IQ4_XS"})
NEEDS_IMATRIX = {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ1_S", "IQ1_M"}
FLOAT_TYPES = ("F32", "F16", "BF16")

# the files the tests use, by name: (type of the weights, type of token_embd)
FILES = {t: (t, t if t in FLOAT_TYPES else "Q8_0") for t in TYPE_IDS if t not in ("Q8_1",)}


def cache_dir() -> Path:
    root = os.environ.get("CERA_TEST_CACHE")
    path = Path(root) if root else Path.home() / ".cache" / "cera" / "test-quantized"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _ggml():
    try:
        import llama_cpp
    except ImportError:
        import pytest

        pytest.skip("making this file needs ggml's quantizer, from llama-cpp-python (pip install llama-cpp-python==0.3.36)")

    lib = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]  # fmt: skip
    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    return lib


def quantize(lib, type_name: str, values: np.ndarray) -> np.ndarray:
    """ggml's quantization of a [rows, n] float32 array into the bytes of type_name."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    rows, n = values.shape
    t = TYPE_IDS[type_name]
    out = np.zeros((rows, lib.ggml_row_size(t, n)), dtype=np.uint8)
    imatrix = np.ones(n, dtype=np.float32) if type_name in NEEDS_IMATRIX else None
    done = lib.ggml_quantize_chunk(t, values.ctypes.data, out.ctypes.data, 0, rows, n,
                                   imatrix.ctypes.data if imatrix is not None else None)  # fmt: skip
    assert done == out.nbytes, (type_name, done, out.nbytes)
    return out


def _type_for(name: str, shape: tuple[int, ...], weights: str, embd: str) -> str | None:
    """The type a tensor gets in the file (None: kept as it is)."""
    if len(shape) != 2 or not name.endswith(".weight") or "norm" in name:
        return None
    want = embd if name == "token_embd.weight" else weights
    if shape[0] % BLOCK[want]:
        want = FALLBACK[want]
    return want


def make(name: str, dest: Path | None = None) -> Path:
    """The file for one entry of FILES, made if the cache lacks it."""
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
    from gguf.quants import dequantize

    from cera.sources.bundles import fetch_file

    weights, embd = FILES[name]
    path = dest or cache_dir() / f"smollm2-135m-{name.lower()}.gguf"
    if path.exists():
        return path
    lib = _ggml()
    reader = GGUFReader(str(fetch_file(SOURCE, quiet=True)))
    tmp = path.with_suffix(".tmp")
    writer = GGUFWriter(str(tmp), reader.fields["general.architecture"].contents())
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        if key == "general.file_type":
            continue
        value = field.contents()
        if field.types[0] == GGUFValueType.ARRAY:
            writer.add_key_value(key, value, GGUFValueType.ARRAY, sub_type=field.types[-1])
        else:
            writer.add_key_value(key, value, field.types[0])
    for t in reader.tensors:
        shape = tuple(int(d) for d in t.shape)  # ggml order: ne0 first
        target = _type_for(t.name, shape, weights, embd)
        if target is None:
            writer.add_tensor(t.name, np.array(t.data), raw_dtype=GGMLQuantizationType(int(t.tensor_type)))
            continue
        values = dequantize(np.array(t.data), GGMLQuantizationType(int(t.tensor_type))).reshape(shape[1], shape[0])
        if target == "F32":
            writer.add_tensor(t.name, values.astype(np.float32))
        else:
            writer.add_tensor(t.name, quantize(lib, target, values), raw_dtype=GGMLQuantizationType(TYPE_IDS[target]))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, path)
    return path


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


if __name__ == "__main__":
    import sys

    for n in sys.argv[1:] or list(FILES):
        p = make(n)
        print(n, p, p.stat().st_size, sha256(p))
