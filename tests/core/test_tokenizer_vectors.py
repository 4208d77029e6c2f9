"""cera's tokenizers against llama.cpp's own tokenizer test vectors and recorded outputs.

- llama.cpp ships `ggml-vocab-*.gguf` with `.inp`/`.out` files (its tests/test-tokenizer-0):
  cases separated by a "__ggml_vocab_test__" line, one line of expected ids per case,
  tokenized with add_special=false, parse_special=false. Every vocabulary cera claims
  must pass all of them.
- For every vocabulary (including those shipped without vectors) llama.cpp's results on
  a varied corpus were recorded by data/tokenizer/make_llama_reference.py: ids, detokenized
  text, pieces, special ids and the end-of-generation set.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from cera.errors import TokenizerError
from cera.formats.gguf import GGUFFile
from cera.text.tokenizer import Tokenizer

sys.path.insert(0, str(Path(__file__).parent / "data" / "tokenizer"))
from reference_check import check_against_record  # noqa: E402

sys.path.pop(0)

DATA = Path(__file__).parent / "data" / "tokenizer"
REFERENCE = json.loads((DATA / "llama_cpp_reference.json").read_text())
SEPARATOR = "\n__ggml_vocab_test__\n"

# Every vocabulary in llama.cpp's test set (those with vectors and those without).
ALL_VOCABS = sorted(REFERENCE["vocabs"])
# Vocabularies cera does not tokenize, with the reason (none at present).
UNSUPPORTED: dict[str, str] = {}


def read_vectors(gguf: Path) -> list[tuple[str, list[int]]]:
    raw = gguf.with_name(gguf.name + ".inp").read_bytes().decode("utf-8")
    inputs = raw.split(SEPARATOR)
    if inputs and inputs[-1] == "":
        inputs.pop()
    lines = gguf.with_name(gguf.name + ".out").read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    assert len(inputs) == len(lines), f"{gguf.name}: {len(inputs)} inputs but {len(lines)} outputs"
    return [(text, [int(t) for t in line.split()]) for text, line in zip(inputs, lines, strict=True)]


_cache: dict[str, Tokenizer] = {}


def load(vocab_dir: Path, name: str) -> Tokenizer:
    if name in UNSUPPORTED:
        pytest.skip(f"ggml-vocab-{name}: {UNSUPPORTED[name]}")
    if name not in _cache:
        _cache[name] = Tokenizer.from_gguf(GGUFFile(vocab_dir / f"ggml-vocab-{name}.gguf"))
    return _cache[name]


@pytest.mark.parametrize("name", ALL_VOCABS)
def test_llama_cpp_test_vectors(llama_vocab_dir, name):
    gguf = llama_vocab_dir / f"ggml-vocab-{name}.gguf"
    if not gguf.with_name(gguf.name + ".inp").exists():
        pytest.skip(f"llama.cpp ships no test vectors for ggml-vocab-{name} (its recorded corpus is checked below)")
    tok = load(llama_vocab_dir, name)
    cases = read_vectors(gguf)
    assert len(cases) >= 40
    failures = []
    for text, expected in cases:
        got = tok.encode(text, add_special=False, parse_special=False)
        if got != expected:
            failures.append((text, expected, got))
    assert not failures, f"{len(failures)}/{len(cases)} vectors differ, first: {failures[0]!r}"


@pytest.mark.parametrize("name", ALL_VOCABS)
def test_recorded_llama_cpp_corpus(llama_vocab_dir, name):
    tok = load(llama_vocab_dir, name)
    rec = REFERENCE["vocabs"][name]
    gguf = llama_vocab_dir / f"ggml-vocab-{name}.gguf"
    check_against_record(tok, rec, REFERENCE["corpus"])
    assert gguf.stat().st_size > 0


@pytest.mark.peer
@pytest.mark.parametrize("name", ALL_VOCABS)
def test_live_llama_cpp_vocab(llama_vocab_dir, name):
    """The same corpus plus extra texts, against the llama.cpp that is installed."""
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    tok = load(llama_vocab_dir, name)
    llm = llama_cpp.Llama(str(llama_vocab_dir / f"ggml-vocab-{name}.gguf"), vocab_only=True, verbose=False)
    texts = REFERENCE["corpus"] + [t + t[::-1] for t in REFERENCE["corpus"][3:]]
    for text in texts:
        for add_special, parse_special in ((False, False), (True, True)):
            expected = llm.tokenize(text.encode(), add_bos=add_special, special=parse_special)
            assert tok.encode(text, add_special, parse_special) == expected, repr(text)


def test_unknown_pre_tokenizer_is_named():
    meta = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "no-such-pre",
        "tokenizer.ggml.tokens": ["a", "b"],
        "tokenizer.ggml.merges": ["a b"],
    }
    with pytest.raises(TokenizerError, match="no-such-pre"):
        Tokenizer.from_metadata(meta)


def test_unknown_model_is_named():
    with pytest.raises(TokenizerError, match="'plamo9'"):
        Tokenizer.from_metadata({"tokenizer.ggml.model": "plamo9", "tokenizer.ggml.tokens": ["a"]})


@pytest.mark.parametrize(
    "meta, match",
    [
        ({}, "no tokenizer"),
        ({"tokenizer.ggml.model": "llama"}, "tokenizer.ggml.tokens"),
        ({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a"]}, "merges"),
        ({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a", "a"]}, "duplicate"),
        ({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": "abc"}, "array of strings"),
        ({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a"], "tokenizer.ggml.bos_token_id": "x"},
         "bos_token_id"),
        ({"tokenizer.ggml.model": "none"}, "no vocabulary"),
    ],
)
def test_bad_metadata_gives_tokenizer_error(meta, match):
    with pytest.raises(TokenizerError, match=match):
        Tokenizer.from_metadata(meta)
