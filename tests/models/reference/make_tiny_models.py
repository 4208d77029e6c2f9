"""Build tiny random-weight models with HF transformers and convert them to GGUF.

    /work/venv-ref/bin/python tests/models/reference/make_tiny_models.py [--only qwen3,gemma2]

Needs its own venv: torch 2.13.0 (CPU), transformers 4.57.6 (the version llama.cpp's
converter pins), tokenizers, sentencepiece, protobuf<5, jinja2, and the llama-cpp-python
0.3.36 wheel (to check each file in llama.cpp against transformers). See README.md.

For each family (qwen3, gemma2, phi3, olmo2, mistral, granite):
  1. train a small tokenizer (byte-level BPE with `tokenizers`, or a SentencePiece BPE
     model) on text made here;
  2. build the model from a config with the family's features on, with seeded random
     weights scaled so that greedy decoding is not degenerate (chosen from a small grid by
     the margins of HF's own greedy decoding);
  3. convert it with llama.cpp's convert_hf_to_gguf.py from the llama-cpp-python 0.3.36
     sdist (its own gguf-py first on sys.path) to an F32 GGUF in tiny/;
  4. check it in llama.cpp against transformers (the same token ids, teacher forced) and
     write tiny/<name>.hf.json, transformers' reference logits.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import torch
import transformers

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import prompts as P  # noqa: E402

SDIST = Path("/work/models/_downloads/llama-cpp-python-0.3.36/llama_cpp_python-0.3.36.tar.gz")
TINY_DIR = HERE / "tiny"
SEED = 1234

QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


# -- text for the tokenizers -----------------------------------------------------------


def corpus() -> list[str]:
    """English prose and a little code: the prompts' own text, Python's Zen and the
    source of a few standard-library modules (so code tokens exist)."""
    import contextlib
    import io
    import string

    with contextlib.redirect_stdout(io.StringIO()):
        import this  # its text is rot13 in this.s

    zen = "".join(this.d.get(c, c) for c in this.s)
    lines = [P.LONG_TEXT, zen, *P.TINY_PROMPTS.values()]
    lines += [t for k, t in P.RAW_PROMPTS.items() if k.startswith(("en_", "code_", "num_", "list_", "json_", "math_"))]
    for module in (textwrap, string, json.encoder, argparse):
        lines.append(inspect.getsource(module))
    out = []
    for block in lines:
        out.extend(line for line in block.splitlines() if line.strip())
    return out


def train_bpe(out_dir: Path, vocab_size: int, specials: list[str], regex: str | None, roles: dict) -> int:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    if regex is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(regex), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, **roles)
    fast.save_pretrained(out_dir)
    return len(tok.get_vocab())


def train_spm(out_dir: Path, vocab_size: int, ids: dict, add_dummy_prefix: bool,
              special_symbols: tuple[str, ...] = ()) -> int:
    """A SentencePiece BPE model with byte fallback (as Llama's and Gemma's are).

    `special_symbols` become user-defined pieces, and tokenizer_config.json marks them
    special, so the converter types them CONTROL (Phi-3's <|endoftext|>, <|end|>; Gemma's
    <start_of_turn>, <end_of_turn>)."""
    import sentencepiece as spm

    prefix = out_dir / "spm"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()), model_prefix=str(prefix), vocab_size=vocab_size, model_type="bpe",
        byte_fallback=True, character_coverage=1.0, split_digits=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=add_dummy_prefix, allow_whitespace_only_pieces=True,
        user_defined_symbols=list(special_symbols), minloglevel=2, **ids,
    )
    shutil.move(f"{prefix}.model", out_dir / "tokenizer.model")
    Path(f"{prefix}.vocab").unlink()
    sp = spm.SentencePieceProcessor(model_file=str(out_dir / "tokenizer.model"))
    if special_symbols:
        decoder = {str(sp.piece_to_id(t)): {"content": t, "special": True} for t in special_symbols}
        (out_dir / "tokenizer_config.json").write_text(json.dumps(
            {"tokenizer_class": "LlamaTokenizer", "added_tokens_decoder": decoder}, indent=1))
    return sp.vocab_size()


# -- the families ----------------------------------------------------------------------

COMMON = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=1024, rms_norm_eps=1e-6)


def family_specs() -> dict[str, dict]:
    """name -> how to build it. `tokenizer` is (kind, args); `config` the HF config."""
    return {
        "qwen3": dict(
            cls="Qwen3ForCausalLM", pre="qwen2",
            tokenizer=("bpe", dict(vocab_size=512, specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                   regex=QWEN2_REGEX, roles=dict(eos_token="<|endoftext|>", pad_token="<|endoftext|>"))),
            config=transformers.Qwen3Config(**COMMON, num_hidden_layers=3, head_dim=32, rope_theta=1_000_000.0,
                                            tie_word_embeddings=True, bos_token_id=None, eos_token_id=0, pad_token_id=0),
            features="QK-norm (per-head RMSNorm on q and k), head_dim 32 != hidden/heads 16, GQA 4/2, tied embeddings",
        ),
        "gemma2": dict(
            cls="Gemma2ForCausalLM", pre=None,
            tokenizer=("spm", dict(vocab_size=512, add_dummy_prefix=False,
                                   ids=dict(pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>",
                                            eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>"),
                                   special_symbols=("<start_of_turn>", "<end_of_turn>"))),
            config=transformers.Gemma2Config(**{**COMMON, "num_attention_heads": 4, "num_key_value_heads": 2},
                                             num_hidden_layers=4, head_dim=32, query_pre_attn_scalar=32,
                                             sliding_window=16, attn_logit_softcapping=10.0,
                                             final_logit_softcapping=15.0, hidden_activation="gelu_pytorch_tanh",
                                             tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=2),
            features=("embedding scaled by sqrt(hidden), sandwich norms (pre/post attention and FFN), "
                      "(1+w) RMSNorm, GeGLU, sliding window 16 on even layers (prompts are longer), "
                      "attention soft-cap 10, final soft-cap 15, head_dim 32, GQA 4/2, tied embeddings"),
        ),
        "phi3": dict(
            cls="Phi3ForCausalLM", pre=None,
            # llama.cpp requires <|endoftext|> in a vocabulary of a model named phi3.
            tokenizer=("spm", dict(vocab_size=512, add_dummy_prefix=True,
                                   ids=dict(unk_id=0, bos_id=1, eos_id=2, pad_id=-1),
                                   special_symbols=("<|endoftext|>", "<|end|>", "<|user|>", "<|assistant|>"))),
            config=transformers.Phi3Config(**COMMON, num_hidden_layers=3, original_max_position_embeddings=1024,
                                           rope_theta=10000.0, sliding_window=2047, resid_pdrop=0.0,
                                           embd_pdrop=0.0, attention_dropout=0.0, tie_word_embeddings=False,
                                           bos_token_id=1, eos_token_id=3, pad_token_id=None),
            features=("fused qkv_proj and gate_up_proj, GQA 4/2, untied output; sliding_window 2047 "
                      "(as Phi-3-mini; llama.cpp ignores Phi-3 SWA, and every test context is shorter)"),
        ),
        "olmo2": dict(
            cls="Olmo2ForCausalLM", pre="gpt-2",
            tokenizer=("bpe", dict(vocab_size=512, specials=["<|endoftext|>", "<|pad|>"], regex=None,
                                   roles=dict(eos_token="<|endoftext|>", pad_token="<|pad|>"))),
            config=transformers.Olmo2Config(**COMMON, num_hidden_layers=3, rope_theta=500000.0,
                                            tie_word_embeddings=False, bos_token_id=None, eos_token_id=0,
                                            pad_token_id=1),
            features=("post-norms only (attention and FFN outputs normed before the residual add), "
                      "QK-norm over the whole q and k projections, GQA 4/2, untied output"),
        ),
        "mistral": dict(
            cls="MistralForCausalLM", pre=None,
            tokenizer=("spm", dict(vocab_size=512, add_dummy_prefix=True,
                                   ids=dict(unk_id=0, bos_id=1, eos_id=2, pad_id=-1))),
            config=transformers.MistralConfig(**COMMON, num_hidden_layers=3, head_dim=16, rope_theta=1_000_000.0,
                                              sliding_window=None, tie_word_embeddings=False,
                                              bos_token_id=1, eos_token_id=2),
            features=("llama architecture in GGUF (MistralForCausalLM converts to 'llama'), SentencePiece "
                      "vocab, GQA 4/2; no sliding window: the converter drops it (see README)"),
        ),
        "granite": dict(
            cls="GraniteForCausalLM", pre="gpt-2",
            tokenizer=("bpe", dict(vocab_size=512, specials=["<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>"],
                                   regex=None, roles=dict(eos_token="<|end_of_text|>", bos_token="<|end_of_text|>",
                                                          pad_token="<|end_of_text|>"))),
            config=transformers.GraniteConfig(**COMMON, num_hidden_layers=3, rope_theta=10000.0,
                                              embedding_multiplier=12.0, attention_multiplier=0.15,
                                              residual_multiplier=0.22, logits_scaling=2.0,
                                              tie_word_embeddings=True, bos_token_id=0, eos_token_id=0,
                                              pad_token_id=0),
            res_gains=(10.0, 30.0, 60.0),  # residual_multiplier 0.22 shrinks what each block adds
            features=("granite multipliers: embedding 12, attention 0.15 (instead of 1/sqrt(head_dim)), "
                      "residual 0.22, logits divided by 2; GQA 4/2, tied embeddings"),
        ),
    }


# -- weights ---------------------------------------------------------------------------


def init_weights(model, family: str, seed: int, out_gain: float, qk_gain: float, res_gain: float) -> None:
    """Seeded Gaussian weights, scaled by fan-in so activations keep unit size.

    The logits get a spread of about `out_gain` (the output layer, or the embedding where
    it is tied); q/k projections get `qk_gain` (sharper attention) and the projections
    that write into the residual stream (o_proj, down_proj) `res_gain`, so that a token's
    own embedding does not dominate the last hidden state (with tied embeddings that
    makes the model repeat its input token forever). Norm weights get noise so that
    their values matter."""
    gen = torch.Generator().manual_seed(seed)
    tied = model.config.tie_word_embeddings
    hidden = model.config.hidden_size
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            post_norm = family in ("gemma2", "olmo2") and ("post_attention_layernorm" in name
                                                           or "post_feedforward_layernorm" in name)
            if param.dim() == 1:
                # A post-norm (gemma2's sandwich norms, olmo2's) sets the size of what a
                # block adds to the residual stream, so it carries `res_gain`.
                scale = res_gain if post_norm else 1.0
                # Gemma's RMSNorm multiplies by (1 + w): w near scale - 1 there.
                if family == "gemma2":
                    param.copy_(scale - 1.0 + 0.1 * noise)
                else:
                    param.copy_(scale * (1.0 + 0.1 * noise))
            elif "embed_tokens" in name:
                param.copy_(noise * (out_gain / math.sqrt(hidden) if tied else 1.0))
            elif name.startswith("lm_head"):
                param.copy_(noise * out_gain / math.sqrt(param.shape[1]))
            else:
                if any(k in name for k in ("q_proj", "k_proj", "qkv_proj")):
                    gain = qk_gain
                elif any(k in name for k in ("o_proj", "down_proj")):
                    gain = res_gain
                else:
                    gain = 1.0
                param.copy_(noise * gain / math.sqrt(param.shape[1]))


def hf_logits(model, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=False)
    return out.logits[0].double().numpy()


def hf_greedy(model, ids: list[int], n: int) -> tuple[list[int], list[float]]:
    """Greedy decoding in transformers (with its KV cache), and each step's top-2 margin."""
    out_ids, margins = [], []
    past = None
    feed = torch.tensor([ids])
    with torch.no_grad():
        for _ in range(n):
            out = model(feed, past_key_values=past, use_cache=True)
            past = out.past_key_values
            row = out.logits[0, -1].double().numpy()
            top = np.sort(row)[-2:]
            margins.append(float(top[1] - top[0]))
            out_ids.append(int(np.argmax(row)))
            feed = torch.tensor([[out_ids[-1]]])
    return out_ids, margins


