"""`cera.generation.perplexity` against llama.cpp's perplexity, per KV cache type.

The stored reference (reference/perplexity/<model>.json, made by
reference/make_perplexity_reference.py from llama.cpp's own logits) holds llama.cpp's
tokens of reference/perplexity/text.txt and its perplexity with f16, q8_0 and q4_0 caches
(-ctk/-ctv) for chunks of 128 and 256 tokens. Where llama-cpp-python is installed, the
`peer` tests compute llama.cpp's figures live as well.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import cera
from cera.errors import InvalidOptions
from cera.generation.perplexity import perplexity, token_nll

REFERENCE = Path(__file__).resolve().parent / "reference"
TEXT = (REFERENCE / "perplexity" / "text.txt").read_text(encoding="utf-8")

# cera's perplexity against llama.cpp's with the same cache type (relative): measured
# differences are listed in benchmarks/README.md; these bounds are several times those.
TOLERANCE = {"f16": 2e-3, "q8_0": 2e-3, "q4_0": 2e-3}


def _record(name: str) -> dict:
    return json.loads((REFERENCE / "perplexity" / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    with cera.load(smollm2_path, device="cpu", quiet=True) as loaded:
        yield loaded


def test_token_nll_is_llama_cpp_log_softmax():
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((5, 300)) * 4).astype(np.float32)
    targets = rng.integers(0, 300, 5)
    want = [np.log(np.exp(row.astype(np.float64) - row.max()).sum()) - (row[t] - row.max()) for row, t in
            zip(logits, targets, strict=True)]  # fmt: skip
    np.testing.assert_allclose(token_nll(logits, targets), want, rtol=1e-6)


def test_cera_tokenizes_the_text_as_llama_cpp(smollm2):
    assert smollm2.tokenize(TEXT) == _record("smollm2-135m-instruct-q4_1")["text_tokens"]


# The default run scores one pair (about 10 s on 2 cores; q8_0 at 128 is the CLI test's); the
# rest run with --run-slow.
_SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "n_ctx,kv_type",
    [pytest.param(128, "q4_0"), pytest.param(128, "f16", marks=_SLOW), pytest.param(128, "q8_0", marks=_SLOW),
     pytest.param(256, "f16", marks=_SLOW), pytest.param(256, "q8_0", marks=_SLOW),
     pytest.param(256, "q4_0", marks=_SLOW)],
)  # fmt: skip
def test_perplexity_matches_llama_cpp(smollm2, n_ctx, kv_type):
    record = _record("smollm2-135m-instruct-q4_1")
    want = next(r for r in record["runs"] if r["n_ctx"] == n_ctx and r["type_k"] == kv_type)
    got = perplexity(smollm2, TEXT, n_ctx=n_ctx, kv_type=kv_type)
    assert (got.chunks, got.tokens, got.text_tokens) == (want["chunks"], want["tokens"], len(record["text_tokens"]))
    assert got.ppl == pytest.approx(want["ppl"], rel=TOLERANCE[kv_type]), (got.ppl, want["ppl"])
    assert got.stderr == pytest.approx(want["ppl_stderr"], rel=5 * TOLERANCE[kv_type])
    np.testing.assert_allclose(got.chunk_ppl, want["chunk_ppl"], rtol=2 * TOLERANCE[kv_type])


@pytest.mark.slow
def test_a_compressed_cache_costs_what_it_costs_in_llama_cpp(smollm2):
    """The quality a cache type loses is the loss llama.cpp's same type has (the deltas
    against f16 agree), and its state is smaller by the bytes of its rows."""
    record = _record("smollm2-135m-instruct-q4_1")
    runs = {r["type_k"]: r for r in record["runs"] if r["n_ctx"] == 256}
    got = {t: perplexity(smollm2, TEXT, n_ctx=256, kv_type=t) for t in ("f16", "q4_0")}
    assert got["q4_0"].ppl / got["f16"].ppl == pytest.approx(runs["q4_0"]["ppl"] / runs["f16"]["ppl"], abs=2e-3)
    # SmolLM2: 30 layers x 3 KV heads x 64 dims for keys and values; 256 cells, and 4 bytes a
    # cell for the positions
    assert got["f16"].kv_bytes - got["q4_0"].kv_bytes == 256 * 30 * 3 * 2 * (64 * 2 - 2 * 18)


def test_turboquant_quality_and_bytes(smollm2):
    """tq3 at under a quarter of f16's bytes, against llama.cpp's f16 figure (cera's agrees
    with it to 1e-6): measured 28.97 against 27.52, chunks of 256 (+5.3%, keys kept less the
    calibrated offsets of `cera.generation.key_offsets`; 29.94, +8.8%, without them)."""
    f16 = next(r for r in _record("smollm2-135m-instruct-q4_1")["runs"] if r["n_ctx"] == 256 and r["type_k"] == "f16")
    tq3 = perplexity(smollm2, TEXT, n_ctx=256, kv_type="tq3")
    assert 1.0 < tq3.ppl / f16["ppl"] < 1.08, (tq3.ppl, f16["ppl"])
    # 30 layers x 3 KV heads a cell, 256 cells: keys 2 + 32 bytes a row, values 2 + 24, against
    # 128 each in f16 (and 4 bytes a cell of positions in both)
    f16_bytes = 256 * 30 * 3 * 2 * 128
    assert tq3.kv_bytes - 256 * 4 == 256 * 30 * 3 * (34 + 26) and (tq3.kv_bytes - 256 * 4) * 4 <= f16_bytes


@pytest.mark.slow
def test_tq2_quality(smollm2):
    """tq2 (keys 3 bits, values 2): measured 36.60 against f16's 27.52, chunks of 256 (+33%)."""
    tq2 = perplexity(smollm2, TEXT, n_ctx=256, kv_type="tq2")
    assert 1.2 < tq2.ppl / 27.5185 < 1.45, tq2.ppl
    assert tq2.kv_bytes - 256 * 4 == 256 * 30 * 3 * (26 + 18)


