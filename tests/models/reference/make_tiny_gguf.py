"""Tiny random-weight GGUFs written directly with gguf-py, for families whose transformers
classes the reference venv does not have.

    PYTHONPATH=<llama-cpp-python 0.3.36 sdist>/vendor/llama.cpp/gguf-py \\
        python tests/models/reference/make_tiny_gguf.py [--only olmo3,nanbeige,mistral3,gemma4,minicpm5,bailingmoe3,qwen35,qwen35moe,qwen3next]

Each family starts from a Hugging Face config of the architecture's real shape, shrunk
(the CONFIGS below: the keys the model's config.json has, with small sizes). The metadata
is what llama.cpp's convert_hf_to_gguf.py (the llama-cpp-python 0.3.36 sdist) writes for
that config: its TextModel/LlamaModel `set_gguf_parameters` and the family's own class
(conversion/olmo.py, nanbeige.py, mistral3.py, gemma.py, bailingmoe3.py, qwen.py; llama.py for minicpm5), through the same GGUFWriter methods; the
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
from gguf import ExpertGatingFuncType, GGUFReader, GGUFValueType, GGUFWriter, RopeScalingType

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
    # openbmb/MiniCPM5-1B (LlamaForCausalLM, its model card: 24 layers, 16 query heads on 2
    # KV heads, untied embeddings): the llama graph; what is MiniCPM5's own is the
    # tokenizer's pre-tokenizer, which the converter names "minicpm5" (digits in runs of at
    # most three, then a Qwen-like split; whole pieces found in the vocabulary taken as they
    # are, llama.cpp's ignore_merges), so the tiny file has that pre-tokenizer over the
    # byte-level BPE vocabulary of tiny-qwen3, whose last six tokens (and the merges that
    # made them) give way to pieces only those rules reach: digit runs of three and less
    # ("123", "12", "202", "199"), one of four ("2024", which the split never yields) and
    # " quick", which no merge makes. GQA 8:1 as the real one.
    "minicpm5": dict(
        architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=128, intermediate_size=256,
        num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=1, max_position_embeddings=1024,
        rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, vocab_size=512,
        tokenizer_from="tiny-qwen3.gguf", tokenizer_pre="minicpm5",
        tokenizer_last=["123", "12", "202", "199", "2024", "\u0120quick"],
    ),
    # inclusionAI's Ling 3.0 (BailingMoeV3ForCausalLM; its config as transformers'
    # BailingHybridConfig defaults it: 42 layers in groups of 6, five Kimi delta attention
    # layers then one multi-head latent attention layer, 2 dense layers first, 512 experts in
    # 8 groups of which 4 are used, 8 per token, sigmoid scores with a selection bias,
    # renormalised and scaled by 2.5, a shared expert), shrunk: 4 layers in groups of 2
    # (KDA, MLA, KDA, MLA), the first dense; 8 experts in 4 groups, 2 used, 2 per token; and,
    # as the converter exports by default, the multi-token-prediction layer after them.
    "bailingmoe3": dict(
        architectures=["BailingMoeV3ForCausalLM"], model_type="bailing_hybrid", hidden_size=64, intermediate_size=128,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, head_dim=16, max_position_embeddings=1024,
        rms_norm_eps=1e-6, rope_theta=6000000.0, layer_group_size=2, short_conv_kernel_size=4, kda_safe_gate=True,
        kda_lower_bound=-5.0, no_kda_lora=True, gated_attention_proj_granularity_type="head_wise",
        kv_lora_rank=32, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
        num_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2, score_function="sigmoid",
        moe_intermediate_size=32, moe_shared_expert_intermediate_size=32, num_shared_experts=1,
        first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True, num_nextn_predict_layers=1,
        tie_word_embeddings=False, vocab_size=512, tokenizer_from="tiny-qwen3.gguf",
    ),
    # Qwen/Qwen3.5-9B's text config (Qwen3_5ForCausalLM): three gated delta-net layers per
    # gated attention layer; 16 key heads shared by 32 value heads of 128 (here 2 by 4 of
    # 64), a conv kernel of 4; attention heads of 256 with a quarter rotated by interleaved
    # M-RoPE [11, 11, 10] (here heads of 64, sections [3, 3, 2]).
    "qwen35": dict(
        architectures=["Qwen3_5ForCausalLM"], model_type="qwen3_5_text", hidden_size=64, intermediate_size=128,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        max_position_embeddings=1024, rms_norm_eps=1e-6, full_attention_interval=4,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        linear_conv_kernel_dim=4, linear_key_head_dim=64, linear_value_head_dim=64, linear_num_key_heads=2,
        linear_num_value_heads=4,
        rope_parameters=dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25,
                             mrope_section=[3, 3, 2], mrope_interleaved=True),
        tie_word_embeddings=False, vocab_size=512, tokenizer_from="tiny-qwen3.gguf",
    ),
}
# Qwen/Qwen3.5-35B-A3B's text config (Qwen3_5MoeForCausalLM): qwen35's layers with 256
# experts, 8 per token, of 512, and a gated shared expert of 512 (here 8, 2, 32 and 64);
# no dense feed-forward size.
CONFIGS["qwen35moe"] = dict(
    CONFIGS["qwen35"], architectures=["Qwen3_5MoeForCausalLM"], model_type="qwen3_5_moe_text", num_experts=8,
    num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=64, intermediate_size=None,
)
# Qwen/Qwen3-Next-80B-A3B-Instruct's config (Qwen3NextForCausalLM): 16 key heads and 32 value
# heads of 128 (here 2 and 4 of 64), one in_proj_ba, plain RoPE over a quarter of heads of
# 256 (here 64), 512 experts, 10 per token, of 512, a shared expert of 512, a dense size
# of 5120 in the config (here 128).
CONFIGS["qwen3next"] = dict(
    CONFIGS["qwen35moe"], architectures=["Qwen3NextForCausalLM"], model_type="qwen3_next", intermediate_size=128,
    rope_parameters=dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25),
)
SEED_OFFSETS = {"mistral3": 0, "nanbeige": 1, "olmo3": 2, "gemma4": 3, "minicpm5": 4, "bailingmoe3": 5, "qwen35": 4,
                "qwen35moe": 5, "qwen3next": 6}  # fixed: the stored files depend on them  # fmt: skip
ARCH = {"olmo3": "olmo2", "nanbeige": "nanbeige", "mistral3": "mistral3", "gemma4": "gemma4", "minicpm5": "llama",
        "bailingmoe3": "bailingmoe3", "qwen35": "qwen35", "qwen35moe": "qwen35moe", "qwen3next": "qwen3next"}  # fmt: skip


# -- metadata, as the converter writes it ------------------------------------------------------


def text_model_params(w: GGUFWriter, c: dict) -> None:
    """TextModel.set_gguf_parameters for the keys these configs have."""
    w.add_block_count(c["num_hidden_layers"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    if c.get("intermediate_size") is not None:
        w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    if c.get("num_experts"):
        w.add_expert_count(c["num_experts"])
        w.add_expert_used_count(c["num_experts_per_tok"])
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


def bailing_full_attention(c: dict, i: int) -> bool:
    """BailingMoeV3Model.is_full_attention: the last layer of each group (and the rest past
    the last whole group) attends; the others are Kimi delta attention layers."""
    n, g = c["num_hidden_layers"], c["layer_group_size"]
    return (i + 1) % g == 0 or i >= n // g * g


def bailingmoe3_params(w: GGUFWriter, c: dict) -> None:
    """conversion/bailingmoe3.py BailingMoeV3Model over TextModel: one KV head on the
    attention layers and none on the KDA layers, KDA's head dimension, conv kernel and gate
    bound, the MLA ranks and head dimensions (key_length is the cached key: the KV rank
    plus the rotary part), the experts (TextModel: count, used, groups, sigmoid gating)."""
    n = c["num_hidden_layers"] + c["num_nextn_predict_layers"]  # the MTP layers follow the trunk's
    w.add_block_count(n)
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv([1 if bailing_full_attention(c, i) else 0 for i in range(n)])
    w.add_rope_freq_base(c["rope_theta"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_expert_count(c["num_experts"])
    w.add_expert_used_count(c["num_experts_per_tok"])
    w.add_expert_group_count(c["n_group"])
    w.add_expert_group_used_count(c["topk_group"])
    w.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)
    w.add_value_length(c["head_dim"])  # TextModel's head_dim (KDA's); MLA reads value_length_mla
    w.add_file_type(0)
    w.add_vocab_size(c["vocab_size"])
    w.add_ssm_conv_kernel(c["short_conv_kernel_size"])
    w.add_kda_head_dim(c["head_dim"])
    w.add_kda_safe_gate(c["kda_safe_gate"])
    w.add_kda_gate_lower_bound(c["kda_lower_bound"])
    w.add_kv_lora_rank(c["kv_lora_rank"])
    w.add_rope_dimension_count(c["qk_rope_head_dim"])
    w.add_key_length(c["kv_lora_rank"] + c["qk_rope_head_dim"])
    w.add_key_length_mla(c["qk_nope_head_dim"] + c["qk_rope_head_dim"])
    w.add_value_length_mla(c["v_head_dim"])
    w.add_expert_feed_forward_length(c["moe_intermediate_size"])
    w.add_expert_shared_feed_forward_length(c["moe_shared_expert_intermediate_size"])
    w.add_expert_shared_count(c["num_shared_experts"])
    w.add_leading_dense_block_count(c["first_k_dense_replace"])
    w.add_expert_weights_scale(c["routed_scaling_factor"])
    w.add_expert_weights_norm(c["norm_topk_prob"])
    if c["num_nextn_predict_layers"]:
        w.add_nextn_predict_layers(c["num_nextn_predict_layers"])


def qwen35_params(w: GGUFWriter, c: dict) -> None:
    """conversion/qwen.py Qwen3_5TextModel over Qwen3NextModel, Qwen2MoeModel and TextModel:
    the linear-attention sizes, the per-layer pattern, the interval, a quarter of each head
    rotated, the M-RoPE sections (no MTP layers here: --no-mtp)."""
    text_model_params(w, c)
    w.add_ssm_conv_kernel(c["linear_conv_kernel_dim"])
    w.add_ssm_state_size(c["linear_key_head_dim"])
    w.add_ssm_group_count(c["linear_num_key_heads"])
    w.add_ssm_time_step_rank(c["linear_num_value_heads"])
    w.add_ssm_inner_size(c["linear_value_head_dim"] * c["linear_num_value_heads"])
    w.add_recurrent_layers([t == "linear_attention" for t in c["layer_types"]])
    w.add_full_attention_interval(c["full_attention_interval"])
    rope = c["rope_parameters"]
    w.add_rope_dimension_count(int(c["head_dim"] * rope["partial_rotary_factor"]))
    if "mrope_section" in rope:
        w.add_rope_dimension_sections((rope["mrope_section"] + [0, 0, 0, 0])[:4])
    if c.get("moe_intermediate_size"):  # Qwen2MoeModel
        w.add_expert_feed_forward_length(c["moe_intermediate_size"])
        w.add_expert_shared_feed_forward_length(c["shared_expert_intermediate_size"])


PARAMS = {"olmo3": olmo3_params, "nanbeige": nanbeige_params, "mistral3": mistral3_params, "gemma4": gemma4_params,
          "minicpm5": llama_model_params, "bailingmoe3": bailingmoe3_params, "qwen35": qwen35_params,
          "qwen35moe": qwen35_params, "qwen3next": qwen35_params}


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
    if name == "bailingmoe3":
        return out | bailingmoe3_tensors(c, lin, norm, rng)
    if name in ("qwen35", "qwen35moe", "qwen3next"):
        return out | qwen35_tensors(c, lin, norm, rng, fused_ba=name == "qwen3next")
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


def bailingmoe3_tensors(c: dict, lin, norm, rng) -> dict[str, np.ndarray]:
    """Bailing MoE V3's layers under the converter's names and shapes (numpy order): KDA
    layers (q/k/v with depthwise convs stored [1, channels, 1, kernel], f/g projections, the
    per-head beta projection and A = exp(A_log) as [heads, 1], dt bias, the per-head output
    norm), MLA layers (the joint KV projection with its rotary part, the absorbed per-head
    key and value projections k_b [heads, rank, nope] and v_b [heads, v, rank], a gate per
    head), a dense first feed-forward, then routers (scaled up so that routing is
    decisive), selection biases, experts and the shared expert."""
    d, ff, H = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"]
    hd, conv, rank = c["head_dim"], c["short_conv_kernel_size"], c["kv_lora_rank"]
    nope, rope, vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    E, fe, fs = c["num_experts"], c["moe_intermediate_size"], c["moe_shared_expert_intermediate_size"]
    inner = H * hd
    out = {}
    for i in range(c["num_hidden_layers"]):
        b = f"blk.{i}."
        out[b + "attn_norm.weight"] = norm(d)
        if not bailing_full_attention(c, i):
            for x in "qkv":
                out[b + f"attn_{x}.weight"] = lin(inner, d, 2.0 if x != "v" else 1.0)
                out[b + f"ssm_conv1d_{x}.weight"] = (rng.standard_normal((1, inner, 1, conv)) / math.sqrt(conv)).astype(np.float32)
            out[b + "ssm_f_a.weight"] = lin(inner, d)
            out[b + "ssm_beta.weight"] = lin(H, d)
            out[b + "ssm_a"] = np.exp(rng.uniform(0.0, 1.5, (H, 1))).astype(np.float32)
            out[b + "ssm_dt.bias"] = (0.5 * rng.standard_normal(inner)).astype(np.float32)
            out[b + "ssm_g_a.weight"] = lin(inner, d)
            out[b + "ssm_norm.weight"] = norm(hd)
            out[b + "attn_output.weight"] = lin(d, inner)
        else:
            out[b + "attn_q.weight"] = lin(H * (nope + rope), d, 2.0)
            out[b + "attn_kv_a_mqa.weight"] = lin(rank + rope, d, 2.0)
            out[b + "attn_kv_a_norm.weight"] = norm(rank)
            out[b + "attn_k_b.weight"] = (rng.standard_normal((H, rank, nope)) / math.sqrt(nope)).astype(np.float32)
            out[b + "attn_v_b.weight"] = (rng.standard_normal((H, vd, rank)) / math.sqrt(rank)).astype(np.float32)
            out[b + "attn_gate.weight"] = lin(H, d)
            out[b + "attn_output.weight"] = lin(d, H * vd)
        out[b + "ffn_norm.weight"] = norm(d)
        if i < c["first_k_dense_replace"]:
            out[b + "ffn_gate.weight"] = lin(ff, d)
            out[b + "ffn_up.weight"] = lin(ff, d)
            out[b + "ffn_down.weight"] = lin(d, ff)
        else:
            out[b + "ffn_gate_inp.weight"] = lin(E, d, 6.0)
            out[b + "exp_probs_b.bias"] = (0.1 * rng.standard_normal(E)).astype(np.float32)
            out[b + "ffn_gate_exps.weight"] = (rng.standard_normal((E, fe, d)) / math.sqrt(d)).astype(np.float32)
            out[b + "ffn_up_exps.weight"] = (rng.standard_normal((E, fe, d)) / math.sqrt(d)).astype(np.float32)
            out[b + "ffn_down_exps.weight"] = (rng.standard_normal((E, d, fe)) / math.sqrt(fe)).astype(np.float32)
            out[b + "ffn_gate_shexp.weight"] = lin(fs, d)
            out[b + "ffn_up_shexp.weight"] = lin(fs, d)
            out[b + "ffn_down_shexp.weight"] = lin(d, fs)
    for i in range(c["num_hidden_layers"], c["num_hidden_layers"] + c["num_nextn_predict_layers"]):
        b = f"blk.{i}."  # the MTP layer (drawn after the trunk's, which stay as they were without it)
        for name, value in bailingmoe3_tensors({**c, "num_hidden_layers": 1, "num_nextn_predict_layers": 0,
                                                "layer_group_size": 1, "first_k_dense_replace": 0},
                                               lin, norm, rng).items():  # fmt: skip
            out[b + name[len("blk.0."):]] = value
        out[b + "nextn.eh_proj.weight"] = lin(d, 2 * d)
        out[b + "nextn.enorm.weight"] = norm(d)
        out[b + "nextn.hnorm.weight"] = norm(d)
        out[b + "layer_output_norm.weight"] = norm(d)
def qwen35_tensors(c: dict, lin, norm, rng, fused_ba: bool = False) -> dict[str, np.ndarray]:
    """Qwen3.5's layers as the converter writes them: linear attention as attn_qkv,
    attn_gate, ssm_beta, ssm_alpha, the conv kernel squeezed to [channels, kernel], ssm_a =
    -exp(A_log), ssm_dt.bias, ssm_norm and ssm_out; attention with a query and a gate per
    head in attn_q; post_attention_norm before the feed-forward. Norm weights are stored
    with the +1 the converter adds (1 +- 0.1 here); A_log and dt_bias as transformers
    initialises them (log of uniform [1, 16), dt from [1e-3, 0.1] through inverse softplus).
    With experts (qwen35moe, qwen3next): the router, the stacked experts and the shared
    expert with its one-output gate. ``fused_ba``: Qwen3-Next's ssm_ba (per key head its
    group's beta rows then alpha rows, as the converter keeps in_proj_ba)."""
    d, ff, H, Hkv, hd = (c[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                          "num_key_value_heads", "head_dim"))  # fmt: skip
    kd, vd = c["linear_key_head_dim"] * c["linear_num_key_heads"], c["linear_value_head_dim"] * c["linear_num_value_heads"]
    hv, kernel = c["linear_num_value_heads"], c["linear_conv_kernel_dim"]
    out = {}
    for i, kind in enumerate(c["layer_types"]):
        b = f"blk.{i}."
        out[b + "attn_norm.weight"] = norm(d)
        out[b + "post_attention_norm.weight"] = norm(d)
        if kind == "linear_attention":
            out[b + "attn_qkv.weight"] = lin(2 * kd + vd, d, 2.0)
            out[b + "attn_gate.weight"] = lin(vd, d)
            if fused_ba:
                out[b + "ssm_ba.weight"] = lin(2 * hv, d)
            else:
                out[b + "ssm_beta.weight"] = lin(hv, d)
                out[b + "ssm_alpha.weight"] = lin(hv, d)
            out[b + "ssm_conv1d.weight"] = (rng.standard_normal((2 * kd + vd, kernel)) / math.sqrt(kernel)).astype(np.float32)
            out[b + "ssm_a"] = (-np.exp(np.log(rng.uniform(1.0, 16.0, hv)))).astype(np.float32)
            dt = np.exp(rng.uniform(math.log(1e-3), math.log(0.1), hv))
            out[b + "ssm_dt.bias"] = (dt + np.log(-np.expm1(-dt))).astype(np.float32)
            out[b + "ssm_norm.weight"] = norm(c["linear_value_head_dim"])
            out[b + "ssm_out.weight"] = lin(d, vd)
        else:
            out[b + "attn_q.weight"] = lin(2 * H * hd, d, 2.0)
            out[b + "attn_k.weight"] = lin(Hkv * hd, d, 2.0)
            out[b + "attn_v.weight"] = lin(Hkv * hd, d)
            out[b + "attn_q_norm.weight"] = norm(hd)
            out[b + "attn_k_norm.weight"] = norm(hd)
            out[b + "attn_output.weight"] = lin(d, H * hd)
        if c.get("num_experts"):
            ne, fe, fs = c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
            out[b + "ffn_gate_inp.weight"] = lin(ne, d, 2.0)
            out[b + "ffn_gate_exps.weight"] = np.stack([lin(fe, d) for _ in range(ne)])
            out[b + "ffn_up_exps.weight"] = np.stack([lin(fe, d) for _ in range(ne)])
            out[b + "ffn_down_exps.weight"] = np.stack([lin(d, fe) for _ in range(ne)])
            out[b + "ffn_gate_shexp.weight"] = lin(fs, d)
            out[b + "ffn_up_shexp.weight"] = lin(fs, d)
            out[b + "ffn_down_shexp.weight"] = lin(d, fs)
            out[b + "ffn_gate_inp_shexp.weight"] = lin(1, d).reshape(d)
        else:
            out[b + "ffn_gate.weight"] = lin(ff, d)
            out[b + "ffn_up.weight"] = lin(ff, d)
            out[b + "ffn_down.weight"] = lin(d, ff)
    return out


