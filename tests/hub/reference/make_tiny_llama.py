"""Make a tiny SafeTensors repository (llama, qwen2, qwen3, smollm3, granite, olmo2, phi2 or starcoder2) and what llama.cpp makes of it.

Two stages, each in the Python that has its tools:

1. ``--stage hf [--arch llama|qwen2|qwen3|smollm3|granite|olmo2|phi2|starcoder2]`` (a venv with torch 2.13.0 CPU, transformers 4.57.6 (the version llama.cpp's
   converter pins), tokenizers, safetensors, sentencepiece, numpy):
   trains a 512-token byte-level BPE tokenizer (Llama 3's pre-tokenizer) on text made
   here (Qwen 2's pre-tokenizer for qwen2/qwen3), builds the transformers model from ``config_for``, loads the weights of ``tiny_hf.weights()``
   into it, saves it with ``save_pretrained`` (bfloat16, two shards) into ``--work``, copies
   the text files to ``data/tiny-llama/``, records the SHA-256 of each saved tensor, and
   converts the folder with llama.cpp's ``convert_hf_to_gguf.py`` (from the
   llama-cpp-python 0.3.36 sdist: ``--sdist``) to an F32 GGUF, with transformers' logits.
   The tokenizer is not one llama.cpp's converter knows by hash, so its pre-tokenizer name
   is given (``llama-bpe`` or ``qwen2``, the names llama.cpp uses for these pre-tokenizers).
2. ``--stage llama`` (cera's venv, with llama-cpp-python 0.3.36): quantizes that GGUF with
   llama.cpp's own quantizer (``llama_model_quantize``, what ``llama-quantize`` runs) to
   each type, and writes ``tiny-llama.json``: per type the metadata, the tensor layout
   (name, shape, type) and each tensor's SHA-256, and llama.cpp's logits for a prompt
   (``tiny-<arch>.json``).

    /tmp/venv-ref/bin/python tests/hub/reference/make_tiny_llama.py --stage hf --arch qwen2 --work /tmp/tiny \
        --sdist llama_cpp_python-0.3.36.tar.gz   # pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36
    .venv/bin/python tests/hub/reference/make_tiny_llama.py --stage llama --arch qwen2 --work /tmp/tiny

3. ``--stage add --types Q3_K_M,...`` (cera's venv): adds types to an existing JSON without
   torch: cera's F32 conversion, checked equal to llama.cpp's recorded F32 file tensor by
   tensor, is quantized by ``llama_model_quantize`` (how Q3_K_L/M/S and Q2_K were added).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import tiny_hf  # noqa: E402

ARCHS = {
    "llama": ("LlamaForCausalLM", "llama", "LlamaConfig", "LlamaForCausalLM", "llama-bpe"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2", "Qwen2Config", "Qwen2ForCausalLM", "qwen2"),
    "qwen3": ("Qwen3ForCausalLM", "qwen3", "Qwen3Config", "Qwen3ForCausalLM", "qwen2"),
    "smollm3": ("SmolLM3ForCausalLM", "smollm3", "SmolLM3Config", "SmolLM3ForCausalLM", "llama-bpe"),
    "granite": ("GraniteForCausalLM", "granite", "GraniteConfig", "GraniteForCausalLM", "llama-bpe"),
    "olmo2": ("Olmo2ForCausalLM", "olmo2", "Olmo2Config", "Olmo2ForCausalLM", "llama-bpe"),
    "phi2": ("PhiForCausalLM", "phi", "PhiConfig", "PhiForCausalLM", "llama-bpe"),
    "starcoder2": ("Starcoder2ForCausalLM", "starcoder2", "Starcoder2Config", "Starcoder2ForCausalLM", "llama-bpe"),
}
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def out_path(arch: str) -> Path:
    return HERE / f"tiny-{arch}.json"


def config_for(arch: str) -> dict:
    hf_arch, model_type = ARCHS[arch][:2]
    c = dict(CONFIG, architectures=[hf_arch], model_type=model_type)
    if arch == "qwen2":
        c.update(attention_bias=True, use_sliding_window=False)
    if arch == "qwen3":
        c.update(head_dim=64, use_sliding_window=False)
    if arch == "smollm3":  # four layers: the fourth has no rotary embedding (NoPE), as every fourth does
        c.update(num_hidden_layers=4, no_rope_layer_interval=4, use_sliding_window=False, pad_token_id=None)
    if arch == "olmo2":
        c.update(pad_token_id=None)
    if arch == "phi2":  # Phi-2's shape: MLP 4x wide (llama.cpp writes 4 x n_embd), half-width rotary, GELU
        c.update(intermediate_size=4 * c["hidden_size"], num_key_value_heads=c["num_attention_heads"],
                 partial_rotary_factor=0.5, layer_norm_eps=1e-5, hidden_act="gelu_new", pad_token_id=None)
        del c["rms_norm_eps"], c["attention_bias"], c["mlp_bias"]
    if arch == "starcoder2":  # LayerNorms and projections with biases, a plain GELU MLP, no sliding window
        c.update(use_bias=True, norm_epsilon=1e-5, hidden_act="gelu_pytorch_tanh", sliding_window=None, pad_token_id=None)
        del c["rms_norm_eps"], c["attention_bias"], c["mlp_bias"]
    if arch == "granite":  # its four multipliers, none of them 1, so each one shows in the logits
        c.update(attention_multiplier=0.1, embedding_multiplier=2.0, residual_multiplier=0.5, logits_scaling=4.0)
    return c
PROMPT = "The quick brown fox jumps over the lazy dog. def main():"
TYPES = ["F32", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q6_K", "Q5_K_M", "Q5_K_S", "Q4_K_M", "Q4_K_S", "Q3_K_L", "Q3_K_M",
         "Q3_K_S", "Q2_K"]
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 512, "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
    "bos_token_id": 0, "eos_token_id": 1, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
    "torch_dtype": "bfloat16",
}  # fmt: skip
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start|>{{ m['role'] }}\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant\n{% endif %}"
)


def corpus() -> list[str]:
    import contextlib
    import inspect
    import io
    import string
    import textwrap

    with contextlib.redirect_stdout(io.StringIO()):
        import this
    zen = "".join(this.d.get(c, c) for c in this.s)
    return [zen, PROMPT, inspect.getsource(textwrap), inspect.getsource(string)]


def stage_hf(work: Path, sdist: Path, arch: str) -> None:
    import numpy as np
    import torch
    import transformers
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    work.mkdir(parents=True, exist_ok=True)
    hf = work / "hf"
    shutil.rmtree(hf, ignore_errors=True)
    specials = ["<|begin|>", "<|eot|>", "<|start|>", "<|end|>"]
    tok = Tokenizer(models.BPE(byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT if arch in ("qwen2", "qwen3") else LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])  # fmt: skip
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=CONFIG["vocab_size"], special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tok.train_from_iterator(corpus(), trainer)
    tok.post_processor = processors.TemplateProcessing(single="<|begin|> $A", pair="<|begin|> $A <|begin|> $B",
                                                       special_tokens=[("<|begin|>", 0)])  # fmt: skip
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin|>", eos_token="<|eot|>",
                                                add_bos_token=True, chat_template=CHAT_TEMPLATE)  # fmt: skip
    cfg = config_for(arch)
    config = getattr(transformers, ARCHS[arch][2])(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")})
    torch.manual_seed(0)
    model = getattr(transformers, ARCHS[arch][3])(config).to(torch.bfloat16)
    data = tiny_hf.data_dir(arch)
    data.mkdir(parents=True, exist_ok=True)
    (data / "config.json").write_text(json.dumps(cfg, indent=2))
    weights = tiny_hf.weights(arch)
    state = {n: torch.from_numpy(w.astype(np.int16).view(np.int16)).view(torch.bfloat16) for n, w in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=True)
    model.save_pretrained(hf, max_shard_size="1500KB", safe_serialization=True)
    fast.save_pretrained(hf)
    for p in sorted(data.iterdir()):
        p.unlink()
    for p in sorted(hf.iterdir()):
        if not p.name.endswith(".safetensors"):
            shutil.copy(p, data / p.name)
    from safetensors.torch import load_file

    saved = {}
    for p in sorted(hf.glob("*.safetensors")):
        saved.update({n: t.view(torch.int16).numpy().view(np.uint16) for n, t in load_file(str(p)).items()})
    shas = {n: hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest() for n, a in sorted(saved.items())}
    assert shas == tiny_hf.tensor_sha256(weights), "transformers saved other values than tiny_hf made"
    assert not missing and not unexpected
    ids = fast(PROMPT)["input_ids"]
    with torch.no_grad():
        logits = model.float()(torch.tensor([ids])).logits[0].numpy()
    # llama.cpp's converter, its pre-tokenizer name given (the tiny vocabulary has no known hash)
    with tarfile.open(sdist) as t:
        root = next(m.name.split("/")[0] for m in t.getmembers()) + "/vendor/llama.cpp/"
        members = [m for m in t.getmembers() if m.name == root + "convert_hf_to_gguf.py"
                   or m.name.startswith((root + "conversion/", root + "gguf-py/"))]  # fmt: skip
        t.extractall(work, members=members)
    llama_dir = work / root
    f32 = work / f"tiny-{arch}-F32.gguf"
    runner = (
        "import sys, runpy\n"
        f"sys.path.insert(0, {str(llama_dir / 'gguf-py')!r}); sys.path.insert(0, {str(llama_dir)!r})\n"
        "import conversion.base as base\n"
        f"base.TextModel.get_vocab_base_pre = lambda self, tokenizer: {ARCHS[arch][4]!r}\n"
        f"sys.argv = ['convert_hf_to_gguf.py', {str(hf)!r}, '--outtype', 'f32', '--outfile', {str(f32)!r}]\n"
        f"runpy.run_path({str(llama_dir / 'convert_hf_to_gguf.py')!r}, run_name='__main__')\n"
    )
    subprocess.run([sys.executable, "-c", runner], check=True)
    (work / f"hf-stage-{arch}.json").write_text(json.dumps({
        "prompt": PROMPT, "hf_ids": ids, "hf_logits_last": [round(float(v), 5) for v in logits[-1]],
        "tensor_sha256": shas, "transformers": transformers.__version__, "torch": torch.__version__,
        "tokenizer_vocab": tok.get_vocab_size(),
    }))  # fmt: skip


def _value(v):
    if isinstance(v, (bytes, bytearray)):
        return v.decode("utf-8", "replace")
    if hasattr(v, "tolist"):  # numeric arrays come back as numpy arrays
        return v.tolist()
    if isinstance(v, list):
        return [_value(x) for x in v]
    return v


def describe(path: Path) -> dict:
    from cera.formats.gguf import GGUFFile

    with GGUFFile(path) as g:
        meta = {k: _value(v) for k, v in g.metadata.items()}
        for big in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"):
            if big in meta:
                meta[big] = {"n": len(meta[big]), "sha256": hashlib.sha256(json.dumps(meta[big]).encode()).hexdigest()}
        tensors = [
            {"name": t.name, "shape": list(t.shape), "type": t.type_name,
             "sha256": hashlib.sha256(bytes(g.tensor_data(t.name))).hexdigest()}
            for t in g.tensors.values()
        ]  # fmt: skip
    return {"metadata": meta, "tensors": tensors}


def llama_logits(path: Path, ids: list[int]) -> list[float]:
    import llama_cpp

    llm = llama_cpp.Llama(str(path), n_ctx=128, n_threads=2, logits_all=True, verbose=False)
    llm.eval(ids)
    out = [round(float(v), 4) for v in llm.scores[len(ids) - 1]]
    llm.close()
    return out


def stage_llama(work: Path, arch: str) -> None:
    import ctypes

    import llama_cpp

    hf = json.loads((work / f"hf-stage-{arch}.json").read_text())
    f32 = work / f"tiny-{arch}-F32.gguf"
    result = {
        "made_by": "tests/hub/reference/make_tiny_llama.py (llama.cpp's convert_hf_to_gguf.py --outtype f32, then "
                   "llama_model_quantize, from llama-cpp-python 0.3.36)",
        "prompt": hf["prompt"], "ids": hf["hf_ids"], "hf_logits_last": hf["hf_logits_last"],
        "hf_tensor_sha256": hf["tensor_sha256"], "versions": {"transformers": hf["transformers"], "torch": hf["torch"],
                                                               "llama_cpp_python": llama_cpp.__version__},
        "types": {},
    }  # fmt: skip
    for name in TYPES:
        out = f32 if name == "F32" else work / f"tiny-{arch}-{name}.gguf"
        if name != "F32":
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{name}")
            params.nthread = 2
            rc = llama_cpp.llama_model_quantize(str(f32).encode(), str(out).encode(), ctypes.byref(params))
            assert rc == 0, f"llama_model_quantize {name} failed: {rc}"
        entry = describe(out)
        entry["llama_logits_last"] = llama_logits(out, hf["hf_ids"])
        result["types"][name] = entry
        print(name, "done", flush=True)
    out_path(arch).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")


def stage_add(work: Path, arch: str, types: list[str]) -> None:
    """Add types to an existing tiny-<arch>.json without the hf stage: the F32 file that
    llama.cpp's converter made is rebuilt by cera's converter, checked equal to the one
    recorded (metadata, layout and every tensor's SHA-256, so it is the same file), then
    quantized by llama_model_quantize as stage_llama does."""
    import ctypes

    import llama_cpp

    from cera.sources.convert import convert_folder

    result = json.loads(out_path(arch).read_text())
    src = work / f"tiny-{arch}-hf"
    tiny_hf.write_repo(src, arch)
    f32 = convert_folder(src, work / f"tiny-{arch}-F32.gguf", "F32", name="Hf")
    want = {k: result["types"]["F32"][k] for k in ("metadata", "tensors")}
    assert describe(f32) == want, "cera's F32 conversion is not llama.cpp's recorded one; run the hf stage instead"
    for name in types:
        out = work / f"tiny-{arch}-{name}.gguf"
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{name}")
        params.nthread = 2
        rc = llama_cpp.llama_model_quantize(str(f32).encode(), str(out).encode(), ctypes.byref(params))
        assert rc == 0, f"llama_model_quantize {name} failed: {rc}"
        entry = describe(out)
        entry["llama_logits_last"] = llama_logits(out, result["ids"])
        result["types"][name] = entry
        print(arch, name, "done", flush=True)
    out_path(arch).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", choices=["hf", "llama", "add"], required=True)
    ap.add_argument("--types", default="", help="add stage: comma-separated llama.cpp file types")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--sdist", type=Path)
    ap.add_argument("--arch", choices=sorted(ARCHS), default="llama")
    args = ap.parse_args()
    if args.stage == "hf":
        stage_hf(args.work, args.sdist, args.arch)
    elif args.stage == "add":
        stage_add(args.work, args.arch, [t for t in args.types.split(",") if t])
    else:
        stage_llama(args.work, args.arch)


if __name__ == "__main__":
    main()
