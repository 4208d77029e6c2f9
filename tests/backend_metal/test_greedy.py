"""Greedy decoding on the Metal backend (MLX's CPU device here) against the CPU backend, on
real files: SmolLM2 in every run, Gemma 3 and Qwen2.5 with --run-slow (the CPU device
takes about half a second a token on SmolLM2 and seconds on the larger vocabularies).

The backends round differently: the CPU rounds activations to 8 bits for quantized
products, as llama.cpp does; MLX's quantized products keep them in f32 (on SmolLM2's
prompt the Metal logits were 0.017 from the numpy reference's at most, the CPU's 0.67).
So tokens are compared where the choice is clear: the CPU's top-two margin above MARGIN.

- free-running: the Metal session's own greedy loop (the compiled decode step, argmax on
  the device, one int32 read back a token) must give the CPU's tokens up to the first
  step whose CPU margin is below MARGIN;
- then the Metal backend decodes the CPU's tokens one step at a time, and every step with
  a clear choice must agree.
"""

from __future__ import annotations

import numpy as np
import pytest

from cera.testing import greedy
from cera.testing.greedy import PROMPT

from .conftest import needs_mlx

# Measured on SmolLM2 (54 positions of a teacher-forced pass, MLX's CPU device): the gap
# between the CPU's top two moved by at most 0.41 between the backends (the logits by up
# to 1.14), and the argmaxes differed only where the CPU's margin was below 0.29.
MARGIN = 0.5


def _load(path, device):
    import cera

    return cera.load(str(path), device=device, quiet=True)


def check_continuation(path, n):
    return greedy.check_continuation(path, "metal", n, PROMPT, MARGIN)


@needs_mlx
def test_greedy_continuation_smollm2(smollm2_path):
    assert check_continuation(smollm2_path, 8) >= 1


@needs_mlx
@pytest.mark.slow
def test_greedy_continuation_gemma3(gemma3_path):
    check_continuation(gemma3_path, 6)


@needs_mlx
@pytest.mark.slow
def test_greedy_continuation_qwen25(qwen05_path):
    check_continuation(qwen05_path, 6)


REF_TOLERANCE = 0.05  # |metal logit - reference logit| on SmolLM2's prompt; measured 0.017 at most


@needs_mlx
def test_logits_of_every_prompt_position_match_the_reference(smollm2_path):
    """Every position of SmolLM2's prompt in one pass: the Metal logits within REF_TOLERANCE
    of the numpy reference backend's (float64 sums over the gguf package's dequantized
    weights), and the same argmax everywhere."""
    from cera.generation.runtime import SeqStep
    from cera.graph.builder import ALL_LOGITS
    from cera.testing.reference import load as reference_load

    mt, ref = _load(smollm2_path, "metal"), reference_load(smollm2_path)
    try:
        ids = mt.tokenize(PROMPT)
        outs = []
        for m in (mt, ref):
            st = m.runner.new_state(len(ids) + 2)
            slot = st.acquire()
            step = SeqStep(slot, ids, range(len(ids)))
            outs.append(np.asarray(m.runner.forward(st, [step], ALL_LOGITS)["logits"], np.float64))
        got, want = outs
        assert np.abs(got - want).max() <= REF_TOLERANCE
        assert (got.argmax(1) == want.argmax(1)).all()
    finally:
        mt.close()
        ref.close()