def test_perplexity_needs_two_chunks(smollm2):
    with pytest.raises(InvalidOptions, match="at least 512"):
        perplexity(smollm2, TEXT[:400], n_ctx=256)


@pytest.mark.slow
@pytest.mark.parametrize("kv_type", ["f16", "q8_0", "q4_0"])
def test_gemma3_perplexity_matches_llama_cpp(gemma3_path, kv_type):
    """Head dimension 256 and a sliding window of 512 (wider than the chunk)."""
    if not (REFERENCE / "perplexity" / "gemma3-270m-q4_k_m.json").exists():
        pytest.skip("no stored llama.cpp perplexity for gemma3-270m-q4_k_m (make_perplexity_reference.py --only it)")
    record = _record("gemma3-270m-q4_k_m")
    want = next(r for r in record["runs"] if r["n_ctx"] == 256 and r["type_k"] == kv_type)
    with cera.load(gemma3_path, device="cpu", quiet=True) as loaded:
        assert loaded.tokenize(TEXT) == record["text_tokens"]
        got = perplexity(loaded, TEXT, n_ctx=256, kv_type=kv_type)
    assert got.ppl == pytest.approx(want["ppl"], rel=TOLERANCE[kv_type]), (got.ppl, want["ppl"])


# -- live llama.cpp ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install llama-cpp-python==0.3.36)")
    sys.path.insert(0, str(REFERENCE))
    import make_perplexity_reference

    return make_perplexity_reference


@pytest.mark.peer
@pytest.mark.parametrize("kv_type", ["f16", pytest.param("q4_0", marks=_SLOW)])
def test_llama_cpp_still_gives_the_stored_perplexity(live, smollm2_path, kv_type):
    record = _record("smollm2-135m-instruct-q4_1")
    want = next(r for r in record["runs"] if r["n_ctx"] == 128 and r["type_k"] == kv_type)
    got = live.llama_perplexity(smollm2_path, TEXT, 128, kv_type, kv_type)
    assert got["text_tokens"] == record["text_tokens"]
    assert got["ppl"] == pytest.approx(want["ppl"], rel=1e-4)


@pytest.mark.peer
@pytest.mark.slow
def test_cera_matches_live_llama_cpp_with_a_q8_0_cache(live, smollm2, smollm2_path):
    want = live.llama_perplexity(smollm2_path, TEXT, 256, "q8_0", "q8_0")
    got = perplexity(smollm2, TEXT, n_ctx=256, kv_type="q8_0")
    assert got.ppl == pytest.approx(want["ppl"], rel=TOLERANCE["q8_0"])


@pytest.mark.slow
def test_tq3_key_offsets_on_qwen():
    """Qwen2.5's keys share a large offset (96% of their energy): without the calibrated key
    offsets tq3 measured 128.7 against f16's 36.33 (two chunks of 256); with them 39.53 (+8.8%)."""
    from cera import load

    with load("qwen2.5-coder-0.5b-instruct-q4_k_m") as m:
        f16 = perplexity(m, TEXT, n_ctx=256, max_chunks=2)
        tq3 = perplexity(m, TEXT, n_ctx=256, max_chunks=2, kv_type="tq3")
        m.runner._key_offsets = {}  # keys kept as they are
        bare = perplexity(m, TEXT, n_ctx=256, max_chunks=2, kv_type="tq3")
    assert tq3.ppl / f16.ppl < 1.15, (tq3.ppl, f16.ppl)
    assert bare.ppl / f16.ppl > 2.0, (bare.ppl, f16.ppl)
