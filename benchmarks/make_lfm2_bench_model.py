"""A random-weight LFM2 at the real LFM2-350M shape, for speed comparisons (not quality).

    python benchmarks/make_lfm2_bench_model.py OUT_DIR

Writes OUT_DIR/lfm2-350m-shape-f16.gguf with the `gguf` package (16 layers of 1024, 10
short-convolution layers with kernel 3 and 6 GQA attention layers of 16/8 heads at LFM2-
350M's positions, feed-forward 4608, vocabulary 65,536: the tiny test model's 512 tokens
and filler tokens, tied embeddings), then OUT_DIR/lfm2-350m-shape-q4_0.gguf and
-q4_k_m.gguf with llama.cpp's own quantizer (llama_model_quantize through
llama-cpp-python). Then, for example:

    python benchmarks/bench_models.py --model OUT_DIR/lfm2-350m-shape-q4_0.gguf \\
        --model OUT_DIR/lfm2-350m-shape-q4_k_m.gguf --tests pp512,tg128
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFWriter

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "tests" / "models" / "reference" / "tiny" / "tiny-lfm2.gguf"
N_LAYER, N_EMBD, N_FF, N_HEAD, N_KV, N_VOCAB, KERNEL = 16, 1024, 4608, 16, 8, 65536, 3
ATTENTION_LAYERS = (2, 5, 8, 10, 12, 14)  # LFM2-350M's full-attention layers


def write_f16(path: Path, seed: int = 0) -> None:
    tiny = GGUFReader(str(TINY))
    field = tiny.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    types = [
        int(tiny.fields["tokenizer.ggml.token_type"].parts[i][0]) for i in tiny.fields["tokenizer.ggml.token_type"].data
    ]
    merges_field = tiny.fields["tokenizer.ggml.merges"]
    merges = [bytes(merges_field.parts[i]).decode("utf-8") for i in merges_field.data]
    n_fill = N_VOCAB - len(tokens)
    tokens += [f"<|filler_{i}|>" for i in range(n_fill)]
    types += [4] * n_fill  # user-defined: never produced by merges
    rng = np.random.default_rng(seed)
    arch = "lfm2"
    w = GGUFWriter(str(path), arch)
    w.add_context_length(128000)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv([N_KV if i in ATTENTION_LAYERS else 0 for i in range(N_LAYER)])
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_uint32(f"{arch}.shortconv.l_cache", KERNEL)
    w.add_vocab_size(N_VOCAB)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(2)

    def t(name, *shape, scale=0.02):
        w.add_tensor(name, (rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float16))

    def ones(name, n):
        w.add_tensor(name, np.ones(n, np.float32))

    t("token_embd.weight", N_VOCAB, N_EMBD)
    ones("token_embd_norm.weight", N_EMBD)
    hd = N_EMBD // N_HEAD
    for i in range(N_LAYER):
        ones(f"blk.{i}.attn_norm.weight", N_EMBD)
        ones(f"blk.{i}.ffn_norm.weight", N_EMBD)
        if i in ATTENTION_LAYERS:
            t(f"blk.{i}.attn_q.weight", N_EMBD, N_EMBD)
            t(f"blk.{i}.attn_k.weight", N_KV * hd, N_EMBD)
            t(f"blk.{i}.attn_v.weight", N_KV * hd, N_EMBD)
            t(f"blk.{i}.attn_output.weight", N_EMBD, N_EMBD)
            ones(f"blk.{i}.attn_q_norm.weight", hd)
            ones(f"blk.{i}.attn_k_norm.weight", hd)
        else:
            t(f"blk.{i}.shortconv.in_proj.weight", 3 * N_EMBD, N_EMBD)
            w.add_tensor(
                f"blk.{i}.shortconv.conv.weight", (rng.standard_normal((N_EMBD, KERNEL)) * 0.5).astype(np.float32)
            )
            t(f"blk.{i}.shortconv.out_proj.weight", N_EMBD, N_EMBD)
        t(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD)
        t(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD)
        t(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def quantize(src: Path, dst: Path, ftype: int) -> None:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise SystemExit(f"llama_model_quantize failed ({rc}) for {dst}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    import llama_cpp

    args.out.mkdir(parents=True, exist_ok=True)
    f16 = args.out / "lfm2-350m-shape-f16.gguf"
    if not f16.exists():
        write_f16(f16)
    for name, ftype in (("q4_0", llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0), ("q4_k_m", llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M)):
        out = args.out / f"lfm2-350m-shape-{name}.gguf"
        if not out.exists():
            quantize(f16, out, ftype)
        print(out, out.stat().st_size, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
