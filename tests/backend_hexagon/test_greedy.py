"""SmolLM2's greedy continuation on the HTP simulator against the CPU backend (slow: the
simulator takes seconds a token and compiling the model's graphs tens of seconds).

The HTP computes in float16, the CPU quantizes activations to 8 bits for its products, so
tokens are compared only where the CPU's choice is clear: its top-two logit margin at least
MARGIN (0.5, the margin the Vulkan backend's greedy tests use). Up to the first step below
it the tokens must be identical. Measured on the simulator (SM8650, QNN 2.51): the 8 greedy
tokens of PROMPT all matched the CPU's, including steps whose CPU margin was 0.05-0.35.
"""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import needs_simulator

MARGIN = 0.5
PROMPT = "The three primary colours are"
STEPS = 8


@pytest.mark.slow
@needs_simulator
def test_smollm2_greedy_continuation_matches_the_cpu(simulator, smollm2_path):
    import cera

    cpu = cera.load(str(smollm2_path), device="cpu", quiet=True)
    hx = cera.load(str(smollm2_path), device="hexagon", quiet=True)
    try:
        ids = cpu.tokenize(PROMPT)
        s = cpu.new_session(n_ctx=64)
        s.append_tokens(ids)
        want, margins = [], []
        for _ in range(STEPS):
            logits = np.asarray(s.evaluate(), np.float64)
            a, b = np.sort(logits)[-2:][::-1]
            want.append(int(np.argmax(logits)))
            margins.append(float(a - b))
            s.append_tokens([want[-1]])
        s = hx.new_session(n_ctx=64)
        s.append_tokens(ids)
        got = [e.id for e in s.events(max_tokens=STEPS, temperature=0, ignore_eos=True) if hasattr(e, "id")]
        compared = 0
        for i, (g, w, m) in enumerate(zip(got, want, margins, strict=False)):
            if m < MARGIN:
                break
            assert g == w, f"step {i}: hexagon {g} != cpu {w} although the CPU's margin is {m:.3f} ({got} vs {want})"
            compared += 1
        assert compared >= 1, f"no step had a clear choice (margins {margins})"
        assert [st["cached"] for st in hx.backend.stats].count(False) >= 2  # a prompt graph and a decode graph
    finally:
        cpu.close()
        hx.close()
