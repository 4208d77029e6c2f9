"""Tiny random-weight GGUFs written directly with gguf-py, for families whose transformers
classes the reference venv does not have.

    PYTHONPATH=<llama-cpp-python 0.3.36 sdist>/vendor/llama.cpp/gguf-py \\
        python tests/models/reference/make_tiny_gguf.py [--only olmo3,nanbeige,mistral3,gemma4]

Each family starts from a Hugging Face config of the architecture's real shape, shrunk
(the CONFIGS below: the keys the model's config.json has, with small sizes). The metadata
is what llama.cpp's convert_hf_to_gguf.py (the llama-cpp-python 0.3.36 sdist) writes for
that config: its TextModel/LlamaModel `set_gguf_parameters` and the family's own class
(conversion/olmo.py, nanbeige.py, mistral3.py, gemma.py), through the same GGUFWriter methods; the
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
    # google/gemma-4-31B-it's text config (Gemma4ForCausalLM): five sliding layers per full
    # one (here three), sliding layers with head_dim 16 and 2 KV heads, full ones with
    # global_head_dim 32, 1 KV head, keys as values (attention_k_eq_v) and "proportional"
    # RoPE over a quarter of the head; a per-layer output scalar; final soft-cap 30.
    "gemma4": dict(
        architectures=["Gemma4ForCausalLM"], model_type="gemma4_text", hidden_size=64, intermediate_size=128,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, num_global_key_value_heads=1,
        head_dim=16, global_head_dim=32, attention_k_eq_v=True, max_position_embeddings=1024, rms_norm_eps=1e-6,
        sliding_window=16, final_logit_softcapping=30.0, num_kv_shared_layers=0, hidden_size_per_layer_input=0,
        layer_types=["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters=dict(
            full_attention=dict(rope_type="proportional", partial_rotary_factor=0.25, rope_theta=1000000.0),
            sliding_attention=dict(rope_type="default", rope_theta=10000.0),
        ),
        tie_word_embeddings=True, vocab_size=512, tokenizer_from="tiny-gemma2.gguf",
    ),
}
SEED_OFFSETS = {"mistral3": 0, "nanbeige": 1, "olmo3": 2, "gemma4": 3}  # fixed: the stored files depend on them
ARCH = {"olmo3": "olmo2", "nanbeige": "nanbeige", "mistral3": "mistral3", "gemma4": "gemma4"}


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


def gemma4_params(w: GGUFWriter, c: dict) -> None:
    """conversion/gemma.py Gemma4Model over Gemma3Model and TextModel: the full layers' head
    dimension, KV heads and RoPE base as the main keys, the sliding layers' beside them,
    the per-layer pattern, no shared KV layers and no per-layer embeddings. (TextModel
    writes no rope scaling for "proportional"; rope_freqs carries it.)"""
    swa = [t == "sliding_attention" for t in c["layer_types"]]
    rope = c["rope_parameters"]
    w.add_block_count(c["num_hidden_layers"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv([c["num_key_value_heads"] if s else c["num_global_key_value_heads"] for s in swa])
    w.add_rope_freq_base(rope["full_attention"]["rope_theta"])
    w.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_final_logit_softcapping(c["final_logit_softcapping"])
    w.add_sliding_window(c["sliding_window"])
    w.add_shared_kv_layers(c["num_kv_shared_layers"])
    w.add_embedding_length_per_layer_input(c["hidden_size_per_layer_input"])
    w.add_sliding_window_pattern(swa)
    w.add_key_length(c["global_head_dim"])
    w.add_value_length(c["global_head_dim"])
    w.add_key_length_swa(c["head_dim"])
    w.add_value_length_swa(c["head_dim"])
    w.add_rope_dimension_count(c["global_head_dim"])
    w.add_rope_dimension_count_swa(int(c["head_dim"] * rope["sliding_attention"].get("partial_rotary_factor", 1.0)))
    w.add_file_type(0)


PARAMS = {"olmo3": olmo3_params, "nanbeige": nanbeige_params, "mistral3": mistral3_params, "gemma4": gemma4_params}


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
    if name == "gemma4":
        return out | gemma4_tensors(c, lin, norm, rng)
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


def gemma4_tensors(c: dict, lin, norm, rng) -> dict[str, np.ndarray]:
    """Gemma 4's layers: per-layer head shapes, QK-norms of the head width, no attn_v on
    the full layers (attention_k_eq_v), sandwich norms, the layer scalar; rope_freqs as
    Gemma4Model.generate_extra_tensors makes it (1 for the rotated quarter, 1e30 after)."""
    d, ff, H = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"]
    full_hd = c["global_head_dim"]
    n_rot = int(full_hd * c["rope_parameters"]["full_attention"]["partial_rotary_factor"] / 2)
    out = {"rope_freqs.weight": np.array([1.0] * n_rot + [1e30] * (full_hd // 2 - n_rot), np.float32)}
    for i, kind in enumerate(c["layer_types"]):
        b = f"blk.{i}."
        swa = kind == "sliding_attention"
        hd = c["head_dim"] if swa else full_hd
        hkv = c["num_key_value_heads"] if swa else c["num_global_key_value_heads"]
        out[b + "attn_norm.weight"] = norm(d)
        out[b + "attn_q.weight"] = lin(H * hd, d)
        out[b + "attn_k.weight"] = lin(hkv * hd, d)
        if swa or not c.get("attention_k_eq_v"):
            out[b + "attn_v.weight"] = lin(hkv * hd, d)
        out[b + "attn_output.weight"] = lin(d, H * hd)
        out[b + "attn_q_norm.weight"] = norm(hd)
        out[b + "attn_k_norm.weight"] = norm(hd)
        out[b + "post_attention_norm.weight"] = norm(d)
        out[b + "ffn_norm.weight"] = norm(d)
        out[b + "ffn_gate.weight"] = lin(ff, d)
        out[b + "ffn_up.weight"] = lin(ff, d)
        out[b + "ffn_down.weight"] = lin(d, ff)
        out[b + "post_ffw_norm.weight"] = norm(d)
        out[b + "layer_output_scale.weight"] = np.array([0.5 + 0.5 * rng.random()], np.float32)
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
    rng = np.random.default_rng(SEED + SEED_OFFSETS[name])
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
