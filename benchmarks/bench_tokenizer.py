"""Tokenizer throughput of cera and of llama.cpp (llama-cpp-python) on the same GGUF files.

    python benchmarks/bench_tokenizer.py [--model NAME_OR_PATH ...] [--kib 512] [--repeat 3]

For each model (default: the three test models, SmolLM2 / Gemma 3 270M / Qwen2.5-Coder
0.5B, fetched as cera bundles) a large varied text (prose, code, many scripts, emoji,
white space runs; --kib KiB of UTF-8) is tokenized in one process by both, alternating,
best of --repeat runs each. cera is timed cold (a fresh Tokenizer, empty word cache) and
warm (the same Tokenizer again, as a server would be); llama.cpp keeps no such cache. A
"prompt" row times a typical 4,000-token prompt. The ids are compared, and the
load time of each tokenizer is printed too. Ratio = cera time / llama.cpp time (below 1:
cera is faster). Numbers taken on a shared machine are indicative only.
"""

from __future__ import annotations

import argparse
import platform
import time

DEFAULT_MODELS = ["smollm2-135m-instruct-q4_1", "gemma3-270m-q4_k_m", "qwen2.5-coder-0.5b-instruct-q4_k_m"]

_PARAGRAPHS = [
    "The quick brown fox jumps over the lazy dog. I'm sure you'll see it's the dog's bone; they're here.",
    "def fib(n: int) -> int:\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    '{"id": 12345, "name": "Zürich", "values": [1.5, 2.25, -3e-7], "ok": true}',
    "中文测试：我想在苹果工作，你呢？日本語のテキストです。한국어 텍스트입니다.",
    "Привет, как дела? Ελληνικά κείμενα. العربية: مرحبا بالعالم. हिन्दी: नमस्ते दुनिया.",
    "Emoji 🚀😶‍🌫️👍🏽👨‍👩‍👧‍👦🇫🇷 and math ∀x∈ℝ: x² ≥ 0, ∑ aᵢ → ∞.",
    "    indented    with     runs of   spaces\n\n\n\nand newlines\r\n\ttabs\t\there",
    "Numbers 1234567890 3.14159 1,000,000 2024-01-31; URLs https://example.com/a?b=c&d=%20.",
]


def make_text(n_bytes: int) -> str:
    parts, size, i = [], 0, 0
    while size < n_bytes:
        p = _PARAGRAPHS[i % len(_PARAGRAPHS)] + f" ({i})\n"
        parts.append(p)
        size += len(p.encode())
        i += 1
    return "".join(parts)


def best_of(fn, repeat: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", help="bundle name or GGUF path (repeatable)")
    ap.add_argument("--kib", type=int, default=512, help="size of the text in KiB (default 512)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    import llama_cpp

    from cera.sources import resolve

    text = make_text(args.kib * 1024)
    data = text.encode()
    print(f"text: {len(data) / 1024:.0f} KiB, {len(text)} characters; python {platform.python_version()}, "
          f"llama-cpp-python {llama_cpp.__version__}; best of {args.repeat}")
    header = f"{'model':<40} {'what':<12} {'cera s':>8} {'llama s':>8} {'cera MiB/s':>10} {'llama MiB/s':>11} {'ratio':>6}"
    print(header)
    print("-" * len(header))
    for source in args.model or DEFAULT_MODELS:
        bench_model(resolve(source, quiet=True).path, text, args.repeat)


def bench_model(path, text: str, repeat: int) -> None:
    import llama_cpp

    from cera.formats.gguf import GGUFFile
    from cera.text.tokenizer import Tokenizer

    data = text.encode()
    mib = len(data) / 2**20
    t = time.perf_counter()
    tok = Tokenizer.from_gguf(GGUFFile(path))
    cera_load = time.perf_counter() - t
    t = time.perf_counter()
    llm = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    llama_load = time.perf_counter() - t

    t_cold, ids_cold = best_of(lambda: Tokenizer(tok.vocab).encode(text), repeat)  # fresh caches
    t_warm, ids = best_of(lambda: tok.encode(text), repeat)
    t_llama, ref = best_of(lambda: llm.tokenize(data, add_bos=True, special=False), repeat)
    same = ids == ref and ids_cold == ref
    # a typical long prompt: the first 4,000 tokens' worth of text
    prompt = tok.decode(ref[:4000])
    t_pc, _ = best_of(lambda: Tokenizer(tok.vocab).encode(prompt), repeat)
    t_pl, _ = best_of(lambda: llm.tokenize(prompt.encode(), add_bos=True, special=False), repeat)
    llm.close()
    name = path.name[:40]
    print(f"{name:<40} {'load':<12} {cera_load:>8.3f} {llama_load:>8.3f} {'':>10} {'':>11} {cera_load / llama_load:>6.2f}")
    for what, tc in (("text cold", t_cold), ("text warm", t_warm)):
        print(f"{'':<40} {what:<12} {tc:>8.3f} {t_llama:>8.3f} {mib / tc:>10.2f} {mib / t_llama:>11.2f} "
              f"{tc / t_llama:>6.2f}")
    print(f"{'':<40} {'4k prompt':<12} {t_pc:>8.4f} {t_pl:>8.4f} {'':>10} {'':>11} {t_pc / t_pl:>6.2f}")
    print(f"{'':<40} {len(ref)} tokens; ids {'identical' if same else 'DIFFER'}")

if __name__ == "__main__":
    main()
