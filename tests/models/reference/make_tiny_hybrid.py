"""Tiny random-weight models of the hybrid, state-space, MoE and later dense families, made
like make_tiny_models.py.

    /work/venv-ref/bin/python tests/models/reference/make_tiny_hybrid.py [--only lfm2]

Same venv, same steps and the same record format as make_tiny_models.py (whose tokenizer
training, conversion and transformers-vs-llama.cpp check this script reuses): train a small
tokenizer, build the HF model with seeded random weights (scales chosen from a small grid
by HF's own greedy margins), convert it with llama.cpp's convert_hf_to_gguf.py from the
llama-cpp-python 0.3.36 sdist, and store transformers' logits beside the GGUF. Then
``make_reference.py --tiny-only`` (or ``--only tiny-<name>``) stores llama.cpp's.

What differs is only the families and the weight initialisation (their parameters have
other names: LFM2's ``out_proj``/``w2`` write into the residual stream, its conv kernels are
3-D).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

import torch
import transformers

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_tiny_models as M  # noqa: E402

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Parameter names (substrings) by what they do, across these families.
QK_NAMES = ("q_proj", "k_proj")
# MoE routers: decisive routing, so that float rounding (f16 caches) rarely flips an
# expert choice between engines (a flip moves logits by whole units)
ROUTER_NAMES = ("mlp.gate.weight", "feed_forward.gate.weight")  # (granitehybrid was made without)
ROUTER_GAIN = 6.0
# Mamba's in_proj feeds the scan; its out_proj writes into the residual stream (above)
RESIDUAL_NAMES = ("o_proj", "down_proj", "out_proj", ".w2.", "output_linear")  # write into the residual stream


def init_weights(model, family: str, seed: int, out_gain: float, qk_gain: float, res_gain: float) -> None:
    """make_tiny_models.init_weights, for these families' parameter names: Gaussian weights
    divided by sqrt(fan-in); norms 1 +- 0.1; the logit spread `out_gain`, q/k `qk_gain`, and
    what writes into the residual stream `res_gain`. Depthwise conv kernels ([channels, 1,
    kernel]) are divided by sqrt(kernel); expert-selection biases are small (they only
    break near-ties between experts)."""
    gen = torch.Generator().manual_seed(seed)
    tied = model.config.tie_word_embeddings
    hidden = model.config.hidden_size
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if name.endswith("expert_bias"):  # a buffer in transformers 5's LFM2-MoE
                buf.copy_(0.05 * torch.randn(buf.shape, generator=gen))
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            if "expert_bias" in name:
                param.copy_(0.05 * noise)
            elif name.endswith("A_log"):  # Mamba-2: decay rates exp(A_log) in [1, 16], as HF initialises them
                param.copy_(torch.log(1.0 + 15.0 * torch.rand(param.shape, generator=gen)))
            elif name.endswith("dt_bias"):  # softplus(dt_bias) between ~0.001 and 0.1, as HF's init
                dt = torch.exp(torch.rand(param.shape, generator=gen) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
                param.copy_(dt + torch.log(-torch.expm1(-dt)))
            elif family in ("starcoder2", "phi2") and name.endswith(".bias"):  # biases near 0, not norm-like
                param.copy_(0.1 * noise)
            elif param.dim() == 1:
                param.copy_(1.0 + 0.1 * noise)
            elif "embed_tokens" in name:
                param.copy_(noise * (out_gain / math.sqrt(hidden) if tied else 1.0))
            elif name.startswith("lm_head"):
                param.copy_(noise * out_gain / math.sqrt(param.shape[1]))
            elif param.dim() == 3:  # depthwise conv [channels, 1, kernel], or experts [n, out, in]
                gain = res_gain if any(k in name for k in RESIDUAL_NAMES) else 1.0
                param.copy_(noise * gain / math.sqrt(param.shape[-1]))
            else:
                gain = qk_gain if any(k in name for k in QK_NAMES) else 1.0
                writes_residual = (family == "starcoder2" and ".c_proj." in name) or (
                    family == "phi2" and (".dense." in name or ".fc2." in name)
                )
                if any(k in name for k in RESIDUAL_NAMES) or writes_residual:
                    gain = res_gain
                if any(name.endswith(k) for k in ROUTER_NAMES):
                    gain = ROUTER_GAIN
                param.copy_(noise * gain / math.sqrt(param.shape[1]))


def hf_greedy(model, ids: list[int], n: int) -> tuple[list[int], list[float]]:
    """make_tiny_models.hf_greedy without a cache: each step re-runs the whole sequence.
    These families keep recurrent state in caches of their own kinds (Mamba's
    cache_params, hybrid caches) that the generic past_key_values loop does not drive;
    a full pass per step needs none and is cheap at this size."""
    import numpy as np

    seq, out_ids, margins = list(ids), [], []
    with torch.no_grad():
        for _ in range(n):
            row = model(torch.tensor([seq]), use_cache=False).logits[0, -1].double().numpy()
            top = np.sort(row)[-2:]
            margins.append(float(top[1] - top[0]))
            out_ids.append(int(np.argmax(row)))
            seq.append(out_ids[-1])
    return out_ids, margins


def grouped_gated_norm(group_size: int):
    """Make transformers' Mamba-2 gated RMS norm normalise each group of ``group_size``
    channels on its own, as Mamba-2 defines it (mamba_ssm's RMSNormGated with
    group_size = d_inner / n_groups, which llama.cpp follows). transformers' pure-PyTorch
    path (the one that runs without the CUDA kernels) normalises over all of d_inner,
    which differs whenever n_groups > 1."""
    from transformers.models.mamba2 import modeling_mamba2 as mm

    def forward(self, hidden_states, gate=None):
        dtype = hidden_states.dtype
        h = hidden_states.to(torch.float32)
        if gate is not None:
            h = h * torch.nn.functional.silu(gate.to(torch.float32))
        g = h.view(*h.shape[:-1], -1, group_size)
        g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * g.view(h.shape).to(dtype)

    mm.MambaRMSNormGated.forward = forward


def as_minicpm(hf_dir: Path, scale_emb: float, scale_depth: float, dim_model_base: int) -> None:
    """Relabel a saved Granite checkpoint as MiniCPM's: the same weights (llama names and
    layout), the multipliers under MiniCPM's config keys."""
    cfg_path = hf_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    for key in ("embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling"):
        cfg.pop(key)
    cfg.update(architectures=["MiniCPMForCausalLM"], model_type="minicpm", scale_emb=scale_emb,
               scale_depth=scale_depth, dim_model_base=dim_model_base)
    cfg_path.write_text(json.dumps(cfg, indent=1))


