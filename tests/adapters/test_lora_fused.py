"""The CPU backend's one-step LoRA products (csrc/matmul.c): a decode step with adapters runs
each adapted product as one step of its Q/K/V or gate/up group, and computes what the
separate ops compute, bit for bit (the backend's op-by-op form, CERA_CPU_PLANS=0, is the
reference: its ops are the ones checked against llama.cpp in test_lora_peers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import cera
from cera.adapters.active import ActiveAdapters
from cera.graph.builder import LAST_LOGITS, Layout

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from lora_files import random_pairs, write_gguf_adapter  # noqa: E402
from tiny_llama import write_llama  # noqa: E402

PHI2 = Path(__file__).parents[1] / "models" / "reference" / "tiny" / "tiny-phi2.gguf"
PROMPT = [0, 3, 5, 7, 2]
STEPS = 6


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("lora_fused")
    llama = write_llama(d / "llama.gguf")
    phi2_targets = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_up", "ffn_down")  # each with a bias
    return {
        "llama": llama,
        "phi2": PHI2,
        "llama_a": write_gguf_adapter(d / "a.gguf", "llama", random_pairs(llama, rank=4, seed=1, std=0.3), 8.0, "F16"),
        "llama_b": write_gguf_adapter(
            d / "b.gguf", "llama",
            random_pairs(llama, rank=2, seed=2, std=0.3, targets=("attn_v", "ffn_up", "ffn_down"), embedding=True),
            0.0,
        ),  # fmt: skip
        "phi2_a": write_gguf_adapter(
            d / "p.gguf", "phi2", random_pairs(PHI2, rank=4, seed=3, std=0.3, targets=phi2_targets), 4.0, "F16"
        ),
    }


def decode_logits(path, adapter_specs, monkeypatch, plans: bool, lora_steps: bool = True) -> list[np.ndarray]:
    """Logits of a prompt and STEPS greedy one-token passes."""
    monkeypatch.setenv("CERA_CPU_PLANS", "1" if plans else "0")
    monkeypatch.setenv("CERA_CPU_LORA_STEPS", "1" if lora_steps else "0")
    with cera.load(path, device="cpu") as m:
        adapters = [(m.load_adapter(p), s) for p, s in adapter_specs]
        s = m.new_session(adapters=adapters)
        s.append_tokens(PROMPT)
        out = [s.evaluate().copy()]
        for _ in range(STEPS):
            s.append_tokens([int(np.argmax(out[-1]))])
            out.append(s.evaluate().copy())
        return out


@pytest.mark.parametrize(
    "base, specs",
    [
        ("llama", [("llama_a", 0.7)]),
        ("llama", [("llama_a", 1.0), ("llama_b", -1.5)]),  # two adapters, one on the embedding too
        ("phi2", [("phi2_a", 1.25)]),  # biases added after the adapter's terms
    ],
)
def test_one_step_products_equal_the_separate_ops(files, monkeypatch, base, specs):
    specs = [(files[name], s) for name, s in specs]
    fused = decode_logits(files[base], specs, monkeypatch, plans=True)
    separate = decode_logits(files[base], specs, monkeypatch, plans=False)
    separate_in_plan = decode_logits(files[base], specs, monkeypatch, plans=True, lora_steps=False)
    plain = decode_logits(files[base], [], monkeypatch, plans=True)
    assert np.abs(fused[-1] - plain[-1]).max() > 1e-3  # the adapters change the decode steps
    for step, (got, want, also) in enumerate(zip(fused, separate, separate_in_plan, strict=True)):
        np.testing.assert_array_equal(got, want, err_msg=f"pass {step}")
        np.testing.assert_array_equal(got, also, err_msg=f"pass {step}")


def _plan_ops(loaded, layout, adapters) -> int:
    from cera_backend_cpu._native import lib

    state = loaded.runner.new_state(16, n_batch=8)
    exe = loaded.runner.executable(layout, LAST_LOGITS, state, adapters)
    return sum(lib.cera_plan_size(seg) for kind, seg in exe.segments if kind == "c")


def test_an_adapter_adds_no_steps_to_a_decode_pass(files, monkeypatch):
    monkeypatch.setenv("CERA_CPU_PLANS", "1")
    monkeypatch.setenv("CERA_CPU_LORA_STEPS", "1")
    with cera.load(files["llama"], device="cpu") as m:
        a = m.load_adapter(files["llama_a"])  # every projection of every layer
        active = ActiveAdapters(((a, 1.0),))
        for layout in (Layout((1,)), Layout((1, 1, 1)), Layout((3,), exact_rows=True)):
            assert _plan_ops(m, layout, active) == _plan_ops(m, layout, ActiveAdapters())
        # a prompt keeps the separate products (their many-row kernels): four more ops per product
        prompt = Layout((8,))
        assert _plan_ops(m, prompt, active) > _plan_ops(m, prompt, ActiveAdapters())


@pytest.mark.parametrize("K", [4, 8, 16, 20, 31, 32, 48, 64, 80])
def test_four_f16_rows_at_once_are_the_one_row_dot(K):
    """A LoRA B has rows of the adapter's rank: the products take them four at a time
    (dot4, lanes of doubles where the row is all of ggml_vec_dot_f16's scalar tail); every
    output must be the one-row dot's, bit for bit, on every SIMD variant of this CPU."""
    from cera_backend_cpu._native import ffi, lib, usable_variants
    from cera_backend_cpu.backend import CpuBackend

    rng = np.random.default_rng(K)
    N = 11  # rows 0..7 four at a time, 8..10 one by one
    w = (rng.standard_normal((N, K)) * np.exp(rng.uniform(-6, 3, (N, 1)))).astype(np.float16)
    x = (rng.standard_normal(K) * np.exp(rng.uniform(-4, 4, K))).astype(np.float32)
    for variant in usable_variants():
        b = CpuBackend(threads=1, variant=variant)
        try:
            y = np.zeros(N, np.float32)
            rc = lib.cera_matmul(b._ctx, 1, ffi.from_buffer(w), 2 * K, K, N, ffi.from_buffer("float[]", x), K, 1,
                                 ffi.from_buffer("float[]", y), N, ffi.NULL)  # fmt: skip
            assert rc == 0
            act = np.zeros(K, np.float16)
            assert lib.cera_quantize_act(b._ctx, 1, ffi.from_buffer("float[]", x), ffi.from_buffer(act), K) == 0
            one = ffi.new("float *")
            want = np.zeros(N, np.float32)
            for r in range(N):
                assert lib.cera_vec_dot(b._ctx, 1, K, ffi.from_buffer(w[r]), ffi.from_buffer(act), one) == 0
                want[r] = one[0]
            np.testing.assert_array_equal(y.view(np.uint32), want.view(np.uint32), err_msg=variant)
            # and on x86 the one-row dot is ggml_vec_dot_f16's tail where the row is short:
            # float products summed in double from 0
            if K < 32 and variant.startswith("avx"):
                tail = np.array([float(sum(np.float64(np.float32(a) * np.float32(c)) for a, c in zip(row, act))) for row in w])
                np.testing.assert_array_equal(want, tail.astype(np.float32), err_msg=variant)
        finally:
            b.close()
