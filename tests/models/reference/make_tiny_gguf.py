"""Tiny random-weight GGUFs written directly with gguf-py, for families whose transformers
classes the reference venv does not have.

    PYTHONPATH=<llama-cpp-python 0.3.36 sdist>/vendor/llama.cpp/gguf-py \\
        python tests/models/reference/make_tiny_gguf.py [--only olmo3,nanbeige]

Each family starts from a Hugging Face config of the architecture's real shape, shrunk
(the CONFIGS below: the keys the model's config.json has, with small sizes). The metadata
is what llama.cpp's convert_hf_to_gguf.py (the llama-cpp-python 0.3.36 sdist) writes for
that config: its TextModel/LlamaModel `set_gguf_parameters` and the family's own class
(conversion/olmo.py, nanbeige.py, mistral3.py), through the same GGUFWriter methods; the
tensors carry the names and shapes its tensor map gives. Weights are seeded Gaussians
divided by sqrt(fan-in), norms 1 +- 0.1 (as make_tiny_models.py draws them). The tokenizer
is copied from one of the converted tiny files beside this script.

Then ``make_reference.py --only tiny-<name>`` stores llama.cpp's greedy steps and logits.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter, RopeScalingType

HERE = Path(__file__).resolve().parent
TINY = HERE / "tiny"
SEED = 4321

# -- configs: the real config.json keys, sizes shrunk ------------------------------------------

CONFIGS = {
    # allenai/Olmo-3-7B-Instruct's config (Olmo3ForCausalLM): three sliding layers then a
    # full one, YaRN on the full layers only; window 4096 -> 16 so that it matters here.
    "olmo3": dict(
        architectures=["Olmo3ForCausalLM"], model_type="olmo3", hidden_size=64, intermediate_size=128,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=1024,
        rms_norm_eps=1e-6, rope_theta=500000.0, sliding_window=16,
        layer_types=["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
        rope_scaling=dict(rope_type="yarn", factor=8.0, original_max_position_embeddings=128,
                          attention_factor=1.2079441541679836, beta_fast=32.0, beta_slow=1.0),
        tie_word_embeddings=False, vocab_size=512, tokenizer_from="tiny-olmo2.gguf",
    ),
    # Nanbeige/Nanbeige4.2-3B's config (NanbeigeForCausalLM): a llama whose layers run
    # num_loops times over (each pass with its own KV cache), the final norm between passes.
    "nanbeige": dict(
        architectures=["NanbeigeForCausalLM"], model_type="nanbeige", hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=1024, rms_norm_eps=1e-5, rope_theta=70000000.0, num_loops=2,
        skip_loop_final_norm=False, tie_word_embeddings=False, vocab_size=512, tokenizer_from="tiny-mistral.gguf",
    ),
    # mistralai/Ministral-3-3B's text config (Ministral3ForCausalLM): llama with YaRN and
    # llama 4's attention temperature; its original context 16384 -> 32 so that positions
    # past it (where the temperature rises above 1) are reached here.
    "mistral3": dict(
        architectures=["Ministral3ForCausalLM"], model_type="ministral3", hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=4096, rms_norm_eps=1e-5,
        rope_parameters=dict(rope_type="yarn", rope_theta=1000000.0, factor=16.0, original_max_position_embeddings=32,
                             beta_fast=32.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0,
                             llama_4_scaling_beta=0.1),
        tie_word_embeddings=True, vocab_size=512, tokenizer_from="tiny-mistral.gguf",
    ),
}
ARCH = {"olmo3": "olmo2", "nanbeige": "nanbeige", "mistral3": "mistral3"}


# -- metadata, as the converter writes it ------------------------------------------------------


def text_model_params(w: GGUFWriter, c: dict) -> None:
    """TextModel.set_gguf_parameters for the keys these configs have."""
    w.add_block_count(c["num_hidden_layers"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    rope = dict(c.get("rope_parameters") or c.get("rope_scaling") or {})
    rope.setdefault("rope_theta", c.get("rope_theta"))
    if rope.get("rope_type") == "yarn" and rope.get("factor") is not None:
        w.add_rope_scaling_type(RopeScalingType.YARN)
        w.add_rope_scaling_factor(rope["factor"])
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
        if (v := rope.get("attention_factor")) is not None:
            w.add_rope_scaling_yarn_attn_factor(v)
        if (v := rope.get("beta_fast")) is not None:
            w.add_rope_scaling_yarn_beta_fast(v)
        if (v := rope.get("beta_slow")) is not None:
            w.add_rope_scaling_yarn_beta_slow(v)
    if rope.get("rope_theta") is not None:
        w.add_rope_freq_base(rope["rope_theta"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    if (hd := c.get("head_dim")) is not None:
        w.add_key_length(hd)
        w.add_value_length(hd)
    w.add_file_type(0)  # ALL_F32


def llama_model_params(w: GGUFWriter, c: dict) -> None:
    """LlamaModel.set_gguf_parameters: vocab size and the rotary dimension."""
    text_model_params(w, c)
    w.add_vocab_size(c["vocab_size"])
    w.add_rope_dimension_count(c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])


def olmo3_params(w: GGUFWriter, c: dict) -> None:
    """conversion/olmo.py Olmo2Model: the window and a per-layer sliding pattern."""
    text_model_params(w, c)
    w.add_sliding_window(c["sliding_window"])
    w.add_sliding_window_pattern([t == "sliding_attention" for t in c["layer_types"]])


def nanbeige_params(w: GGUFWriter, c: dict) -> None:
    """conversion/nanbeige.py: LlamaModel's keys, the loop count and the final-norm switch."""
    llama_model_params(w, c)
    w.add_num_loops(int(c.get("num_loops", 1) or 1))
    w.add_skip_loop_final_norm(bool(c.get("skip_loop_final_norm", False)))


