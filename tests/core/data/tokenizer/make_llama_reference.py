"""Record llama.cpp's tokenizer results, for cera's tokenizer tests.

Writes `llama_cpp_reference.json` beside this script: for each real model of the test
bundles (SmolLM2, Gemma 3 270M, Qwen2.5-Coder 0.5B) and each of llama.cpp's test
vocabularies (ggml-vocab-*.gguf), what llama.cpp (through llama-cpp-python) gives for
- llama_tokenize of every text of CORPUS, with (add_special, parse_special) in
  (False, False), (True, False), (True, True) for the real models and (False, False) for
  the vocabularies,
- llama_detokenize of those ids, with unparse_special False and True (remove_special False),
- llama_token_to_piece (special False and True) of a fixed sample of ids and of every
  special id,
- the special ids, add_bos/add_eos, and the end-of-generation set.

Run from the repository root, with llama-cpp-python installed:
    python tests/core/data/tokenizer/make_llama_reference.py
The tests compare cera with this file, and with llama.cpp live where it is installed.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "llama_cpp_reference.json"

REAL_MODELS = {
    "smollm2": "smollm2-135m-instruct-q4_1",
    "gemma3": "gemma3-270m-q4_k_m",
    "qwen05": "qwen2.5-coder-0.5b-instruct-q4_k_m",
}
VOCABS = (
    "aquila", "baichuan", "bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4", "gpt-2",
    "gpt-neox", "llama-bpe", "llama-spm", "mpt", "nomic-bert-moe", "phi-3", "qwen2", "qwen35", "refact", "starcoder",
)
SPECIAL_SLOTS = ("bos", "eos", "eot", "sep", "nl", "pad", "fim_pre", "fim_suf", "fim_mid", "fim_pad", "fim_rep",
                 "fim_sep", "mask")

CODE_PY = '''def fib(n: int) -> int:
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b  # tuple swap
    return a


if __name__ == "__main__":
\tprint([fib(i) for i in range(10)])
'''
CODE_C = "int main(int argc, char **argv) {\n    printf(\"%d\\n\", argc);\r\n    return 0; // done\n}\n"
CODE_MISC = (
    '{"key": [1, 2.5e-3, null, true], "nested": {"a": "b"}}\n'
    "<div class=\"x\">&nbsp;<br/></div>\n"
    "SELECT * FROM t WHERE id >= 42 AND name LIKE '%abc%';\n"
    "for f in *.txt; do echo \"$f\" | tr a-z A-Z; done && exit 0\n"
)

CORPUS = [
    "",
    " ",
    "\n",
    "Hello world",
    " Hello world",
    "Hello, world! How are you today?",
    "I'm sure you'll see it's the dog's bone; they'RE here, WE'VE won, he'd go, I'LL try.",
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!!!",
    CODE_PY,
    CODE_C,
    CODE_MISC,
    "    indented\n\tTabbed\n\n\n\nmany newlines\r\nwindows\r\n  \n \n trailing   ",
    "a  b   c    d     e      f       g\t\th\t \tend      ",
    "1234567890 3.14159 1,000,000 2024-01-31 0x1F 1e10 -42 +7 100% 3/4 ½ ² ³ ٣ ४",
    "中文测试：我想在苹果工作，你呢？这是一个长句子。",
    "日本語のテキストです。カタカナとひらがなと漢字。",
    "한국어 텍스트입니다. 안녕하세요!",
    "Привет, как дела? Съешь же ещё этих мягких французских булок.",
    "Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "العربية: مرحبا بالعالم، كيف حالك؟",
    "עברית: שלום עולם",
    "हिन्दी: नमस्ते दुनिया, आप कैसे हैं?",
    "ไทย: สวัสดีชาวโลก",
    "বাংলা ভাষা · தமிழ் மொழி · ქართული ენა · Հայերեն",
    "Tiếng Việt có dấu: Trường học, người Việt Nam.",
    "Äpfel, Öl, Übermaß, straße; İstanbul ıi; ÆØÅ æøå; œuvre; ǅ ǈ",
    "e\u0301 vs \u00e9, a\u0308\u0304, \u1e9b\u0323, Å vs \u212b, ﬁ ligature, ＦＵＬＬＷＩＤＴＨ　ｔｅｘｔ",
    "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 🦙🧠",
    "∀x∈ℝ: x² ≥ 0 ∧ √4 = 2; ∑ᵢ aᵢ → ∞; ≠ ≤ ≥ ± × ÷ € £ ¥ © ® ™ § ¶ † ‡ • … ‰",
    "zero\u200bwidth\u200cjoin\u200d, bom\ufeff, nbsp\u00a0here, ideo\u3000space, nel\u0085line, ls\u2028ps\u2029",
    "ctl\x01\x02\x1b[31mred\x1b[0m del\x7f unit\x1fsep \x0b\x0c",
    "private \ue000\uf8ff, unassigned \u0378\u0379, new in 16.0: \u1c89\u1c8a, plane 2: \U00020000\U0002a6d6",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
    "<s>[INST] hi [/INST] ok</s><unk><pad><bos><eos>",
    "<|endoftext|>text<|endoftext|> <|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "  <|im_end|>  spaces around  </s>  ",
    "<|im_end",
    "<<|im_end|>>",
    "'s't're've'm'll'd 'S'T'RE'VE'M'LL'D",
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    "!!!!!!!!!!!!!!??????......------======______********########",
    "https://example.com/path?query=1&x=%20y#frag user@mail.org C:\\Windows\\System32",
    " ( ) [ ] { } < > \" ' ` ~ ! @ # $ % ^ & * - + = | \\ / ? , . ; :",
    "The 2nd of May, 1990: 50$, 3€, 42km/h, 9:45am; 3×4=12; 10⁻⁹.",
]

# The texts of the long-text check: a mix of the corpus repeated.
LONG_TEXT = "\n".join(CORPUS[3:32]) * 3


def _sample_ids(n_vocab: int) -> list[int]:
    ids = set(range(min(n_vocab, 300)))
    step = max(1, n_vocab // 700)
    ids.update(range(0, n_vocab, step))
    ids.update(range(max(0, n_vocab - 50), n_vocab))
    return sorted(ids)


def record(path: Path, configs: list[tuple[bool, bool]], long_text: bool) -> dict:
    import llama_cpp

    llm = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)

    def tokenize(text: str, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        n_max = len(data) + 16
        buf = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, n_max, add_special, parse_special)
        assert n >= 0, n
        return list(buf[:n])

    def detokenize(ids: list[int], special: bool) -> str:
        arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
        size = 64 + 64 * len(ids)
        out = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_detokenize(vocab, arr, len(ids), out, size, False, special)
        assert n >= 0, n
        return out.raw[:n].hex()

    def piece(tid: int, special: bool) -> str:
        buf = ctypes.create_string_buffer(512)
        n = llama_cpp.llama_token_to_piece(vocab, tid, buf, 512, 0, special)
        assert n >= 0, n
        return buf.raw[:n].hex()

    special = {s: getattr(llama_cpp, f"llama_vocab_{s}")(vocab) for s in SPECIAL_SLOTS}
    special = {k: (v if v >= 0 else None) for k, v in special.items()}
    sample = sorted(set(_sample_ids(n_vocab)) | {v for v in special.values() if v is not None})
    rec = {
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "n_vocab": n_vocab,
        "special": special,
        "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
        "add_eos": bool(llama_cpp.llama_vocab_get_add_eos(vocab)),
        "eog": [i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)],
        "control": [i for i in range(n_vocab) if llama_cpp.llama_vocab_is_control(vocab, i)],
        "pieces": {str(i): [piece(i, False), piece(i, True)] for i in sample},
        "tokenize": {},
    }
    for add_special, parse_special in configs:
        key = f"{int(add_special)}{int(parse_special)}"
        rows = []
        for text in CORPUS:
            ids = tokenize(text, add_special, parse_special)
            rows.append({"ids": ids, "detok": detokenize(ids, False), "detok_special": detokenize(ids, True)})
        rec["tokenize"][key] = rows
    if long_text:
        rec["long_text_ids"] = tokenize(LONG_TEXT, True, True)
    return rec


def main() -> int:
    import llama_cpp

    from cera.sources import bundles

    result = {"llama_cpp_python": llama_cpp.__version__, "corpus": CORPUS, "models": {}, "vocabs": {}}
    for key, bundle in REAL_MODELS.items():
        path = bundles.fetch_file(bundle)
        print("model", key, path, file=sys.stderr)
        result["models"][key] = record(path, [(False, False), (True, False), (True, True)], long_text=True)
    vocab_dir = bundles.fetch("llama.cpp-vocab")
    for name in VOCABS:
        path = vocab_dir / f"ggml-vocab-{name}.gguf"
        print("vocab", name, file=sys.stderr)
        result["vocabs"][name] = record(path, [(False, False), (True, True)], long_text=False)
    OUT.write_text(json.dumps(result, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
