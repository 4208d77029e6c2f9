"""Greedy decoding on the Vulkan backend against the CPU backend, on real files (SmolLM2
and Gemma 3, fetched through cera.sources.bundles).

The two backends round differently: the CPU quantizes activations to 8 bits for
quantized products and accumulates attention's values in f16, as llama.cpp does; the GPU
kernels keep f32 activations and accumulators. So the tokens are compared only where the
choice is clear: the CPU's top-two logit margin must exceed MARGIN. Measured on SmolLM2
(44 positions, lavapipe): the gap between the top two moved by at most 0.32 between the
backends (the logits themselves by up to 1.2), so MARGIN = 0.5 leaves room.

- `test_greedy_continuation`: the Vulkan session generates greedily, the real decode path
  (argmax on the device, one int32 read back per token); the CPU generates the same
  number of tokens with its logits. Tokens must be identical up to the first step where
  the CPU's margin is below MARGIN (after it the continuations may part legitimately).
  Then the Vulkan backend decodes the CPU's tokens one step at a time (the same decode
  graph and device argmax), and every step with a clear choice must agree.
- `test_teacher_forced`: both backends evaluate the CPU's whole continuation as one
  prompt pass with every row's logits; at every position whose CPU margin exceeds MARGIN
  the two argmaxes must agree (this checks every position, not only the prefix); on
  SmolLM2 under both prompt attention kernels.
- `test_logits_on_other_tensor_types_match_the_reference`: SmolLM2 requantized to the
  types the real files lack, against the reference backend (see its docstring for why
  not the CPU there).
"""

from __future__ import annotations

import numpy as np
import pytest

from cera.testing.greedy import MARGIN, PROMPT, check_continuation, cpu_greedy, teacher_forced_pass

from .conftest import needs_vulkan

# 59 tokens, 75 with the continuation: a pass over more than one chunk (64) of cells
LONG_PROMPT = (
    "Mixing paint is a lesson in subtraction: each pigment absorbs part of the light, so "
    "every colour added takes something away, and a careless mix turns brown. Painters "
    "learn early which colours cannot be mixed from others. Asked to name them, a teacher "
    "would say that the three primary colours are"
)


def _load(path, device):
    import cera

    return cera.load(str(path), device=device, quiet=True)


def _check_continuation(path, n):
    return check_continuation(path, "vulkan", n, PROMPT, MARGIN)


def _check_forced(path, n, prompt=PROMPT):
    cpu, vk = _load(path, "cpu"), _load(path, "vulkan")
    try:
        ids = cpu.tokenize(prompt)
        want, _ = cpu_greedy(cpu, ids, n)
        teacher_forced_pass(cpu, vk, ids + want, MARGIN)
    finally:
        cpu.close()
        vk.close()


# the decode steps' row kernel: the adapter's default (lavapipe: "subgroup"), and the
# GPUs' ("unit-auto": the unit kernel, its integer products on x rounded to 8 bits)
ROW_KERNELS = pytest.mark.parametrize("row_kernel", ["", "unit-auto"], ids=["default", "unit-auto"])


@needs_vulkan
@ROW_KERNELS
def test_greedy_continuation_smollm2(smollm2_path, row_kernel, monkeypatch):
    monkeypatch.setenv("CERA_VULKAN_ROW_KERNEL", row_kernel)
    _check_continuation(smollm2_path, 8)


@needs_vulkan
@pytest.mark.parametrize("attention", ["lanes", "tiles"])
def test_teacher_forced_smollm2(smollm2_path, attention, monkeypatch):
    """Every position of a whole-sequence pass of over 64 tokens; under "tiles" its
    attention goes through wgsl.attention_tiles (a GPU's prompt kernel; lavapipe's
    default keeps the per-row one)."""
    monkeypatch.setenv("CERA_VULKAN_ATTENTION", attention)
    _check_forced(smollm2_path, 16, LONG_PROMPT)


@needs_vulkan
@ROW_KERNELS
def test_greedy_continuation_gemma3(gemma3_path, row_kernel, monkeypatch):
    monkeypatch.setenv("CERA_VULKAN_ROW_KERNEL", row_kernel)
    _check_continuation(gemma3_path, 6)


@needs_vulkan
@pytest.mark.slow
def test_teacher_forced_gemma3(gemma3_path):
    _check_forced(gemma3_path, 16)


REF_TOLERANCE = 0.05  # |Vulkan logit - reference logit|; measured at most 0.016 (lavapipe)


@needs_vulkan
@pytest.mark.slow
@pytest.mark.parametrize("type_name", ["Q2_K", "Q3_K", "IQ4_NL", "Q5_K", "Q4_0", "Q5_1"])
def test_logits_on_other_tensor_types_match_the_reference(type_name):
    """SmolLM2 with its weights in another type (made from the real file by ggml's own
    quantizer: tests/models/quantized_files.py, which skips without llama-cpp-python),
    21 positions in one pass: the Vulkan logits within REF_TOLERANCE of the reference
    backend's (numpy on the dequantized weights, cera.testing.reference), and the same
    argmax wherever the reference's top two are more than REF_TOLERANCE apart.

    Against the reference, not the CPU: the CPU backend computes llama.cpp's arithmetic
    (activations rounded to 8 bits for these products), which on Q5_K put its logits up to
    1.26 from the reference's and turned a top-two margin of 0.037 into 0.518, so the CPU
    and these f32 kernels can part at a position the CPU calls clear."""
    import sys
    from pathlib import Path

    from cera.generation.runtime import SeqStep
    from cera.graph.builder import ALL_LOGITS
    from cera.testing.reference import load as reference_load

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
    import quantized_files

    path = quantized_files.make(type_name)
    vk = _load(path, "vulkan")
    ref = reference_load(path)
    try:
        seq = vk.tokenize(PROMPT) + list(range(300, 316))
        outs = []
        for m in (vk, ref):
            st = m.runner.new_state(len(seq) + 2)
            slot = st.acquire()
            outs.append(
                np.asarray(
                    m.runner.forward(st, [SeqStep(slot, seq, range(len(seq)))], ALL_LOGITS)["logits"], np.float64
                )
            )
        got, want = outs
        worst = float(np.abs(got - want).max())
        assert worst <= REF_TOLERANCE, f"{type_name}: max |Vulkan - reference| = {worst:.4f}"
        top2 = np.sort(want, axis=1)[:, -2:]
        clear = top2[:, 1] - top2[:, 0] > REF_TOLERANCE
        bad = np.nonzero(clear & (got.argmax(1) != want.argmax(1)))[0]
        assert not len(bad), f"{type_name}: positions {bad.tolist()} choose another token than the reference"
    finally:
        vk.close()
