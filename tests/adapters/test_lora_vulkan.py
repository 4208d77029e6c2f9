"""LoRA adapters on the Vulkan backend (lavapipe in CI): the adapted graph's logits against
the CPU backend's on the same adapters, the base model with and without them, several at
once and switched on a loaded model; greedy tokens equal where the CPU's choice is clear."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import cera

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from lora_files import random_pairs, write_gguf_adapter  # noqa: E402
from tiny_llama import write_llama  # noqa: E402



def _why_not() -> str | None:
    import importlib.util

    if importlib.util.find_spec("wgpu") is None:
        return "wgpu is not installed"
    try:
        from cera_backend_vulkan import device

        return None if device.adapters() else "no Vulkan adapter here (Debian: mesa-vulkan-drivers gives lavapipe)"
    except Exception as e:  # noqa: BLE001 - any failure to find a device is a reason to skip
        return f"no usable Vulkan adapter here: {e}"


WHY_NOT = _why_not()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")
TOKENS = [0, 3, 5, 7, 2, 9, 11, 4]
# The GPU's products keep f32 activations, the CPU's round them as llama.cpp does (F16 for F16
# weights); on these logits (|l| < 3) the two differed by at most TOL (measured, lavapipe).
TOL = 2e-3


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("lora-vk")
    base = write_llama(d / "base.gguf")
    return {
        "base": base,
        "r4": write_gguf_adapter(d / "r4.gguf", "llama", random_pairs(base, rank=4, seed=3), 8.0),
        "a1": write_gguf_adapter(d / "a1.gguf", "llama", random_pairs(base, rank=8, seed=1, std=0.4), 16.0),
        "a2": write_gguf_adapter(d / "a2.gguf", "llama",
                                 random_pairs(base, rank=8, seed=2, std=0.4, targets=("attn_v", "ffn_down"), embedding=True),
                                 0.0, "F16"),  # fmt: skip
    }


@pytest.fixture(scope="module")
def both(files):
    cpu = cera.load(files["base"], device="cpu", quiet=True)
    vk = cera.load(files["base"], device="vulkan", quiet=True)
    yield cpu, vk
    cpu.close()
    vk.close()


def logits(loaded, adapters, tokens=TOKENS):
    s = loaded.new_session(n_ctx=64, adapters=adapters)
    s.append_tokens(tokens)
    return np.asarray(s.evaluate(), np.float64).copy()


def test_adapted_logits_match_the_cpu(both, files):
    cpu, vk = both
    sets = {
        "a1": lambda m: [(m.load_adapter(files["a1"]), 0.7)],
        "a2": lambda m: [(m.load_adapter(files["a2"]), 1.5)],
        "both": lambda m: [(m.load_adapter(files["a1"]), 0.5), (m.load_adapter(files["a2"]), 1.5)],
    }
    base_cpu, base_vk = logits(cpu, []), logits(vk, [])
    np.testing.assert_allclose(base_vk, base_cpu, atol=TOL, rtol=0)
    for name, make in sets.items():
        want, got = logits(cpu, make(cpu)), logits(vk, make(vk))
        assert np.abs(want - base_cpu).max() > 10 * TOL, name  # the adapter shows
        np.testing.assert_allclose(got, want, atol=TOL, rtol=0, err_msg=name)


def test_switching_and_greedy_decoding_on_vulkan(both, files):
    cpu, vk = both
    a_cpu, a_vk = cpu.load_adapter(files["a1"]), vk.load_adapter(files["a1"])
    s = vk.new_session(n_ctx=64)
    s.append_tokens(TOKENS)
    base = np.asarray(s.evaluate(), np.float64).copy()
    s.set_adapters([(a_vk, 1.0)])
    np.testing.assert_allclose(np.asarray(s.evaluate(), np.float64), logits(cpu, [(a_cpu, 1.0)]), atol=TOL, rtol=0)
    s.set_adapters([])
    np.testing.assert_allclose(np.asarray(s.evaluate(), np.float64), base, atol=0, rtol=0)

    def greedy(m, adapters):
        g = m.new_session(n_ctx=64, adapters=adapters)
        g.append_tokens(TOKENS)
        return g.generate(max_tokens=12, temperature=0.0, ignore_eos=True).tokens

    assert greedy(vk, [(a_vk, 1.0)]) == greedy(cpu, [(a_cpu, 1.0)])


def test_a_rank_the_products_cannot_take_is_refused_at_load(both, files):
    _, vk = both
    from cera.errors import AdapterError

    with pytest.raises(AdapterError, match="backend 'vulkan' cannot run this adapter: .*multiple of 8"):
        vk.load_adapter(files["r4"])
    assert "r4" not in vk.adapters