# -- the tokenizer of a converted tiny file -----------------------------------------------------


def copy_tokenizer(w: GGUFWriter, source: Path, pre: str | None = None, last: list[str] | None = None) -> None:
    """The tokenizer keys of ``source``; ``pre`` replaces its pre-tokenizer name, ``last``
    its last tokens (ordinary ones, without merges; the merges that made the replaced
    tokens are dropped)."""
    r = GGUFReader(str(source))
    tokens = list(r.fields["tokenizer.ggml.tokens"].contents())
    merges = list(r.fields["tokenizer.ggml.merges"].contents()) if "tokenizer.ggml.merges" in r.fields else []
    if last:
        gone = set(tokens[-len(last):])
        assert not gone & set(last) and not set(last) & set(tokens), "the new tokens must be new"
        tokens[-len(last):] = last
        merges = [m for m in merges if m.replace(" ", "") not in gone and not set(m.split(" ")) & gone]
    for key, field in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        if key == "tokenizer.ggml.pre" and pre is not None:
            w.add_string(key, pre)
            continue
        if key == "tokenizer.ggml.tokens":
            w.add_array(key, tokens)
            continue
        if key == "tokenizer.ggml.merges":
            w.add_array(key, merges)
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
    copy_tokenizer(w, TINY / c["tokenizer_from"], c.get("tokenizer_pre"), c.get("tokenizer_last"))
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
