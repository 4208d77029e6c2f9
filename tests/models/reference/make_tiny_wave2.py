"""Tiny random-weight models of the wave-2 families (issue 16), made like make_tiny_models.py.

    /work/venv-ref/bin/python tests/models/reference/make_tiny_wave2.py [--only lfm2]

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
import math
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

# Parameter names (substrings) by what they do, across the wave-2 families.
QK_NAMES = ("q_proj", "k_proj")
RESIDUAL_NAMES = ("o_proj", "down_proj", "out_proj", ".w2.")  # write into the residual stream


def init_weights(model, family: str, seed: int, out_gain: float, qk_gain: float, res_gain: float) -> None:
    """make_tiny_models.init_weights, for the wave-2 parameter names: Gaussian weights
    divided by sqrt(fan-in); norms 1 +- 0.1; the logit spread `out_gain`, q/k `qk_gain`, and
    what writes into the residual stream `res_gain`. Depthwise conv kernels ([channels, 1,
    kernel]) are divided by sqrt(kernel); expert-selection biases are small (they only
    break near-ties between experts)."""
    gen = torch.Generator().manual_seed(seed)
    tied = model.config.tie_word_embeddings
    hidden = model.config.hidden_size
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            if "expert_bias" in name:
                param.copy_(0.05 * noise)
            elif param.dim() == 1:
                param.copy_(1.0 + 0.1 * noise)
            elif "embed_tokens" in name:
                param.copy_(noise * (out_gain / math.sqrt(hidden) if tied else 1.0))
            elif name.startswith("lm_head"):
                param.copy_(noise * out_gain / math.sqrt(param.shape[1]))
            elif param.dim() == 3:  # depthwise conv [channels, 1, kernel]
                param.copy_(noise / math.sqrt(param.shape[-1]))
            else:
                gain = qk_gain if any(k in name for k in QK_NAMES) else 1.0
                if any(k in name for k in RESIDUAL_NAMES):
                    gain = res_gain
                param.copy_(noise * gain / math.sqrt(param.shape[1]))


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
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated families")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    M.init_weights = init_weights  # build() calls the module's init_weights
    specs = family_specs()
    names = args.only.split(",") if args.only else list(specs)
    with tempfile.TemporaryDirectory() as tmp:
        llama_dir = M.extract_converter(Path(tmp) / "sdist")
        for name in names:
            M.build(name, specs[name], llama_dir, Path(tmp) / "hf")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
