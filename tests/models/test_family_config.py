"""How families read metadata: required keys, unknown keys, RoPE scaling (hand-derived
expectations from llama.cpp's llama_context / ggml rope_yarn formulas)."""

from __future__ import annotations

import math

import pytest
from tiny_llama import write_llama

import cera
from cera.errors import ModelConfigError, UnsupportedArchitecture


def load(path):
    return cera.load(path, device="cpu", quiet=True)


def test_an_unknown_arch_key_is_refused_by_name(tmp_path):
    path = write_llama(tmp_path / "m.gguf", extra={"llama.attention.mystery_gain": 2.0})
    with pytest.raises(ModelConfigError, match=r"llama\.attention\.mystery_gain"):
        load(path)


def test_a_missing_required_key_is_named(tmp_path):
    path = write_llama(tmp_path / "m.gguf", drop=("feed_forward_length",))
    with pytest.raises(ModelConfigError, match=r"llama\.feed_forward_length"):
        load(path)


def test_an_unknown_rope_scaling_type_is_named(tmp_path):
    path = write_llama(tmp_path / "m.gguf", extra={"llama.rope.scaling.type": "warp"})
    with pytest.raises(ModelConfigError, match=r"rope\.scaling\.type.*'warp'"):
        load(path)


def test_linear_rope_scaling_divides_the_frequencies(tmp_path):
    path = write_llama(tmp_path / "m.gguf", extra={"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0})
    with load(path) as m:
        rope = m.model.config.rope
    assert rope.freq_scale == pytest.approx(0.25)
    assert rope.ext_factor == 0.0 and rope.attn_factor == 1.0


def test_yarn_sets_ramp_and_cancels_ggml_mscale(tmp_path):
    # llama.cpp: ext_factor 1; attn_factor = mscale(f) / (1 + 0.1 ln f) with mscale(f) = 0.1 ln f + 1,
    # i.e. exactly 1 when the file has no yarn_log_multiplier.
    path = write_llama(
        tmp_path / "m.gguf",
        extra={
            "llama.rope.scaling.type": "yarn",
            "llama.rope.scaling.factor": 4.0,
            "llama.rope.scaling.original_context_length": 64,
        },
    )
    with load(path) as m:
        rope = m.model.config.rope
    assert rope.ext_factor == 1.0
    assert rope.freq_scale == pytest.approx(0.25)
    assert rope.attn_factor == pytest.approx(1.0)
    assert rope.n_ctx_orig == 64


def test_yarn_log_multiplier_changes_attn_factor_as_derived(tmp_path):
    path = write_llama(
        tmp_path / "m.gguf",
        extra={
            "llama.rope.scaling.type": "yarn",
            "llama.rope.scaling.factor": 4.0,
            "llama.rope.scaling.yarn_log_multiplier": 0.1,
        },
    )
    with load(path) as m:
        rope = m.model.config.rope
    f = 4.0
    expected = (0.1 * 1.0 * math.log(f) + 1.0) / (0.1 * 0.1 * math.log(f) + 1.0) / (1.0 + 0.1 * math.log(f))
    assert rope.attn_factor == pytest.approx(expected, rel=1e-6)


def test_llama3_rope_freqs_become_frequency_factors(tmp_path):
    factors = [1.0, 1.0, 2.0, 8.0]  # head_dim 8 -> 4 rotated pairs
    path = write_llama(tmp_path / "m.gguf", rope_freqs=factors)
    with load(path) as m:
        assert m.model.rope.freq_factors == tuple(factors)


def test_an_architecture_no_family_serves_lists_the_installed_ones(tmp_path):
    path = write_llama(tmp_path / "m.gguf", arch="mamba9")
    with pytest.raises(UnsupportedArchitecture, match=r"'mamba9'.*llama"):
        load(path)