def quality(model, prompts_ids: list[list[int]]) -> dict:
    low, total, distinct = 0, 0, []
    for ids in prompts_ids:
        out, margins = hf_greedy(model, ids, 32)
        low += sum(m < 0.5 for m in margins)
        total += len(margins)
        distinct.append(len(set(out)))
    return {"frac_margin_below_0_5": low / total, "min_distinct_tokens": min(distinct),
            "mean_distinct_tokens": sum(distinct) / len(distinct)}


# -- conversion ------------------------------------------------------------------------


def extract_converter(dest: Path) -> Path:
    """convert_hf_to_gguf.py, its conversion/ package and gguf-py, from the sdist."""
    root = "llama_cpp_python-0.3.36/vendor/llama.cpp/"
    with tarfile.open(SDIST) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(root) and (
            m.name == root + "convert_hf_to_gguf.py" or m.name.startswith(root + "conversion/")
            or m.name.startswith(root + "gguf-py/"))]
        tar.extractall(dest, members=members, filter="data")
    return dest / root


CONVERT_WRAPPER = """
import sys
llama_dir, pre = sys.argv[1], sys.argv[2]
sys.path[:0] = [llama_dir, llama_dir + '/gguf-py']
import conversion.base as base
if pre != '-':
    # Our tokenizer is new, so its pre-tokenizer hash is in no table: name the
    # pre-tokenizer whose regex it was trained with instead of refusing.
    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
sys.argv = ['convert_hf_to_gguf.py'] + sys.argv[3:]
import runpy
runpy.run_path(llama_dir + '/convert_hf_to_gguf.py', run_name='__main__')
"""


