"""A PEFT LoRA directory (``adapter_config.json`` + ``adapter_model.safetensors``) as a
`cera.adapters.lora.LoraAdapter`, mapped as llama.cpp's ``convert_lora_to_gguf.py`` maps it.

Hugging Face names (``base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight``) go to
the family's GGUF names through the `gguf` package's tensor-name table for the base model's
architecture (``blk.3.attn_q.weight.lora_a``); ``lora_A`` (torch ``[r, in]``) and ``lora_B``
(``[out, r]``) are already in the GGML order of ``lora_a`` (ne ``[in, r]``) and ``lora_b``
(ne ``[r, out]``). For llama-family q/k projections the rows of ``lora_B`` take the rotary
reordering the converter applies to the base weights. An embedding's ``lora_embedding_A``
(``[r, n_vocab]``) is stored transposed, as llama.cpp reads it.

The scale is PEFT's: ``lora_alpha / r``, or ``lora_alpha / sqrt(r)`` with ``use_rslora``
(written as an alpha of ``lora_alpha * sqrt(r)``, so the product is the same); per-module
``alpha_pattern`` values, DoRA, ``fan_in_fan_out`` weights, bias training and
``modules_to_save`` change the maths beyond a low-rank product and are refused.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np

from ..errors import AdapterError, CeraError
from ..sources.convert import _LLAMA_LIKE, _permute, read_safetensors_index, to_f32
from .lora import LoraAdapter, array_source, make_pairs

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
_A_SUFFIXES = (".lora_A.weight", ".lora_embedding_A")
_B_SUFFIXES = (".lora_B.weight", ".lora_embedding_B")


def is_peft_dir(path) -> bool:
    path = Path(path)
    return path.is_dir() and (path / CONFIG).is_file()


def _config(folder: Path) -> dict:
    try:
        cfg = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise AdapterError(f"{folder / CONFIG}: not a readable JSON file ({e})") from None
    if not isinstance(cfg, dict):
        raise AdapterError(f"{folder / CONFIG}: expected a JSON object")
    where = folder / CONFIG
    if str(cfg.get("peft_type", "LORA")).upper() != "LORA":
        raise AdapterError(f"{where}: peft_type is {cfg.get('peft_type')!r}; only LORA adapters are supported")
    refused = [
        ("use_dora", bool(cfg.get("use_dora")), "DoRA adapters"),
        ("fan_in_fan_out", bool(cfg.get("fan_in_fan_out")), "fan_in_fan_out weights (Conv1D layers)"),
        ("bias", cfg.get("bias", "none") not in (None, "none"), "trained biases"),
        ("modules_to_save", bool(cfg.get("modules_to_save")), "whole modules saved beside the adapter"),
        ("alpha_pattern", bool(cfg.get("alpha_pattern")), "per-module alphas"),
        ("alora_invocation_tokens", bool(cfg.get("alora_invocation_tokens")), "activated LoRA"),
    ]
    for key, bad, what in refused:
        if bad:
            raise AdapterError(f"{where}: {key} is set; {what} are not supported")
    for key in ("r", "lora_alpha"):
        v = cfg.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise AdapterError(f"{where}: {key} is {v!r}; it must be a positive number")
    return cfg


def _base_name(hf_name: str) -> tuple[str, str] | None:
    """(the base tensor's HF name, "a" or "b"), None for a tensor that is not a LoRA half."""
    name = hf_name.removeprefix("base_model.model.")
    for suffixes, kind in ((_A_SUFFIXES, "a"), (_B_SUFFIXES, "b")):
        for s in suffixes:
            if name.endswith(s):
                return name[: -len(s)] + ".weight", kind
    return None


def read_peft_adapter(folder, gguf, name: str | None = None) -> LoraAdapter:
    """The PEFT directory ``folder`` for the base model whose GGUF file is ``gguf`` (its
    architecture and head counts decide the names and the q/k row order)."""
    import gguf as gguf_pkg

    folder = Path(folder)
    cfg = _config(folder)
    weights_path = folder / WEIGHTS
    if not weights_path.is_file():
        raise AdapterError(f"{folder}: has no {WEIGHTS} (adapters saved as .bin pickles are not read; save with safetensors)")
    try:
        index = read_safetensors_index(weights_path)
    except CeraError as e:
        raise AdapterError(f"{weights_path}: {e}") from e
    arch = gguf.architecture
    arch_enum = next((k for k, v in gguf_pkg.MODEL_ARCH_NAMES.items() if v == arch), None)
    if arch_enum is None:
        raise AdapterError(f"{folder}: the base model's architecture {arch!r} has no tensor-name table in the gguf package")
    n_layer = int(gguf.arch_get("block_count", 0) or 0)
    n_head = int(gguf.arch_get("attention.head_count", 0) or 0)
    n_kv = int(gguf.arch_get("attention.head_count_kv", n_head) or n_head)
    names = gguf_pkg.get_tensor_name_map(arch_enum, n_layer)
    alpha = float(cfg["lora_alpha"])
    rank = float(cfg["r"])
    rank_pattern = cfg.get("rank_pattern") or {}
    if cfg.get("use_rslora"):
        if rank_pattern:
            raise AdapterError(f"{folder / CONFIG}: use_rslora with a rank_pattern (a scale per module) is not supported")
        alpha = alpha * math.sqrt(rank)  # alpha / r of this equals PEFT's alpha / sqrt(r)
    # With a rank_pattern PEFT scales each module by alpha over its own rank, which is the
    # rank of its stored pair: what llama.cpp divides by.
    arrays: dict[str, np.ndarray] = {}
    digest = hashlib.sha256(json.dumps({"arch": arch, "alpha": alpha}, sort_keys=True).encode())
    for hf_name in sorted(index):
        st = index[hf_name]
        if hf_name.endswith(".base_layer.weight"):  # the base's own embedding or head, saved beside (as llama.cpp's converter, not read)
            continue
        base = _base_name(hf_name)
        if base is None:
            raise AdapterError(
                f"{weights_path}: tensor {hf_name!r} is not a lora_A or lora_B half; adapters that replace "
                f"whole tensors are not supported"
            )
        hf_base, kind = base
        gname = names.get_name(hf_base, try_suffixes=(".weight",))
        if gname is None:
            raise AdapterError(f"{weights_path}: tensor {hf_name!r} has no GGUF name for architecture {arch!r}")
        values = to_f32(st.read(), st.dtype)
        if values.ndim != 2:
            raise AdapterError(f"{weights_path}: tensor {hf_name!r} has shape {list(values.shape)}; a LoRA half is a matrix")
        if kind == "b" and arch in _LLAMA_LIKE and hf_base.endswith(("q_proj.weight", "k_proj.weight")):
            heads = n_head if hf_base.endswith("q_proj.weight") else n_kv
            if heads <= 0 or values.shape[0] % (2 * heads):
                raise AdapterError(f"{weights_path}: tensor {hf_name!r} has {values.shape[0]} rows for {heads} heads")
            values = _permute(values, heads)
        if gname == "token_embd.weight" and kind == "a":
            values = values.T
        key = f"{gname}.lora_{kind}"
        if key in arrays:
            raise AdapterError(f"{weights_path}: two tensors map to {key!r}")
        arrays[key] = np.ascontiguousarray(values, dtype=np.float32)
        digest.update(f"{key}\0{list(arrays[key].shape)}\0".encode())
        digest.update(memoryview(arrays[key]).cast("B"))
    fingerprint = digest.hexdigest()
    pairs = make_pairs(str(folder), fingerprint, {k: ("F32", tuple(reversed(v.shape))) for k, v in arrays.items()})
    return LoraAdapter(name or folder.name, str(folder), arch, alpha, pairs, array_source(str(folder), fingerprint, arrays),
                       fingerprint)  # fmt: skip


__all__ = ["is_peft_dir", "read_peft_adapter"]
