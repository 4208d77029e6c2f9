"""The prefix cache (cera.generation.prefix_cache): a hit evaluates only the rest of the prompt and
gives the tokens a miss gives; the disk tier survives the process and ignores damage."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cera

SYSTEM = "You are a careful assistant. " * 12


@pytest.fixture
def loaded(smollm2_path):
    m = cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    yield m
    m.close()


def _run(m, text, n=12):
    s = m.new_session(n_ctx=512)
    s.append_text(text)
    summary = s.generate(max_tokens=n, temperature=0, ignore_eos=True)
    return s, summary


def test_a_hit_evaluates_only_the_rest_and_gives_the_tokens_of_a_miss(loaded):
    _, cold = _run(loaded, SYSTEM + "Question one: what is two plus two?")
    _, want = _run(loaded, SYSTEM + "Question two: name a colour.")
    loaded.enable_prefix_cache()
    _run(loaded, SYSTEM + "Question one: what is two plus two?")  # stores the first prompt
    s, got = _run(loaded, SYSTEM + "Question two: name a colour.")
    assert got.tokens == want.tokens
    assert loaded.prefix_cache.hits >= 1
    # the second prompt shared everything up to "Question" with the first
    common = len(loaded.tokenize(SYSTEM + "Question"))
    assert got.n_prompt_tokens > 0 and s.n_evaluated < common
    # the same prompt again: nothing to evaluate at all, same tokens
    s2, again = _run(loaded, SYSTEM + "Question two: name a colour.")
    assert again.tokens == want.tokens and s2.n_evaluated == again.n_generated - 1


def test_the_disk_tier_survives_the_process_and_ignores_damage(loaded, smollm2_path, tmp_path):
    directory = tmp_path / "pc"
    code = textwrap.dedent(f"""
        import cera
        m = cera.load({str(smollm2_path)!r}, device="cpu", threads=1, quiet=True)
        m.enable_prefix_cache(directory={str(directory)!r})
        s = m.new_session(n_ctx=512)
        s.append_text({SYSTEM + "Tell me a story."!r})
        print(s.generate(max_tokens=8, temperature=0, ignore_eos=True).tokens)
    """)
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    files = list(directory.rglob("*.ckpt"))
    assert len(files) == 1
    loaded.enable_prefix_cache(directory=directory)
    s, got = _run(loaded, SYSTEM + "Tell me a story.", n=8)
    assert str(got.tokens) == first.stdout.strip()
    assert s.n_evaluated == 7  # the whole prompt came from disk
    # a damaged entry: reported, ignored, removed; the run evaluates everything and agrees
    data = bytearray(files[0].read_bytes())
    data[len(data) // 2] ^= 1
    files[0].write_bytes(bytes(data))
    cache = loaded.enable_prefix_cache(directory=directory)
    s, again = _run(loaded, SYSTEM + "Tell me a story.", n=8)
    assert again.tokens == got.tokens and s.n_evaluated > 8 and cache.hits == 0
    assert np.all([p.exists() for p in directory.rglob("*.ckpt")])  # a fresh entry replaced it


def test_the_memory_budget_evicts_the_least_recently_used(loaded):
    cache = loaded.enable_prefix_cache(max_bytes=3 * 2**20)
    for i in range(6):
        _run(loaded, SYSTEM + f"Variant {i}: hello.", n=1)
    assert cache.nbytes <= 3 * 2**20 and 0 < len(cache) < 6
