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

from .conftest import needs_mlx

# Measured on SmolLM2 (54 positions of a teacher-forced pass, MLX's CPU device): the gap
# between the CPU's top two moved by at most 0.41 between the backends (the logits by up
# to 1.14), and the argmaxes differed only where the CPU's margin was below 0.29.
MARGIN = 0.5
PROMPT = "The three primary colours are"


def _load(path, device):
    import cera

    return cera.load(str(path), device=device, quiet=True)


def _cpu_greedy(model, ids, n):
    s = model.new_session(n_ctx=len(ids) + n + 2)
    s.append_tokens(ids)
    toks, margins = [], []
    for _ in range(n):
        logits = np.asarray(s.evaluate(), np.float64)
        a, b = np.sort(logits)[-2:][::-1]
        toks.append(int(np.argmax(logits)))
        margins.append(float(a - b))
        s.append_tokens([toks[-1]])
    return toks, margins


def check_continuation(path, n):
    from cera.graph.builder import ARGMAX
    from cera.generation.runtime import SeqStep

    cpu, mt = _load(path, "cpu"), _load(path, "metal")
    try:
        assert mt.backend.name == "metal"
        ids = cpu.tokenize(PROMPT)
        want, margins = _cpu_greedy(cpu, ids, n)
        s = mt.new_session(n_ctx=len(ids) + n + 2)
        s.append_tokens(ids)
        got = [e.id for e in s.events(max_tokens=n, temperature=0, ignore_eos=True) if hasattr(e, "id")]
        compared = 0
        for i, (g, w, m) in enumerate(zip(got, want, margins, strict=False)):
            if m < MARGIN:
                break
            assert g == w, f"step {i}: metal {g} != cpu {w} although the CPU's margin is {m:.3f} ({got} vs {want})"
            compared += 1
        st = mt.runner.new_state(len(ids) + n + 2)
        slot = st.acquire()
        seq = ids + want
        step_ids = [int(mt.runner.forward(st, [SeqStep(slot, ids, range(len(ids)))], ARGMAX)["argmax"][0])]
        for p in range(len(ids), len(seq) - 1):
            step_ids.append(int(mt.runner.forward(st, [SeqStep(slot, [seq[p]], [p])], ARGMAX)["argmax"][0]))
        clear = [i for i, m in enumerate(margins) if m >= MARGIN]
        bad = [(i, step_ids[i], want[i], round(margins[i], 3)) for i in clear if step_ids[i] != want[i]]
        assert not bad, f"decode steps (step, metal, cpu, cpu margin) differ: {bad}"
        assert len(clear) >= n // 3, f"only {len(clear)} of {n} steps had a clear choice (margins {margins})"
        return compared
    finally:
        cpu.close()
        mt.close()


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
    from cera.graph.builder import ALL_LOGITS
    from cera.generation.runtime import SeqStep
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
