"""A tiny random-weight LFM2-VL: a text model and its projector (mmproj) side by side.

    python tests/models/reference/make_tiny_lfm2_vl.py

Writes ``tiny/vl/tiny-lfm2-vl.gguf`` and ``tiny/vl/tiny-lfm2-vl-mmproj.gguf`` with gguf-py
alone (no transformers), under the names and keys llama.cpp's converter writes for
``Lfm2VlForConditionalGeneration`` (conversion/lfm2.py and gguf-py's tensor mapping in the
llama-cpp-python 0.3.36 sdist):

- the text model is ``tiny/tiny-lfm2.gguf`` (made by make_tiny_hybrid.py from transformers)
  with LFM2-VL's image tokens ``<|image_start|>``, ``<|image_end|>`` and
  ``<|img_thumbnail|>`` added as control tokens (three more rows of the tied embedding,
  seeded Gaussian rows of the same scale);
- the projector is a SigLIP2 NaFlex vision tower (patch 16, a 16 x 16 grid of learned
  position embeddings, LayerNorm pre-norm blocks, a GELU MLP, a final LayerNorm) and
  LFM2-VL's projector (pixel unshuffle by 2, LayerNorm, a GELU MLP to the text width).
  Matrices are F16 and vectors and the position table F32, as the converter stores an
  mmproj by default; the patch embedding is the converter's [C_out, 3, 16, 16] kernel.

Weights are seeded Gaussians scaled by 1/sqrt(fan-in), so activations stay of order one
through every block. The random text model answers an image with tokens that depend on
the image (the test checks two images give different tokens).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

HERE = Path(__file__).resolve().parent
TEXT_SRC = HERE / "tiny" / "tiny-lfm2.gguf"
OUT = HERE / "tiny" / "vl"
IMAGE_TOKENS = ("<|image_start|>", "<|image_end|>", "<|img_thumbnail|>")
CONTROL = 3  # gguf TokenType.CONTROL

VISION = dict(n_embd=32, n_ff=64, n_layer=2, n_head=2, patch=16, grid=16, merge=2, proj_hidden=64, eps=1e-6)
# the LFM2-VL chat template's shape: ChatML (the tiny text model's tokens)
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for part in m['content'] %}"
    "{% if part['type'] == 'image' %}<image>{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _field(reader, key):
    f = reader.fields[key]
    return f.contents()


def write_text_model(path: Path, rng: np.random.Generator) -> None:
    r = GGUFReader(str(TEXT_SRC))
    w = GGUFWriter(str(path), "lfm2")
    skip = {"general.architecture", "GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"}
    tokens = list(_field(r, "tokenizer.ggml.tokens")) + list(IMAGE_TOKENS)
    types = list(_field(r, "tokenizer.ggml.token_type")) + [CONTROL] * len(IMAGE_TOKENS)
    for key, f in r.fields.items():
        if key in skip or key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.chat_template"):
            continue
        value = f.contents()
        if key == "lfm2.vocab_size":
            value = len(tokens)
        vtype = f.types[0]
        if vtype == GGUFValueType.ARRAY:
            w.add_key_value(key, value, vtype, sub_type=f.types[-1])
        else:
            w.add_key_value(key, value, vtype)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_chat_template(CHAT_TEMPLATE)
    for t in r.tensors:
        data = np.array(t.data, dtype=np.float32)
        if t.name == "token_embd.weight":
            extra = rng.standard_normal((len(IMAGE_TOKENS), data.shape[1])).astype(np.float32) * float(data.std())
            data = np.concatenate([data, extra])
        w.add_tensor(t.name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_mmproj(path: Path, rng: np.random.Generator, n_embd_text: int, v: dict = VISION) -> None:
    C, F, P = v["n_embd"], v["n_ff"], v["patch"]
    w = GGUFWriter(str(path), "clip")
    w.add_type("mmproj")
    w.add_file_type(1)  # MOSTLY_F16
    w.add_bool("clip.has_vision_encoder", True)
    w.add_uint32("clip.vision.projection_dim", n_embd_text)
    w.add_uint32("clip.vision.image_size", P * v["grid"])
    w.add_uint32("clip.vision.patch_size", P)
    w.add_uint32("clip.vision.embedding_length", C)
    w.add_uint32("clip.vision.feed_forward_length", F)
    w.add_uint32("clip.vision.block_count", v["n_layer"])
    w.add_uint32("clip.vision.attention.head_count", v["n_head"])
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    w.add_string("clip.projector_type", "lfm2")
    w.add_float32("clip.vision.attention.layer_norm_epsilon", v["eps"])
    w.add_uint32("clip.vision.projector.scale_factor", v["merge"])
    w.add_bool("clip.use_gelu", True)

    def mat(n_out, n_in, gain=1.0):
        return (rng.standard_normal((n_out, n_in)) * gain / np.sqrt(n_in)).astype(np.float16)

    def vec(n, mean=0.0, spread=0.1):
        return (mean + spread * rng.standard_normal(n)).astype(np.float32)

    w.add_tensor("v.patch_embd.weight", (rng.standard_normal((C, 3, P, P)) / np.sqrt(3 * P * P)).astype(np.float16))
    w.add_tensor("v.patch_embd.bias", vec(C))
    # F32, as the converter keeps position embeddings (ggml_interpolate reads F32 only)
    w.add_tensor("v.position_embd.weight", (0.5 * rng.standard_normal((v["grid"] ** 2, C))).astype(np.float32))
    for i in range(v["n_layer"]):
        p = f"v.blk.{i}"
        w.add_tensor(f"{p}.ln1.weight", vec(C, 1.0))
        w.add_tensor(f"{p}.ln1.bias", vec(C))
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.add_tensor(f"{p}.{name}.weight", mat(C, C, 2.0 if name in ("attn_q", "attn_k") else 1.0))
            w.add_tensor(f"{p}.{name}.bias", vec(C))
        w.add_tensor(f"{p}.ln2.weight", vec(C, 1.0))
        w.add_tensor(f"{p}.ln2.bias", vec(C))
        w.add_tensor(f"{p}.ffn_up.weight", mat(F, C))
        w.add_tensor(f"{p}.ffn_up.bias", vec(F))
        w.add_tensor(f"{p}.ffn_down.weight", mat(C, F))
        w.add_tensor(f"{p}.ffn_down.bias", vec(C))
    w.add_tensor("v.post_ln.weight", vec(C, 1.0))
    w.add_tensor("v.post_ln.bias", vec(C))
    merged = C * v["merge"] ** 2
    w.add_tensor("mm.input_norm.weight", vec(merged, 1.0))
    w.add_tensor("mm.input_norm.bias", vec(merged))
    w.add_tensor("mm.1.weight", mat(v["proj_hidden"], merged))
    w.add_tensor("mm.1.bias", vec(v["proj_hidden"]))
    # the text model's embeddings are of order 1: the projector's output is scaled alike
    w.add_tensor("mm.2.weight", mat(n_embd_text, v["proj_hidden"], 1.0))
    w.add_tensor("mm.2.bias", vec(n_embd_text))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--seed", type=int, default=40)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    write_text_model(args.out / "tiny-lfm2-vl.gguf", rng)
    n_embd = int(_field(GGUFReader(str(TEXT_SRC)), "lfm2.embedding_length"))
    write_mmproj(args.out / "tiny-lfm2-vl-mmproj.gguf", rng, n_embd)
    print("wrote", *(str(p) for p in sorted(args.out.glob("*.gguf"))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
