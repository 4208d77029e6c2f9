"""The tokenizer on hostile vocabularies and on long runs of one character.

A vocabulary comes from the model file, the text from whoever sends it: no combination may
hang the tokenizer or make its time or memory grow faster than the text. "Linear" is
checked by CPU time at two lengths (a quadratic path would show a ratio near 16 for 4x the
text; the bound leaves room for a loaded machine), memory by tracemalloc's peak per
character.
"""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest

from cera.formats.gguf import GGUFFile
from cera.text.tokenizer import Tokenizer

LINEAR_RATIO = 8.0  # CPU time for 4x the text, over the time for 1x


def cpu_seconds(tok: Tokenizer, text: str) -> float:
    # the best of three: on a shared machine one run's CPU time can be inflated by another
    # process on the sibling hyperthread (a single-shot 25k/100k pair once read 8.5)
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        tok.encode(text, add_special=False)
        best = min(best, time.process_time() - t0)
    return best


def assert_linear(tok: Tokenizer, unit: str, n: int) -> None:
    tok.encode(unit * 100, add_special=False)  # warm the caches
    small = max(cpu_seconds(tok, unit * n), 1e-3)
    large = cpu_seconds(tok, unit * (4 * n))
    assert large / small < LINEAR_RATIO, f"{unit!r}: {small:.3f} s for {n}, {large:.3f} s for {4 * n}"


def rwkv_vocab(tokens: list[str]) -> dict:
    return {
        "tokenizer.ggml.model": "rwkv",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": np.ones(len(tokens), np.int32),
    }


def test_rwkv_token_that_unescapes_to_nothing_does_not_hang():
    """Reproduction: SmolLM2's own "\\\\" token under tokenizer.ggml.model = "rwkv" unescapes
    to no bytes, and matching it never moved on."""
    tok = Tokenizer.from_metadata(rwkv_vocab(["\\", "a", "b", "ab"]))
    t0 = time.monotonic()
    assert tok.encode("abba", add_special=False) == [3, 2, 1]
    assert time.monotonic() - t0 < 1


def test_rwkv_on_a_real_vocabulary_relabelled(smollm2_path):
    """The reproduction itself: SmolLM2's vocabulary read as RWKV's ends, for any text."""
    with GGUFFile(smollm2_path) as g:
        meta = dict(g.metadata)
    meta["tokenizer.ggml.model"] = "rwkv"
    tok = Tokenizer.from_metadata(meta)
    ids = tok.encode("Hello world \\ and a backslash", add_special=False)
    assert ids and all(isinstance(i, int) for i in ids)
    assert_linear(tok, "a\\", 20_000)


def test_rwkv_ignores_absurdly_long_tokens():
    long = "a" * 100_000
    tok = Tokenizer.from_metadata(rwkv_vocab(["a", long + "b"]))
    assert_linear(tok, "a", 20_000)


def test_wordpiece_long_word_is_linear(llama_vocab_dir):
    """Reproduction: a long word made WordPiece try every end from the word's end (cubic)."""
    with GGUFFile(llama_vocab_dir / "ggml-vocab-bert-bge.gguf") as g:
        tok = Tokenizer.from_gguf(g)
    assert_linear(tok, "a", 20_000)
    assert_linear(tok, "ab", 10_000)


@pytest.mark.parametrize("unit", [" ", "a", "\n", ".", "é", "<", "🙂"])
def test_bpe_long_runs_are_linear(smollm2_path, unit):
    with GGUFFile(smollm2_path) as g:
        tok = Tokenizer.from_gguf(g)
    assert_linear(tok, unit, 25_000)


@pytest.mark.parametrize("unit", [" ", "a", ".", "<"])
def test_spm_long_runs_are_linear(gemma3_path, unit):
    with GGUFFile(gemma3_path) as g:
        tok = Tokenizer.from_gguf(g)
    assert_linear(tok, unit, 25_000)


def spaces_in_bounded_memory(path, n: int) -> None:
    with GGUFFile(path) as g:
        tok = Tokenizer.from_gguf(g)
    text = " " * n
    tracemalloc.start()
    try:
        ids = tok.encode(text, add_special=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tok.decode(ids) == text
    assert peak < 250 * len(text), f"peak {peak / 2**20:.0f} MiB for {len(text)} characters"


def test_spaces_in_bounded_memory(smollm2_path):
    """Memory is about 200 bytes a character at most (one queue entry and a few list
    slots per character)."""
    spaces_in_bounded_memory(smollm2_path, 1 << 16)


@pytest.mark.slow
def test_a_megabyte_of_spaces_in_bounded_memory(smollm2_path):
    """Reproduction: 1 MB of spaces took 9-13 s and 480 MB."""
    spaces_in_bounded_memory(smollm2_path, 1 << 20)
