"""The tiny random-weight SafeTensors repositories of the conversion tests (llama, qwen2,
qwen3, smollm3, granite, olmo2, phi2, starcoder2 architectures).

Their text files (config.json, tokenizer.json, ...) are in ``data/tiny-<arch>/``, as HF
transformers saved them (``reference/make_tiny_llama.py`` made them). Its weights are made
here from a seeded generator, in bfloat16, so the tests need neither torch nor a stored
copy: ``reference/make_tiny_llama.py`` loads these same arrays into transformers'
LlamaForCausalLM (Qwen2ForCausalLM, Qwen3ForCausalLM), saves it with ``save_pretrained`` (two shards), and records each tensor's
SHA-256, which the tests check their regenerated files against.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

DATA = Path(__file__).parent / "data" / "tiny-llama"
SEED = 19
ARCHS = ("llama", "qwen2", "qwen3", "smollm3", "granite", "olmo2", "phi2", "starcoder2")


def data_dir(arch: str = "llama") -> Path:
    return DATA.parent / f"tiny-{arch}"


def config(arch: str = "llama") -> dict:
    return json.loads((data_dir(arch) / "config.json").read_text())


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounding to nearest even as torch does."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def weights(arch: str = "llama") -> dict[str, np.ndarray]:
    """HF tensor name -> bfloat16 bits (uint16), in HF's (out, in) layout."""
    c = config(arch)
    rng = np.random.default_rng(SEED)
    d, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    hd = d // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * hd

    def mat(rows, cols, scale):
        return to_bf16(rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(scale))

    def norm(n):
        return to_bf16(1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32))

    out = {"model.embed_tokens.weight": mat(v, d, 1.0)}
    if arch == "phi2":
        return _phi2(c, out, mat, norm, rng)
    if arch == "starcoder2":
        return _starcoder2(c, out, mat, norm, rng)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        if arch != "olmo2":  # OLMo 2 normalises after attention and after the MLP instead
            out[p + "input_layernorm.weight"] = norm(d)
        out[p + "self_attn.q_proj.weight"] = mat(d, d, d**-0.5)
        out[p + "self_attn.k_proj.weight"] = mat(kv, d, d**-0.5)
        out[p + "self_attn.v_proj.weight"] = mat(kv, d, d**-0.5)
        out[p + "self_attn.o_proj.weight"] = mat(d, d, d**-0.5)
        out[p + "post_attention_layernorm.weight"] = norm(d)
        out[p + "mlp.gate_proj.weight"] = mat(f, d, d**-0.5)
        out[p + "mlp.up_proj.weight"] = mat(f, d, d**-0.5)
        out[p + "mlp.down_proj.weight"] = mat(d, f, f**-0.5)
        if arch == "qwen2":  # biases on q, k and v
            for proj, n in (("q", d), ("k", kv), ("v", kv)):
                out[p + f"self_attn.{proj}_proj.bias"] = to_bf16(0.1 * rng.standard_normal(n, dtype=np.float32))
        if arch == "qwen3":  # RMS norms of queries and keys, per head
            out[p + "self_attn.q_norm.weight"] = norm(hd)
            out[p + "self_attn.k_norm.weight"] = norm(hd)
        if arch == "olmo2":  # RMS norms of all queries and all keys at once, and the post-norms
            out[p + "self_attn.q_norm.weight"] = norm(d)
            out[p + "self_attn.k_norm.weight"] = norm(kv)
            out[p + "post_feedforward_layernorm.weight"] = norm(d)
    out["model.norm.weight"] = norm(d)
    out["lm_head.weight"] = mat(v, d, 2 * d**-0.5)
    return out


def _phi2(c, out, mat, norm, rng):
    """Phi-2's tensors: LayerNorms and every projection with a bias, fc1/fc2 without a gate."""
    d, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]

    def bias(n):
        return to_bf16(0.1 * rng.standard_normal(n, dtype=np.float32))

    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"], out[p + "input_layernorm.bias"] = norm(d), bias(d)
        for proj in ("q_proj", "k_proj", "v_proj", "dense"):
            out[p + f"self_attn.{proj}.weight"], out[p + f"self_attn.{proj}.bias"] = mat(d, d, d**-0.5), bias(d)
        out[p + "mlp.fc1.weight"], out[p + "mlp.fc1.bias"] = mat(f, d, d**-0.5), bias(f)
        out[p + "mlp.fc2.weight"], out[p + "mlp.fc2.bias"] = mat(d, f, f**-0.5), bias(d)
    out["model.final_layernorm.weight"], out["model.final_layernorm.bias"] = norm(d), bias(d)
    out["lm_head.weight"], out["lm_head.bias"] = mat(v, d, 2 * d**-0.5), bias(v)
    return out


def _starcoder2(c, out, mat, norm, rng):
    """StarCoder 2's tensors: LayerNorms and every projection with a bias, c_fc/c_proj."""
    d, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = c["num_key_value_heads"] * (d // c["num_attention_heads"])

    def bias(n):
        return to_bf16(0.1 * rng.standard_normal(n, dtype=np.float32))

    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"], out[p + "input_layernorm.bias"] = norm(d), bias(d)
        for proj, rows in (("q_proj", d), ("k_proj", kv), ("v_proj", kv), ("o_proj", d)):
            out[p + f"self_attn.{proj}.weight"], out[p + f"self_attn.{proj}.bias"] = mat(rows, d, d**-0.5), bias(rows)
        out[p + "post_attention_layernorm.weight"], out[p + "post_attention_layernorm.bias"] = norm(d), bias(d)
        out[p + "mlp.c_fc.weight"], out[p + "mlp.c_fc.bias"] = mat(f, d, d**-0.5), bias(f)
        out[p + "mlp.c_proj.weight"], out[p + "mlp.c_proj.bias"] = mat(d, f, f**-0.5), bias(d)
    out["model.norm.weight"], out["model.norm.bias"] = norm(d), bias(d)
    out["lm_head.weight"] = mat(v, d, 2 * d**-0.5)
    return out


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], dtype: str = "BF16") -> None:
    """A SafeTensors file (8-byte header length, JSON header, data), tensors in name order."""
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name in sorted(tensors):
        data = np.ascontiguousarray(tensors[name]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for b in blobs:
            f.write(b)


def write_repo(folder: Path, arch: str = "llama") -> dict[str, Path]:
    """The repository's files in ``folder`` (weights in the shards transformers made)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    data = data_dir(arch)
    for p in sorted(data.iterdir()):
        if p.is_file():
            (folder / p.name).write_bytes(p.read_bytes())
            files[p.name] = folder / p.name
    index = json.loads((data / "model.safetensors.index.json").read_text())
    w = weights(arch)
    shards: dict[str, dict] = {}
    for name, shard in index["weight_map"].items():
        shards.setdefault(shard, {})[name] = w[name]
    for shard, tensors in sorted(shards.items()):
        write_safetensors(folder / shard, tensors)
        files[shard] = folder / shard
    return files


def tensor_sha256(tensors: dict[str, np.ndarray]) -> dict[str, str]:
    import hashlib

    return {n: hashlib.sha256(np.ascontiguousarray(t).tobytes()).hexdigest() for n, t in sorted(tensors.items())}
