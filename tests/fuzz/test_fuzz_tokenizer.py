"""Tokenizer inputs: random and adversarial texts (long runs of one character, special-token
fragments, mixed scripts and emoji, control characters, lone surrogates, huge inputs)
through every vocabulary at hand (llama.cpp's test vocabularies: SentencePiece, byte-level
BPE with many pre-tokenizers, WordPiece, Unigram; the tiny models' vocabularies), each in a
child process under a time and memory limit. Encoding, decoding and streaming
detokenization must finish without any exception but a `CeraError`.
"""

from __future__ import annotations

import random

from harness import REPO, Tally, case_numbers

PIECES = [" ", "  ", "\n", "\r\n", "\t", "a", "é", "中", "🙂", "\u200d", "\u0301", ".", "'", "<", ">", "|", "<s>",
          "</s>", "<|im_start|>", "<|im_end|>", "<0x0A>", "\u2581", "Ġ", "\\", "\\x", "\x00", "\x7f", "\ufeff",
          "\udcff", "1", "123456789", "don't", "<unk>", "[CLS]", "▁▁", "\u3000", "ﬁ", "İ", "ß"]  # fmt: skip


def text_for(n: int) -> str:
    rng = random.Random(n)
    r = rng.random()
    if r < 0.3:  # a long run of one piece
        return rng.choice(PIECES) * rng.choice([1000, 10_000, 60_000])
    if r < 0.6:
        return "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 3000)))
    if r < 0.8:
        return "".join(chr(rng.randint(0, 0x10FFFF)) for _ in range(rng.randint(1, 2000)))
    return "".join(rng.choice(PIECES) * rng.randint(1, 500) for _ in range(rng.randint(1, 50)))


def vocabularies(llama_vocab_dir) -> list[str]:
    files = sorted(str(p) for p in llama_vocab_dir.glob("*.gguf"))
    files += sorted(str(p) for p in (REPO / "tests" / "models" / "reference" / "tiny").glob("*.gguf"))
    return files


def test_tokenizer_inputs(request, pool, llama_vocab_dir):
    files = vocabularies(llama_vocab_dir)
    numbers = case_numbers(40, 4000, request.config.getoption("--run-slow"), offset=4_000_000)
    tally = Tally("tokenizer")
    cases = []
    for n in numbers:
        rng = random.Random(n)
        cases.append({"kind": "tokenize", "path": files[n % len(files)], "text": text_for(n), "timeout": 60,
                      "parse_special": rng.random() < 0.5, "add_special": rng.random() < 0.5, "case": n})  # fmt: skip
    for lo in range(0, len(cases), 200):
        part = cases[lo : lo + 200]
        for case, result in zip(part, pool.run(part), strict=True):
            tally.add({k: v for k, v in case.items() if k != "text"}, result)
    tally.check()
