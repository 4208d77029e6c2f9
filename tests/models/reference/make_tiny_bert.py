"""A tiny random-weight BERT encoder (GGUF architecture `bert`), for the `bert` family's tests.

    /work/venv-ref/bin/python tests/models/reference/make_tiny_bert.py

No BERT-architecture GGUF is on PyPI (nomic-embed-text is `nomic-bert`), so, as for the
other tiny models (same venv: torch 2.13.0 CPU, transformers 4.57.6): train a small
WordPiece tokenizer (BERT's lower-casing normaliser and pre-tokenizer) on
make_tiny_models.corpus(), build a 2-layer `BertModel` with seeded random weights, mark
it CLS-pooled the sentence-transformers way (modules.json + 1_Pooling/config.json, which
the converter reads; nomic covers mean pooling), convert it with llama.cpp's
convert_hf_to_gguf.py from the llama-cpp-python 0.3.36 sdist (F32), and store
transformers' token ids and CLS vectors of make_embedding_reference.TEXTS in
tiny/tiny-bert.hf.json. Then ``make_embedding_reference.py --only tiny-bert`` stores
llama.cpp's vectors.

The weights are drawn so that different texts get clearly different vectors (BERT's own
0.02 initialisation makes every text's CLS state nearly the same after the LayerNorms,
which would let a wrong encoder pass): Gaussian matrices divided by sqrt(fan-in) (queries and keys 3x that), unit
Gaussian embeddings, LayerNorm gains 1 +- 0.1, biases 0.1. The activation is BERT's exact
(erf) GELU; llama.cpp and cera use the tanh approximation, which the tests' tolerance
against transformers allows for.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_embedding_reference as E  # noqa: E402
import make_tiny_models as M  # noqa: E402

SEED = 1234
NAME = "tiny-bert"
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def train_wordpiece(out_dir: Path, vocab_size: int) -> int:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True, clean_text=True,
                                                handle_chinese_chars=True)  # fmt: skip
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False)
    tok.train_from_iterator(M.corpus(), trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    fast = transformers.BertTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", sep_token="[SEP]",
                                          pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]",
                                          do_lower_case=True)  # fmt: skip
    fast.save_pretrained(out_dir)
    return len(tok.get_vocab())


def init_weights(model) -> None:
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                if name.endswith("weight"):
                    p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
                else:
                    p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif "embeddings" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                # queries and keys 3x: peaked attention, so the CLS state depends on the text
                gain = 3.0 if (".query." in name or ".key." in name) else 1.0
                p.copy_(gain * torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)


def main() -> int:
    torch.set_num_threads(1)
    out = HERE / "tiny" / f"{NAME}.gguf"
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = Path(tmp) / "hf"
        hf_dir.mkdir()
        n_vocab = train_wordpiece(hf_dir, 600)
        config = transformers.BertConfig(vocab_size=n_vocab, hidden_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, intermediate_size=128, max_position_embeddings=1024,
                                         type_vocab_size=2, hidden_act="gelu", layer_norm_eps=1e-12)  # fmt: skip
        torch.manual_seed(SEED)
        model = transformers.BertModel(config, add_pooling_layer=False).eval()
        init_weights(model)
        model.save_pretrained(hf_dir, safe_serialization=True)
        (hf_dir / "modules.json").write_text(json.dumps([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        ]))  # fmt: skip
        (hf_dir / "1_Pooling").mkdir()
        (hf_dir / "1_Pooling" / "config.json").write_text(
            json.dumps(
                {"word_embedding_dimension": 64, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}
            )
        )
        llama_dir = M.extract_converter(Path(tmp) / "sdist")
        # a new tokenizer's pre-tokenizer hash is in no table: name BERT's (bge's) instead
        command = M.convert(llama_dir, hf_dir, out, "bert-bge")

        tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
        cases = []
        for text in E.TEXTS:
            enc = tok(text, return_tensors="pt")
            with torch.no_grad():
                hidden = model(**enc).last_hidden_state[0].double().numpy()
            cls = hidden[0] / np.linalg.norm(hidden[0])
            cases.append({"text": text, "tokens": enc["input_ids"][0].tolist(),
                          "cls_normalized": [round(float(v), 7) for v in cls]})  # fmt: skip
    vecs = np.array([c["cls_normalized"] for c in cases])
    record = {
        "format": "cera-tiny-encoder/1",
        "name": NAME,
        "file": out.name,
        "hf_class": "BertModel",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "hf_config": json.loads(config.to_json_string()),
        "seed": SEED,
        "weights": "see make_tiny_bert.init_weights",
        "tokenizer": {"kind": "wordpiece", "n_vocab": n_vocab, "normalizer": "BertNormalizer(lowercase, strip_accents)"},
        "pooling": "cls",
        "converter": {"script": "vendor/llama.cpp/convert_hf_to_gguf.py from llama-cpp-python 0.3.36 sdist",
                      "command": command, "patched_pre_tokenizer": "bert-bge"},
        "max_cosine_between_texts": round(float((vecs @ vecs.T - 2 * np.eye(len(vecs))).max()), 4),
        "hf_reference": {"api": "BertModel(**tokenizer(text)).last_hidden_state[0, 0], L2-normalised",
                         "cases": cases},
    }  # fmt: skip
    (HERE / "tiny" / f"{NAME}.hf.json").write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n")
    print(f"{NAME}: {out} {out.stat().st_size} bytes, vocab {n_vocab}, "
          f"max cosine between texts {record['max_cosine_between_texts']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
