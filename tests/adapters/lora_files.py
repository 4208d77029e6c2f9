"""Random LoRA adapters for a base GGUF: as llama.cpp's GGUF adapter file, as a PEFT
directory with the same values, and the base model with the adapters merged in (the
independent reference: ``W + s * alpha / r * B A`` computed in numpy and written as F32).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType
from gguf.quants import dequantize

from cera.formats.gguf import GGUFFile

# GGUF suffix -> Hugging Face module of a llama-shaped decoder layer
HF_MODULES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
ALL = tuple(HF_MODULES)


def random_pairs(base: Path, rank: int = 4, targets=ALL, layers=None, seed: int = 0, std: float = 0.05,
                 embedding: bool = False) -> dict[str, tuple[np.ndarray, np.ndarray]]:  # fmt: skip
    """{target: (A [r, in], B [out, r])} in numpy order, values exact in F16."""
    rng = np.random.default_rng(seed)
    out = {}
    with GGUFFile(base) as f:
        n_layer = int(f.arch_get("block_count"))
        for i in range(n_layer) if layers is None else layers:
            for t in targets:
                name = f"blk.{i}.{t}.weight"
                n_in, n_out = f.tensors[name].shape
                a = rng.standard_normal((rank, n_in)) * std
                b = rng.standard_normal((n_out, rank)) * std
                out[name] = (a.astype(np.float16).astype(np.float32), b.astype(np.float16).astype(np.float32))
        if embedding:
            n_embd, n_vocab = f.tensors["token_embd.weight"].shape
            a = rng.standard_normal((rank, n_vocab)) * std  # PEFT's lora_embedding_A
            b = rng.standard_normal((n_embd, rank)) * std
            out["token_embd.weight"] = (a.astype(np.float16).astype(np.float32), b.astype(np.float16).astype(np.float32))
    return out


def write_gguf_adapter(path: Path, arch: str, pairs, alpha: float, ggml_type: str = "F32", extra=None) -> Path:
    """llama.cpp's adapter layout; the embedding's A stored transposed, as its converter does."""
    w = GGUFWriter(str(path), arch)
    w.add_type("adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", float(alpha))
    for key, value in (extra or {}).items():
        w.add_string(key, value)
    qtype = GGMLQuantizationType[ggml_type]
    for name, (a, b) in sorted(pairs.items()):
        if name == "token_embd.weight":
            a = np.ascontiguousarray(a.T)
        for suffix, arr in ((".lora_a", a), (".lora_b", b)):
            if ggml_type == "F32":
                w.add_tensor(name + suffix, arr.astype(np.float32))
            elif ggml_type == "F16":
                w.add_tensor(name + suffix, arr.astype(np.float16))
            else:
                from gguf.quants import quantize

                w.add_tensor(name + suffix, quantize(arr.astype(np.float32), qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of llama.cpp's q/k row order (pairs -> Hugging Face's rotate-half)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_peft_dir(folder: Path, base: Path, pairs, alpha: float, rank: int, rslora: bool = False,
                   dtype=np.float32) -> Path:  # fmt: skip
    """The same pairs as a PEFT directory (Hugging Face names, q/k B rows in HF order)."""
    folder.mkdir(parents=True, exist_ok=True)
    with GGUFFile(base) as f:
        arch = f.architecture
        n_head = int(f.arch_get("attention.head_count"))
        n_kv = int(f.arch_get("attention.head_count_kv", n_head))
    tensors = {}
    modules = set()
    for name, (a, b) in pairs.items():
        if name == "token_embd.weight":
            tensors["base_model.model.model.embed_tokens.lora_embedding_A"] = a.astype(dtype)
            tensors["base_model.model.model.embed_tokens.lora_embedding_B"] = b.astype(dtype)
            modules.add("embed_tokens")
            continue
        _, layer, kind, _ = name.split(".")
        module = HF_MODULES[kind]
        if arch == "llama" and kind in ("attn_q", "attn_k"):
            b = _unpermute(b, n_head if kind == "attn_q" else n_kv)
        prefix = f"base_model.model.model.layers.{layer}.{module}"
        tensors[prefix + ".lora_A.weight"] = np.ascontiguousarray(a, dtype=dtype)
        tensors[prefix + ".lora_B.weight"] = np.ascontiguousarray(b, dtype=dtype)
        modules.add(module.split(".")[-1])
    save_safetensors(folder / "adapter_model.safetensors", tensors)
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": alpha, "use_rslora": rslora, "target_modules": sorted(modules),
              "bias": "none", "fan_in_fan_out": False, "task_type": "CAUSAL_LM"}  # fmt: skip
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=1))
    return folder


def save_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """The SafeTensors layout (a little-endian header length, a JSON index, the bytes)."""
    import struct

    codes = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}
    header, blobs, offset = {}, [], 0
    for name, arr in sorted(tensors.items()):
        arr = np.ascontiguousarray(arr)
        header[name] = {"dtype": codes[arr.dtype], "shape": list(arr.shape), "data_offsets": [offset, offset + arr.nbytes]}
        blobs.append(arr.tobytes())
        offset += arr.nbytes
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def write_merged(path: Path, base: Path, adapters) -> Path:
    """The base model with ``adapters`` ([(pairs, alpha, scale)]) merged into F32 weights."""
    with GGUFFile(base) as f:
        w = GGUFWriter(str(path), f.architecture)
        for key, value in f.metadata.items():
            if key in ("general.architecture",) or key.startswith("GGUF."):
                continue
            _add(w, key, value)
        for name, info in f.tensors.items():
            data = np.asarray(dequantize(f.tensor_data(name), info.ggml_type), np.float64).reshape(info.numpy_shape)
            tied = name == "token_embd.weight" and "output.weight" not in f.tensors
            if tied and any(name in pairs for pairs, _, _ in adapters):  # the head stays the base's (llama.cpp)
                w.add_tensor("output.weight", data.astype(np.float32))
            for pairs, alpha, scale in adapters:
                if name in pairs:
                    a, b = pairs[name]
                    s = scale * alpha / a.shape[0] if alpha else scale
                    delta = (b.astype(np.float64) @ a.astype(np.float64)) * s
                    data = data + (delta.T if name == "token_embd.weight" else delta)
            w.add_tensor(name, data.astype(np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return path


def _add(w: GGUFWriter, key: str, value) -> None:
    if isinstance(value, str):
        w.add_string(key, value)
    elif isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int):
        w.add_uint32(key, value) if 0 <= value < 2**32 else w.add_int64(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, np.ndarray):
        w.add_array(key, value.tolist())
    elif isinstance(value, (list, tuple)):
        if value and isinstance(value[0], float):
            w.add_array(key, [float(v) for v in value])
        else:
            w.add_array(key, list(value))
    else:
        raise TypeError(f"{key}: {type(value).__name__}")


def effective(alpha: float, rank: int, scale: float) -> float:
    return scale * alpha / rank if alpha else scale


__all__ = ["ALL", "random_pairs", "write_gguf_adapter", "write_merged", "write_peft_dir", "effective", "math"]
