"""Write a minimal llama-architecture GGUF with chosen metadata, for configuration tests.

The weights are random F32; the vocabulary is a handful of byte-level BPE tokens. Tests
use it to check how a family reads (or refuses) metadata keys, not to check numbers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFWriter


def write_llama(path: Path, extra: dict | None = None, drop: tuple[str, ...] = (), rope_freqs=None, arch: str = "llama",
                extra_tensors: dict | None = None) -> Path:
    rng = np.random.default_rng(0)
    n_vocab, n_embd, n_ff, n_head, n_kv, n_layer = 16, 32, 64, 4, 2, 1
    hd = n_embd // n_head
    w = GGUFWriter(str(path), arch)
    keys = {
        "context_length": (w.add_uint32, 256),
        "embedding_length": (w.add_uint32, n_embd),
        "block_count": (w.add_uint32, n_layer),
        "feed_forward_length": (w.add_uint32, n_ff),
        "attention.head_count": (w.add_uint32, n_head),
        "attention.head_count_kv": (w.add_uint32, n_kv),
        "attention.layer_norm_rms_epsilon": (w.add_float32, 1e-5),
        "rope.freq_base": (w.add_float32, 10000.0),
    }
    for suffix, (add, value) in keys.items():
        if suffix not in drop:
            add(f"{arch}.{suffix}", value)
    for key, value in (extra or {}).items():
        if isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        else:
            w.add_uint32(key, value)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    tokens = [chr(c) for c in range(ord("a"), ord("a") + n_vocab)]
    w.add_token_list(tokens)
    w.add_token_types([1] * n_vocab)
    w.add_token_merges(["a b"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)

    def t(name, *shape):
        w.add_tensor(name, (rng.standard_normal(shape) * 0.1).astype(np.float32))

    t("token_embd.weight", n_vocab, n_embd)
    t("output_norm.weight", n_embd)
    for i in range(n_layer):
        t(f"blk.{i}.attn_norm.weight", n_embd)
        t(f"blk.{i}.attn_q.weight", n_embd, n_embd)
        t(f"blk.{i}.attn_k.weight", n_kv * hd, n_embd)
        t(f"blk.{i}.attn_v.weight", n_kv * hd, n_embd)
        t(f"blk.{i}.attn_output.weight", n_embd, n_embd)
        t(f"blk.{i}.ffn_norm.weight", n_embd)
        t(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        t(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        t(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    if rope_freqs is not None:
        w.add_tensor("rope_freqs.weight", np.asarray(rope_freqs, np.float32))
    for name, value in (extra_tensors or {}).items():
        w.add_tensor(name, np.asarray(value, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
