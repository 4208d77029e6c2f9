"""SmolLM2's greedy continuation on the HTP simulator against the CPU backend (slow: the
simulator takes seconds a token and compiling the model's graphs tens of seconds).

The HTP computes in float16, the CPU quantizes activations to 8 bits for its products, so
tokens are compared only where the CPU's choice is clear: its top-two logit margin at least
MARGIN (0.5, the margin the Vulkan backend's greedy tests use). Up to the first step below
it the tokens must be identical. Measured on the simulator (SM8650, QNN 2.51): the 8 greedy
tokens of PROMPT all matched the CPU's, including steps whose CPU margin was 0.05-0.35.
"""

from __future__ import annotations

import pytest

from cera.testing.greedy import MARGIN, PROMPT, check_continuation

from .conftest import needs_simulator

STEPS = 8


@pytest.mark.slow
@needs_simulator
def test_smollm2_greedy_continuation_matches_the_cpu(simulator, smollm2_path):
    compared = check_continuation(smollm2_path, "hexagon", STEPS, PROMPT, MARGIN, steps=False)
    assert compared >= 1, "no step had a clear choice"