def convert(llama_dir: Path, hf_dir: Path, out: Path, pre: str | None) -> list[str]:
    cmd = [sys.executable, "-c", CONVERT_WRAPPER, str(llama_dir), pre or "-", str(hf_dir),
           "--outtype", "f32", "--outfile", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return ["convert_hf_to_gguf.py", "<hf dir>", "--outtype", "f32", "--outfile", out.name]


# -- checking the GGUF against transformers --------------------------------------------


def top10(row: np.ndarray) -> list[list]:
    order = sorted(np.argsort(-row)[:40].tolist(), key=lambda t: (-row[t], t))[:10]
    return [[int(t), round(float(row[t]), 4)] for t in order]


def check_against_hf(gguf_path: Path, model) -> dict:
    from llamacpp_driver import ContextSettings, LlamaCppModel
    from make_reference import greedy

    lm = LlamaCppModel(gguf_path, ContextSettings(n_ctx=1024))
    cases = []
    for pid, text in P.TINY_PROMPTS.items():
        ids = lm.tokenize(text, add_special=True, parse_special=False)
        steps, _, _ = greedy(lm, ids)
        cont = [s["token"] for s in steps]
        seq = ids + cont[:-1]
        hf = hf_logits(model, seq)
        lm.reset()
        lc = lm.eval(seq, all_logits=True).astype(np.float64)
        diff = np.abs(hf - lc).max(axis=1)
        hf_cont, hf_margins = hf_greedy(model, ids, len(cont))
        agree = next((i for i, (a, b) in enumerate(zip(hf_cont, cont, strict=False)) if a != b), len(cont))
        cases.append({
            "id": pid,
            "prompt_tokens": ids,
            "hf_last_prompt_position_top10": top10(hf[len(ids) - 1]),
            "llamacpp_last_prompt_position_top10": top10(lc[len(ids) - 1]),
            "hf_greedy_tokens": hf_cont,
            "llamacpp_greedy_tokens": cont,
            "greedy_tokens_equal_up_to": agree,
            "hf_min_margin": round(min(hf_margins), 4),
            "teacher_forced_max_abs_diff": round(float(diff.max()), 5),
            "teacher_forced_argmax_agreement": f"{int((hf.argmax(1) == lc.argmax(1)).sum())}/{len(seq)}",
        })
    lm.close()
    return {"llama_cpp_flash_attn": "auto", "cases": cases}


# -- main ------------------------------------------------------------------------------


def build(name: str, spec: dict, llama_dir: Path, work: Path) -> dict:
    hf_dir = work / name
    hf_dir.mkdir(parents=True)
    kind, targs = spec["tokenizer"]
    config = spec["config"]
    if kind == "bpe":
        n_vocab = train_bpe(hf_dir, **targs)
        tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
        encode = lambda text: tok(text)["input_ids"]  # noqa: E731
    else:
        n_vocab = train_spm(hf_dir, **targs)
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=str(hf_dir / "tokenizer.model"))
        bos = targs["ids"]["bos_id"]
        encode = lambda text: [bos] + sp.encode(text)  # noqa: E731
    config.vocab_size = n_vocab
    config.architectures = [spec["cls"]]
    config.torch_dtype = "float32"
    config._attn_implementation = "eager"
    cls = getattr(transformers, spec["cls"])
    prompt_ids = [encode(t) for t in P.TINY_PROMPTS.values()]

    # Pick the weight scales from a small grid: the fewest low-margin greedy steps,
    # among settings whose continuations do not collapse onto a few tokens.
    best = None
    tune_ids = prompt_ids[:-1]  # the long prompt costs most and adds little here
    for out_gain in (3.0, 5.0, 8.0):
        for qk_gain in (1.5,):
            for res_gain in spec.get("res_gains", (3.0, 6.0, 10.0)):
                model = cls(config).eval()
                init_weights(model, name, SEED, out_gain, qk_gain, res_gain)
                q = quality(model, tune_ids)
                # Few low-margin steps, but not bought with a continuation that loops
                # on one or two tokens.
                score = (q["frac_margin_below_0_5"] + 0.1 * max(0.0, 8 - q["mean_distinct_tokens"])
                         + 0.1 * max(0, 4 - q["min_distinct_tokens"]))
                print(f"  {name} out_gain={out_gain} qk_gain={qk_gain} res_gain={res_gain}: {q}", flush=True)
                if best is None or score < best[0]:
                    best = (score, out_gain, qk_gain, res_gain)
    _, out_gain, qk_gain, res_gain = best
    model = cls(config).eval()
    init_weights(model, name, SEED, out_gain, qk_gain, res_gain)
    q = quality(model, prompt_ids)
    model.save_pretrained(hf_dir, safe_serialization=True)

    TINY_DIR.mkdir(exist_ok=True)
    out = TINY_DIR / f"tiny-{name}.gguf"
    command = convert(llama_dir, hf_dir, out, spec["pre"])
    check = check_against_hf(out, model)
    record = {
        "format": "cera-tiny-model/1",
        "name": out.stem,
        "family": name,
        "hf_class": spec["cls"],
        "features": spec["features"],
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "hf_config": json.loads(config.to_json_string()),
        "attn_implementation": "eager",
        "seed": SEED,
        "weights": {"scheme": "see make_tiny_models.init_weights", "out_gain": out_gain, "qk_gain": qk_gain,
                    "res_gain": res_gain},
        "hf_greedy_quality": q,
        "tokenizer": {"kind": kind, **{k: v for k, v in targs.items() if k != "regex"},
                      "regex": targs.get("regex"), "n_vocab": n_vocab},
        "converter": {"script": "vendor/llama.cpp/convert_hf_to_gguf.py from llama-cpp-python 0.3.36 sdist",
                      "command": command,
                      "patched_pre_tokenizer": spec["pre"]},
        "hf_reference": check,
    }
    (TINY_DIR / f"{out.stem}.hf.json").write_text(json.dumps(record, indent=1) + "\n")
    worst = max(c["teacher_forced_max_abs_diff"] for c in check["cases"])
    print(f"{name}: {out} {out.stat().st_size} bytes; HF vs llama.cpp max abs diff {worst}; "
          f"greedy equal up to {[c['greedy_tokens_equal_up_to'] for c in check['cases']]}", flush=True)
    return record


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated families")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    specs = family_specs()
    names = args.only.split(",") if args.only else list(specs)
    with tempfile.TemporaryDirectory() as tmp:
        llama_dir = extract_converter(Path(tmp) / "sdist")
        for name in names:
            build(name, specs[name], llama_dir, Path(tmp) / "hf")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