def as_exaone(hf_dir: Path) -> None:
    """Relabel a saved Llama checkpoint as EXAONE 3's (the converter asserts its activation
    key; the weights keep llama's names, which the tensor map knows for every arch)."""
    cfg_path = hf_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.update(architectures=["ExaoneForCausalLM"], model_type="exaone", activation_function="silu")
    cfg_path.write_text(json.dumps(cfg, indent=1))


def family_specs() -> dict[str, dict]:
    chat_bpe = ("bpe", dict(vocab_size=512, specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], regex=None,
                            roles=dict(eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token="<|endoftext|>",
                                       chat_template=CHATML)))  # fmt: skip
    return {
        "lfm2": dict(
            cls="Lfm2ForCausalLM", pre="gpt-2",
            tokenizer=chat_bpe,
            config=transformers.Lfm2Config(
                hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=1024, norm_eps=1e-5, num_hidden_layers=4, rope_theta=1_000_000.0,
                conv_L_cache=3, conv_bias=False, block_auto_adjust_ff_dim=False,
                layer_types=["conv", "full_attention", "conv", "full_attention"],
                tie_word_embeddings=True, bos_token_id=0, eos_token_id=2, pad_token_id=0,
            ),
            features=("short-conv layers 0 and 2 (kernel 3, carried conv state), GQA 4/2 attention layers 1 and 3 "
                      "with per-head QK-norm and NeoX RoPE, final norm token_embd_norm, tied embeddings, "
                      "ChatML chat template"),
        ),
        "mamba2": dict(
            cls="Mamba2ForCausalLM", pre="gpt-2",
            tokenizer=chat_bpe,
            config=transformers.Mamba2Config(
                hidden_size=64, state_size=16, num_hidden_layers=3, expand=2, head_dim=16, num_heads=8, n_groups=2,
                conv_kernel=4, use_conv_bias=True, use_bias=False, chunk_size=32, layer_norm_epsilon=1e-5,
                tie_word_embeddings=False, bos_token_id=0, eos_token_id=2, pad_token_id=0,
            ),
            patch=lambda: grouped_gated_norm(64),
            features=("3 Mamba-2 layers: d_inner 128 in 8 heads of 16, 2 groups of d_state 16 (grouped gated RMS "
                      "norm), conv kernel 4 with bias, untied output; prompts longer than the HF chunk size 32. "
                      "transformers' gated norm patched to normalise per group (grouped_gated_norm)"),
        ),
        "qwen3moe": dict(
            cls="Qwen3MoeForCausalLM", pre="qwen2",
            tokenizer=("bpe", dict(vocab_size=512, specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                   regex=M.QWEN2_REGEX, roles=dict(eos_token="<|endoftext|>", pad_token="<|endoftext|>"))),
            config=transformers.Qwen3MoeConfig(
                **M.COMMON, num_hidden_layers=3, head_dim=32, rope_theta=1_000_000.0, num_experts=4,
                num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True, decoder_sparse_step=1,
                mlp_only_layers=[], tie_word_embeddings=False, bos_token_id=None, eos_token_id=0, pad_token_id=0,
            ),
            features=("qwen3 attention (QK-norm, head_dim 32, GQA 4/2) with 4 experts of 32 per layer, 2 per token, "
                      "softmax router, weights renormalised (norm_topk_prob, as llama.cpp always does); untied"),
        ),
        "gemma": dict(
            cls="GemmaForCausalLM", pre=None,
            tokenizer=("spm", dict(vocab_size=512, add_dummy_prefix=False,
                                   ids=dict(pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>",
                                            eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>"),
                                   special_symbols=("<start_of_turn>", "<end_of_turn>"))),
            config=transformers.GemmaConfig(
                **M.COMMON, num_hidden_layers=3, head_dim=32, hidden_activation="gelu_pytorch_tanh",
                tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=2,
            ),
            features=("Gemma 1: embedding scaled by sqrt(hidden), (1+w) RMSNorm, GeGLU, head_dim 32, GQA 4/2, "
                      "query scaled by 1/sqrt(head_dim), tied embeddings"),
        ),
        "smollm3": dict(
            cls="SmolLM3ForCausalLM", pre="gpt-2",
            tokenizer=chat_bpe,
            config=transformers.SmolLM3Config(
                **M.COMMON, num_hidden_layers=4, rope_theta=10000.0, tie_word_embeddings=True,
                bos_token_id=0, eos_token_id=2, pad_token_id=0,
            ),
            features="llama with no RoPE in every fourth layer (layer 3 of 4: NoPE), GQA 4/2, tied embeddings",
        ),
        **({"lfm2moe": dict(
            cls="Lfm2MoeForCausalLM", pre="gpt-2",
            tokenizer=chat_bpe,
            config=transformers.Lfm2MoeConfig(
                hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=1024, norm_eps=1e-5, num_hidden_layers=4,
                rope_theta=1_000_000.0, conv_L_cache=3, conv_bias=False, num_dense_layers=1, num_experts=4,
                num_experts_per_tok=2, use_expert_bias=True, norm_topk_prob=True, routed_scaling_factor=1.0,
                layer_types=["conv", "full_attention", "conv", "full_attention"],
                tie_word_embeddings=True, bos_token_id=0, eos_token_id=2, pad_token_id=0,
            ),
            features=("LFM2 layers (conv 0 and 2, attention 1 and 3) with a dense feed-forward in layer 0 and 4 experts "
                      "of 32 in layers 1-3: sigmoid router, 2 per token chosen with a per-expert selection bias, "
                      "weights renormalised; tied embeddings. Built with transformers 5 (4.57.6 has no LFM2-MoE), "
                      "converted with 4.57.6 (CONVERT_PYTHON)"),
        )} if hasattr(transformers, "Lfm2MoeConfig") else {}),
        "falcon-h1": dict(
            cls="FalconH1ForCausalLM", pre="gpt-2",
            tokenizer=chat_bpe,
            config=transformers.FalconH1Config(
                hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=1024, rms_norm_eps=1e-5,
                rope_theta=100000.0, mamba_d_ssm=128, mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=1,
                mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=32, mamba_rms_norm=True,
                mamba_norm_before_gate=False, embedding_multiplier=1.5, lm_head_multiplier=0.8,
                attention_in_multiplier=1.2, attention_out_multiplier=0.9, key_multiplier=0.7,
                ssm_in_multiplier=1.1, ssm_out_multiplier=0.9, mlp_multipliers=[1.2, 0.8],
                ssm_multipliers=[1.0, 1.1, 0.9, 1.2, 0.8], tie_word_embeddings=False,
                bos_token_id=0, eos_token_id=2, pad_token_id=0,
            ),
            features=("attention (GQA 4/2, head_dim 16) and a Mamba-2 mixer (8 heads of 16, gated RMS norm) side by "
                      "side in each of 3 layers; muP multipliers (folded into the weights by the converter); untied"),
        ),
        # transformers 4.57.6 has no MiniCPM (it is remote code). Its arithmetic is granite's
        # (embedding x scale_emb, residual x scale_depth/sqrt(layers), logits / (hidden /
        # dim_model_base), attention 1/sqrt(head_dim)), so transformers' Granite with those
        # multipliers is the reference, saved as a MiniCPMForCausalLM checkpoint for the
        # converter (as_minicpm) so that the file is llama.cpp's `minicpm`.
        "minicpm": dict(
            cls="GraniteForCausalLM", pre=None,
            tokenizer=("spm", dict(vocab_size=512, add_dummy_prefix=True,
                                   ids=dict(unk_id=0, bos_id=1, eos_id=2, pad_id=-1))),
            config=transformers.GraniteConfig(
                **M.COMMON, num_hidden_layers=3, rope_theta=10000.0, embedding_multiplier=12.0,
                attention_multiplier=0.25, residual_multiplier=1.4 / math.sqrt(3), logits_scaling=2.0,
                tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
            ),
            res_gains=(10.0, 30.0, 60.0),  # the x12 embedding dominates the residual stream otherwise
            before_convert=lambda hf_dir: as_minicpm(hf_dir, scale_emb=12.0, scale_depth=1.4, dim_model_base=32),
            features=("MiniCPM (1/2): llama with embedding x12, residual x1.4/sqrt(3), logits / (64/32), attention "
                      "1/sqrt(head_dim 16); SentencePiece vocabulary, GQA 4/2, tied. Reference: transformers' Granite "
                      "with those multipliers, converted as MiniCPMForCausalLM"),
        ),
        # EXAONE 3.x is remote code too; its arithmetic is llama's (rotate-half RoPE with
        # llama3 frequency factors, SwiGLU, RMS norms), and its converter does not permute
        # q/k, so llama.cpp rotates NeoX-style: transformers' Llama, saved as an
        # ExaoneForCausalLM checkpoint (as_exaone), is the reference.
        "exaone": dict(
            cls="LlamaForCausalLM", pre="gpt-2",
            tokenizer=chat_bpe,
            config=transformers.LlamaConfig(
                **M.COMMON, num_hidden_layers=3, rope_theta=10000.0,
                rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                  original_max_position_embeddings=8192),
                tie_word_embeddings=False, bos_token_id=0, eos_token_id=2, pad_token_id=0,
            ),
            before_convert=as_exaone,
            features=("EXAONE 3: llama arithmetic with NeoX-paired RoPE (the converter keeps HF's layout) and llama3 "
                      "RoPE frequency factors (rope_freqs tensor), GQA 4/2, untied. Reference: transformers' Llama, "
                      "converted as ExaoneForCausalLM"),
        ),
        "starcoder2": dict(
            cls="Starcoder2ForCausalLM", pre="gpt-2",
            tokenizer=chat_bpe,
            config=transformers.Starcoder2Config(
                hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                num_hidden_layers=3, max_position_embeddings=1024, norm_epsilon=1e-5, use_bias=True,
                hidden_act="gelu_pytorch_tanh", rope_theta=10000.0, sliding_window=None,
                tie_word_embeddings=True, bos_token_id=0, eos_token_id=2, pad_token_id=0,
            ),
            features=("StarCoder2: LayerNorm with biases (pre-norm and final), biases on q/k/v/o, a plain GELU "
                      "feed-forward (c_fc -> gelu -> c_proj, with biases), NeoX RoPE, GQA 4/2, tied embeddings"),
        ),
        "phi2": dict(
            cls="PhiForCausalLM", pre="gpt-2",
            tokenizer=chat_bpe,
            # the converter writes feed_forward_length = 4 x hidden (Phi-2's ratio), whatever the config says
            config=transformers.PhiConfig(
                hidden_size=64, intermediate_size=256, num_attention_heads=4, num_key_value_heads=4,
                num_hidden_layers=3, max_position_embeddings=1024, layer_norm_eps=1e-5, hidden_act="gelu_new",
                partial_rotary_factor=0.5, rope_theta=10000.0, qk_layernorm=False, resid_pdrop=0.0,
                embd_pdrop=0.0, attention_dropout=0.0, tie_word_embeddings=False,
                bos_token_id=0, eos_token_id=2, pad_token_id=0,
            ),
            res_gains=(6.0,),
            features=("Phi-2: one LayerNorm (with bias) feeding attention and a GELU feed-forward side by side, "
                      "biases on every projection and the output, partial rotary (8 of 16 dimensions, NeoX pairs), "
                      "queries scaled before attention, untied output"),
        ),
        "granitehybrid": dict(
            cls="GraniteMoeHybridForCausalLM", pre="gpt-2",
            tokenizer=chat_bpe,
            config=transformers.GraniteMoeHybridConfig(
                hidden_size=64, intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=1024, rms_norm_eps=1e-6,
                layer_types=["mamba", "attention", "mamba", "attention"], mamba_n_heads=8, mamba_d_head=16,
                mamba_n_groups=1, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=32,
                num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=48,
                embedding_multiplier=12.0, attention_multiplier=0.15, residual_multiplier=0.22, logits_scaling=2.0,
                position_embedding_type="nope", tie_word_embeddings=True, bos_token_id=0, eos_token_id=2,
                pad_token_id=0,
            ),
            res_gains=(20.0, 60.0),  # residual_multiplier 0.22 shrinks what each block adds
            features=("Mamba-2 layers 0 and 2 (8 heads of 16, one group, d_state 16) and GQA 4/2 attention layers 1 "
                      "and 3 without position encoding; 4 experts (2 per token, softmax, renormalised) plus a shared "
                      "expert; granite multipliers (embedding 12, attention 0.15, residual 0.22, logits / 2); tied"),
        ),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated families")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    M.init_weights = init_weights  # build() calls the module's init_weights
    M.hf_greedy = hf_greedy
    if os.environ.get("CONVERT_PYTHON"):
        # transformers 5 builds LFM2-MoE; the converter runs where its pinned 4.57.6 is
        real_run = M.subprocess.run

        def run(cmd, *a, **kw):
            if cmd and cmd[0] == sys.executable:
                cmd = [os.environ["CONVERT_PYTHON"], *cmd[1:]]
            return real_run(cmd, *a, **kw)

        M.subprocess.run = run
        real_train = M.train_bpe

        def train_bpe(out_dir, *a, **kw):
            # transformers 5 names its fast tokenizer class TokenizersBackend, which 4.57.6
            # does not know; the files are the same tokenizers JSON
            n = real_train(out_dir, *a, **kw)
            cfg = out_dir / "tokenizer_config.json"
            data = json.loads(cfg.read_text())
            if data.get("tokenizer_class") == "TokenizersBackend":
                data["tokenizer_class"] = "PreTrainedTokenizerFast"
                cfg.write_text(json.dumps(data, indent=1))
            return n

        M.train_bpe = train_bpe
    specs = family_specs()
    names = args.only.split(",") if args.only else list(specs)
    with tempfile.TemporaryDirectory() as tmp:
        llama_dir = M.extract_converter(Path(tmp) / "sdist")
        for name in names:
            if "patch" in specs[name]:
                specs[name]["patch"]()
            hook = specs[name].get("before_convert")
            if hook:  # rewrite the saved checkpoint between save_pretrained and the converter
                real_convert = M.convert

                def convert(llama_dir, hf_dir, out, pre, hook=hook, real_convert=real_convert):
                    hook(hf_dir)
                    return real_convert(llama_dir, hf_dir, out, pre)

                M.convert = convert
            try:
                M.build(name, specs[name], llama_dir, Path(tmp) / "hf")
            finally:
                if hook:
                    M.convert = real_convert
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
