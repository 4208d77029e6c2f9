"""The hybrid, state-space, MoE and later dense families on their tiny random-weight models
(reference/make_tiny_hybrid.py: transformers checkpoints converted by llama.cpp's converter),
on the CPU backend.

llama.cpp's greedy tokens and logits on the same files are checked by test_fidelity.py
(data/tiny-<family>.json), the numpy reference backend against transformers by
tests/core/test_reference_backend.py. Here: the CPU backend against transformers'
logits and greedy tokens, sequences decoded together against each alone (each has its
own slot of conv/SSM state), and refusal of metadata keys a family does not read.

Stated tolerance against transformers: 1e-2 absolute on logits of magnitude ~10, with
f32 keys and values (transformers computes in float32; with llama.cpp's f16 cache both
cera and llama.cpp move by up to ~0.1 on these files); 5e-2 for gemma, whose GELU goes
through ggml's f16 table as in llama.cpp (starcoder2's and phi2's GELU do too: 8e-3
from transformers on their files, within 1e-2).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import cera
from cera.errors import ModelConfigError

TINY = Path(__file__).parent / "reference" / "tiny"
FAMILIES = ["lfm2", "lfm2moe", "mamba2", "granitehybrid", "falcon-h1", "qwen3moe", "gemma", "smollm3", "minicpm",
            "exaone", "starcoder2", "phi2"]  # fmt: skip
FAMILIES = [f for f in FAMILIES if (TINY / f"tiny-{f}.gguf").exists()]
TOLERANCE = 1e-2
# GELU goes through ggml's f16 table (as llama.cpp computes it), transformers' is exact
TOLERANCES = {"gemma": 5e-2}

sys.path.insert(0, str(Path(__file__).parents[1] / "audio"))
from gguf_edit import rewrite  # noqa: E402

_loaded: dict = {}


def _load(name):
    if name not in _loaded:
        _loaded[name] = cera.load(str(TINY / f"tiny-{name}.gguf"), device="cpu", threads=2, quiet=True)
    return _loaded[name]


def _cases(name):
    return json.loads((TINY / f"tiny-{name}.hf.json").read_text())["hf_reference"]["cases"]


@pytest.mark.parametrize("name", FAMILIES)
def test_cpu_logits_and_greedy_tokens_match_transformers(name):
    loaded = _load(name)
    worst = 0.0
    for case in _cases(name):
        s = loaded.new_session(n_ctx=512, kv_type="f32")
        s.append_tokens(case["prompt_tokens"])
        logits = s.evaluate()
        top = case["hf_last_prompt_position_top10"]
        ids = [t for t, _ in top]
        worst = max(worst, float(np.abs(logits[ids] - np.array([v for _, v in top])).max()))
        assert int(np.argmax(logits)) == ids[0], case["id"]
        # transformers' greedy continuation, as far as llama.cpp's agrees with it (beyond
        # that the two references part on a near-tie)
        n = case["greedy_tokens_equal_up_to"]
        want = case["hf_greedy_tokens"][:n]
        got = s.generate(max_tokens=n, temperature=0).tokens if n else []
        assert got == want[: len(got)], case["id"]
        if len(got) < n:  # stopped on an end-of-generation token, transformers' next one
            assert loaded.tokenizer.is_eog(want[len(got)]), case["id"]
    assert worst <= TOLERANCES.get(name, TOLERANCE), f"{name}: max |logit - transformers| = {worst:.3g}"


@pytest.mark.parametrize("name", FAMILIES)
def test_sequences_decoded_together_equal_each_alone(name):
    loaded = _load(name)
    prompts = [c["prompt_tokens"] for c in _cases(name)[:3]]
    alone = []
    for p in prompts:
        s = loaded.new_session(n_ctx=256)
        s.append_tokens(p)
        alone.append(s.generate(max_tokens=6, temperature=0, ignore_eos=True).tokens)
    scheduler = loaded.scheduler(n_slots=3, n_ctx=256)
    together = scheduler.generate_many(prompts, max_tokens=6, temperature=0, ignore_eos=True)
    assert [r.tokens for r in together] == alone


@pytest.mark.parametrize("name", FAMILIES)
def test_an_unknown_key_is_refused(name, tmp_path):
    path = rewrite(TINY / f"tiny-{name}.gguf", tmp_path / "m.gguf", kv={f"{name}.mystery_gain": 2.0})
    with pytest.raises(ModelConfigError, match=rf"{name}\.mystery_gain"):
        cera.load(str(path), device="cpu", quiet=True)
