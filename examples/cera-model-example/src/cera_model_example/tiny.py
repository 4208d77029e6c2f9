"""Write a tiny random-weight GGUF file of the "cera-example" architecture.

    python -m cera_model_example.tiny tiny.gguf

Real files come from a converter (llama.cpp's convert_hf_to_gguf.py for Hugging Face
checkpoints); for tests a family only needs a small file with the right metadata keys and
tensor names, written here with the `gguf` package's writer. The linear weights are
stored as Q8_0 and the embedding as F16, so the file exercises quantized weights the
way real models do.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize

ARCHITECTURE = "cera-example"


def write_tiny_gguf(
    path,
    *,
    n_vocab: int = 64,
    n_embd: int = 64,
    n_ff: int = 128,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_layer: int = 2,
    n_ctx: int = 256,
    seed: int = 0,
) -> Path:
    """Write the file and return its path. Row lengths must be multiples of 32 (Q8_0 blocks)."""
    rng = np.random.default_rng(seed)
    head_dim = n_embd // n_head

    def rand(*shape, scale=0.1):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w = GGUFWriter(str(path), ARCHITECTURE)
    w.add_name("cera-example tiny (random weights)")
    w.add_context_length(n_ctx)
    w.add_block_count(n_layer)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_eps(1e-5)
    w.add_rope_freq_base(10000.0)

    def q8(name, array):  # numpy shape (out, in) == GGML (ne0=in, ne1=out)
        w.add_tensor(name, quantize(array, GGMLQuantizationType.Q8_0), raw_dtype=GGMLQuantizationType.Q8_0)

    w.add_tensor("token_embd.weight", rand(n_vocab, n_embd, scale=1.0).astype(np.float16))
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", 1.0 + rand(n_embd))
        w.add_tensor(f"blk.{i}.attn_norm.bias", rand(n_embd))
        q8(f"blk.{i}.attn_q.weight", rand(n_head * head_dim, n_embd))
        q8(f"blk.{i}.attn_k.weight", rand(n_head_kv * head_dim, n_embd))
        q8(f"blk.{i}.attn_v.weight", rand(n_head_kv * head_dim, n_embd))
        q8(f"blk.{i}.attn_output.weight", rand(n_embd, n_head * head_dim))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", 1.0 + rand(n_embd))
        w.add_tensor(f"blk.{i}.ffn_norm.bias", rand(n_embd))
        q8(f"blk.{i}.ffn_up.weight", rand(n_ff, n_embd))
        q8(f"blk.{i}.ffn_down.weight", rand(n_embd, n_ff))
    w.add_tensor("output_norm.weight", 1.0 + rand(n_embd))
    w.add_tensor("output_norm.bias", rand(n_embd))
    w.add_tensor("output.weight", rand(n_vocab, n_embd))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m cera_model_example.tiny OUT.gguf")
    print(write_tiny_gguf(sys.argv[1]))