def mistral3_params(w: GGUFWriter, c: dict) -> None:
    """conversion/mistral3.py Ministral3Model: YaRN's log multiplier and the temperature."""
    llama_model_params(w, c)
    rope = c["rope_parameters"]
    w.add_rope_scaling_yarn_log_mul(rope["mscale_all_dim"])
    w.add_attn_temperature_scale(rope["llama_4_scaling_beta"])


PARAMS = {"olmo3": olmo3_params, "nanbeige": nanbeige_params, "mistral3": mistral3_params}


# -- tensors -----------------------------------------------------------------------------------


def tensors(name: str, c: dict, rng) -> dict[str, np.ndarray]:
    """GGUF tensors (numpy order: [out, in]) under the converter's names."""
    d, ff, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    H, Hkv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or d // H

    def lin(n_out, n_in, gain=1.0):
        return (rng.standard_normal((n_out, n_in)) * gain / math.sqrt(n_in)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    out = {"token_embd.weight": rng.standard_normal((V, d)).astype(np.float32), "output_norm.weight": norm(d)}
    if not c.get("tie_word_embeddings"):
        out["output.weight"] = lin(V, d, 4.0)
    for i in range(c["num_hidden_layers"]):
        b = f"blk.{i}."
        out[b + "attn_q.weight"] = lin(H * hd, d, 2.0)
        out[b + "attn_k.weight"] = lin(Hkv * hd, d, 2.0)
        out[b + "attn_v.weight"] = lin(Hkv * hd, d)
        out[b + "attn_output.weight"] = lin(d, H * hd)
        out[b + "ffn_gate.weight"] = lin(ff, d)
        out[b + "ffn_up.weight"] = lin(ff, d)
        out[b + "ffn_down.weight"] = lin(d, ff)
        if name == "olmo3":  # post-norms and full-width QK-norm
            out[b + "attn_q_norm.weight"] = norm(H * hd)
            out[b + "attn_k_norm.weight"] = norm(Hkv * hd)
            out[b + "post_attention_norm.weight"] = norm(d)
            out[b + "post_ffw_norm.weight"] = norm(d)
        else:
            out[b + "attn_norm.weight"] = norm(d)
            out[b + "ffn_norm.weight"] = norm(d)
    return out


# -- the tokenizer of a converted tiny file -----------------------------------------------------


def copy_tokenizer(w: GGUFWriter, source: Path) -> None:
    r = GGUFReader(str(source))
    for key, field in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == GGUFValueType.ARRAY:
            w.add_array(key, field.contents())
        elif vtype == GGUFValueType.STRING:
            w.add_string(key, field.contents())
        else:
            w.add_key_value(key, field.contents(), vtype)


def make(name: str) -> Path:
    c = CONFIGS[name]
    rng = np.random.default_rng(SEED + sorted(CONFIGS).index(name))
    path = TINY / f"tiny-{name}.gguf"
    w = GGUFWriter(str(path), ARCH[name])
    w.add_type("model")
    w.add_name(f"tiny-{name}")
    PARAMS[name](w, c)
    copy_tokenizer(w, TINY / c["tokenizer_from"])
    for tname, value in tensors(name, c, rng).items():
        w.add_tensor(tname, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated family names")
    args = ap.parse_args()
    for name in args.only.split(",") if args.only else CONFIGS:
        print(f"{name}: wrote {make(name)}")


if __name__ == "__main__":
    main()
