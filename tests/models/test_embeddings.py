"""Embeddings (`LoadedModel.embed`) on the real nomic-embed-text v1.5 F16 file against
llama.cpp's embeddings of the same texts (stored by reference/make_embedding_reference.py,
and live where llama-cpp-python is installed), and the API's batching and pooling.

The measure: cosine similarity >= 0.9999 with llama.cpp's vector of every text.

The `bert` architecture (no such GGUF is on PyPI) on a tiny random-weight BERT
(reference/make_tiny_bert.py: transformers' BertModel converted by llama.cpp's converter,
CLS-pooled), against llama.cpp's vectors and transformers' of the same texts.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import cera
from cera.errors import InvalidOptions

REFERENCE = Path(__file__).parent / "reference" / "embeddings"
MIN_COSINE = 0.9999


@pytest.fixture(scope="module")
def nomic():
    from cera.sources import bundles

    path = bundles.fetch_file("nomic-embed-text-v1.5-f16", quiet=True)
    with cera.load(str(path), device="cpu", threads=2, quiet=True) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def record():
    return json.loads((REFERENCE / "nomic-embed-text-v1.5-f16.json").read_text())


def test_the_file_is_the_one_the_reference_was_made_on(nomic, record):
    from cera.sources.bundles import sha256_file

    assert sha256_file(nomic.path) == record["model"]["sha256"]
    assert nomic.family == "nomic-bert" and nomic.model.pooling == "mean"


def test_tokens_match_llama_cpp(nomic, record):
    for case in record["cases"]:
        assert nomic.tokenize(case["text"]) == case["tokens"], case["text"][:40]


def test_embeddings_match_llama_cpp(nomic, record):
    texts = [c["text"] for c in record["cases"]]
    got = nomic.embed(texts)
    want = np.array([c["embedding"] for c in record["cases"]])
    assert got.shape == want.shape and got.dtype == np.float32
    cos = (got * want).sum(axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= MIN_COSINE, f"cosine with llama.cpp: {np.round(cos, 6).tolist()}"
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_a_text_embeds_the_same_alone_and_in_any_batch(nomic, record):
    texts = [c["text"] for c in record["cases"][:6]]
    together = nomic.embed(texts)
    small = nomic.embed(texts, batch_tokens=24)  # a pass per text or two
    alone = np.stack([nomic.embed(t) for t in texts])
    np.testing.assert_allclose(small, together, rtol=0, atol=1e-5)
    np.testing.assert_allclose(alone, together, rtol=0, atol=1e-5)


def test_pooling_choices(nomic):
    text = "hello world"
    per_token = nomic.embed(text, pooling="none", normalize=False)
    assert per_token.shape == (4, 768)  # [CLS] hello world [SEP]
    mean = nomic.embed(text, normalize=False)
    np.testing.assert_allclose(mean, per_token.mean(axis=0), rtol=0, atol=1e-4)
    # (the pooled passes compute their last layer for the pooled rows only, with the kernels of
    # that row count: equal to the per-token pass on AVX-512, within 1e-4 on the other variants)
    np.testing.assert_allclose(nomic.embed(text, pooling="cls", normalize=False), per_token[0], rtol=0, atol=1e-4)
    np.testing.assert_allclose(nomic.embed(text, pooling="last", normalize=False), per_token[-1], rtol=0, atol=1e-4)
    with pytest.raises(InvalidOptions, match="pooling"):
        nomic.embed(text, pooling="max")
    with pytest.raises(InvalidOptions, match="tokens"):
        nomic.embed("word " * 3000)


@pytest.mark.peer
@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs llama-cpp-python")
def test_embeddings_match_llama_cpp_live(nomic):
    from llama_cpp import Llama

    texts = ["search_query: how do short convolutions carry state?", "Zwei Straßen, ein Ziel.", "x" * 50]
    llm = Llama(model_path=str(nomic.path), embedding=True, n_threads=2, n_ctx=2048, verbose=False)
    try:
        want = np.array(llm.embed(texts, normalize=True))
    finally:
        llm.close()
    got = nomic.embed(texts)
    assert ((got * want).sum(axis=1)).min() >= MIN_COSINE


def test_decoder_hidden_states_match_llama_cpp():
    """A decoder (the tiny LFM2) as an embedder: per token (llama.cpp's pooling none: the
    hidden state after the final norm), mean- and last-pooled, against llama.cpp's vectors
    (reference/embeddings/tiny-lfm2.json). Both keep keys and values in f16."""
    rec = json.loads((REFERENCE / "tiny-lfm2.json").read_text())
    path = Path(__file__).parent / "reference" / "tiny" / rec["model"]["file"]
    with cera.load(str(path), device="cpu", threads=2, quiet=True) as loaded:
        texts = [c["text"] for c in rec["cases"]]
        per_token = loaded.embed(texts, pooling="none", normalize=False)
        mean = loaded.embed(texts, normalize=False)  # a decoder's default pooling
        last = loaded.embed(texts, pooling="last", normalize=False)
    for i, case in enumerate(rec["cases"]):
        want = np.array(case["none"])
        assert per_token[i].shape == want.shape
        np.testing.assert_allclose(per_token[i], want, rtol=0, atol=5e-3 * np.abs(want).max())
        np.testing.assert_allclose(mean[i], case["mean"], rtol=0, atol=1e-3)
        np.testing.assert_allclose(last[i], case["last"], rtol=0, atol=5e-3 * np.abs(want).max())


def test_tiny_bert_matches_llama_cpp_and_transformers():
    """The `bert` family (learned positions, biases, GELU feed-forward, post-norm layers,
    WordPiece, CLS pooling from the file). Texts' vectors are far apart on this model
    (cosine between texts at most 0.87), so the bounds below tell a right encoder from a
    wrong one. llama.cpp: the same tokens, cosine >= 0.9999 and every component within
    1e-4. transformers: every component within 1e-3 (it uses the exact erf GELU, llama.cpp
    and cera the tanh approximation: 2e-4 apart on this model)."""
    rec = json.loads((REFERENCE / "tiny-bert.json").read_text())
    hf = json.loads((REFERENCE.parent / "tiny" / "tiny-bert.hf.json").read_text())["hf_reference"]["cases"]
    with cera.load(str(REFERENCE.parent / "tiny" / "tiny-bert.gguf"), device="cpu", threads=2, quiet=True) as bert:
        assert bert.family == "bert" and bert.model.pooling == "cls"
        texts = [c["text"] for c in rec["cases"]]
        for case, hf_case in zip(rec["cases"], hf, strict=True):
            assert bert.tokenize(case["text"]) == case["tokens"] == hf_case["tokens"], case["text"][:40]
        got = bert.embed(texts)
        alone = bert.embed(texts[3])
    want = np.array([c["embedding"] for c in rec["cases"]])
    cos = (got * want).sum(axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= MIN_COSINE, f"cosine with llama.cpp: {np.round(cos, 6).tolist()}"
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    np.testing.assert_allclose(got, np.array([c["cls_normalized"] for c in hf]), rtol=0, atol=1e-3)
    np.testing.assert_allclose(alone, got[3], rtol=0, atol=1e-5)
