"""Speculative decoding by prompt lookup gives the greedy output token for token; context
shifting lets a generation run past its context."""

from __future__ import annotations

import pytest

import cera
from cera.errors import InvalidOptions
from cera.generation.sink import FinishReason

CODE = '''def fibonacci(n):
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)


def factorial(n):
    if n < 2:
        return 1
    return n * factorial(n - 1)
'''


def _greedy(m, text, n, **kw):
    s = m.new_session(n_ctx=1024)
    s.append_text(text)
    return s, s.generate(max_tokens=n, temperature=0, **kw)


@pytest.fixture(scope="module")
def loaded(smollm2_path):
    m = cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    yield m
    m.close()


@pytest.mark.parametrize("ngram, k", [(3, 8), (1, 4), (2, 16)])
def test_speculation_gives_the_greedy_tokens(loaded, ngram, k):
    prompt = "Rewrite this code, renaming n to x:\n" + CODE + "\nRewritten:\n"
    plain_s, plain = _greedy(loaded, prompt, 120)
    spec_s, spec = _greedy(loaded, prompt, 120, spec=True, spec_ngram=ngram, spec_k=k)
    assert spec.tokens == plain.tokens
    assert spec.finish_reason == plain.finish_reason
    assert spec.drafted > 0 and 0 < spec.accepted <= spec.drafted
    # the session holds what plain decoding holds: continuing gives the same tokens
    assert spec_s.tokens == plain_s.tokens and spec_s.pending == plain_s.pending
    a = plain_s.generate(max_tokens=10, temperature=0).tokens
    b = spec_s.generate(max_tokens=10, temperature=0, spec=True).tokens
    assert a == b


def test_speculation_stops_where_greedy_stops(loaded):
    prompt = "List the numbers one to five: one, two, three,"
    for n in (1, 2, 3, 7):
        _, plain = _greedy(loaded, prompt, n, stop=[" five"])
        _, spec = _greedy(loaded, prompt, n, stop=[" five"], spec=True)
        assert (spec.tokens, spec.text, spec.finish_reason) == (plain.tokens, plain.text, plain.finish_reason)


def test_speculation_refuses_what_it_cannot_keep_exact(loaded):
    s = loaded.new_session(n_ctx=64)
    s.append_text("Hi")
    with pytest.raises(InvalidOptions, match="greedy"):
        s.generate(max_tokens=4, temperature=0.7, spec=True)
    with pytest.raises(InvalidOptions, match="greedy"):
        s.generate(max_tokens=4, temperature=0, repeat_penalty=1.2, spec=True)


def test_context_shift_lets_a_long_generation_run_on(loaded):
    s = loaded.new_session(n_ctx=128)
    s.append_text("Tell me a very long story about a dragon.")
    summary = s.generate(max_tokens=400, temperature=0.8, seed=1, ignore_eos=True, context_shift=True, n_keep=8)
    assert summary.n_generated == 400 and summary.finish_reason == FinishReason.LENGTH
    assert s.n_shifted > 0 and len(s.tokens) + len(s.pending) <= 128
    without = loaded.new_session(n_ctx=128)
    without.append_text("Tell me a very long story about a dragon.")
    assert without.generate(max_tokens=400, temperature=0.8, seed=1, ignore_eos=True).finish_reason == FinishReason.CONTEXT


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["smollm2_path", "gemma3_path", "qwen05_path", "qwen15_path"])
def test_spec_equals_greedy_on_the_real_files(request, fixture):
    """`cera run --spec` prints what plain greedy `cera run` prints, on each real file."""
    import subprocess
    import sys

    path = str(request.getfixturevalue(fixture))
    prompt = "Rewrite this code, renaming n to x:\n" + CODE + "\nRewritten:\n"
    cmd = [sys.executable, "-m", "cera_cli.main", "run", "-m", path, "-p", prompt, "-n", "96", "--temp", "0", "-t", "2"]
    plain = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    spec = subprocess.run([*cmd, "--spec"], capture_output=True, text=True, timeout=600)
    assert plain.returncode == 0, plain.stderr
    assert spec.returncode == 0, spec.stderr
    assert len(plain.stdout) > 40
    assert spec.stdout == plain.stdout
