"""Greedy decoding on a backend against the CPU backend's, for backends that round
differently from the CPU (f32 or f16 activations where the CPU rounds them to 8 bits for
quantized products, as llama.cpp does).

Tokens are compared only where the CPU's choice is clear: its top-two logit margin at
least ``margin``. A backend's conformance tests call these with its device name:

- `free_running`: the backend's own greedy loop (its compiled decode step, its argmax)
  must give the CPU's tokens up to the first step whose CPU margin is below ``margin``
  (after it the continuations may part legitimately);
- `teacher_forced_steps`: the backend decodes the CPU's tokens one step at a time, and
  every step with a clear choice must agree;
- `teacher_forced_pass`: both backends evaluate the CPU's continuation as one prompt pass
  with every row's logits; every clear position must agree.
"""

from __future__ import annotations

import numpy as np

MARGIN = 0.5  # measured margins are in each backend's tests (0.29-0.41 moved at most)
PROMPT = "The three primary colours are"


def cpu_greedy(model, ids: list[int], n: int) -> tuple[list[int], list[float]]:
    """``model``'s greedy tokens after ``ids`` and its top-two margin at each step."""
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


def free_running(model, ids, want, margins, margin: float = MARGIN) -> int:
    """Generate greedily on ``model`` and check its tokens against the CPU's ``want`` up to
    the first unclear step; returns how many steps were compared."""
    n = len(want)
    s = model.new_session(n_ctx=len(ids) + n + 2)
    s.append_tokens(ids)
    got = [e.id for e in s.events(max_tokens=n, temperature=0, ignore_eos=True) if hasattr(e, "id")]
    compared = 0
    for i, (g, w, m) in enumerate(zip(got, want, margins, strict=False)):
        if m < margin:
            break
        name = model.backend.name
        assert g == w, f"step {i}: {name} {g} != cpu {w} although the CPU's margin is {m:.3f} ({got} vs {want})"
        compared += 1
    return compared


def teacher_forced_steps(model, ids, want, margins, margin: float = MARGIN) -> None:
    """Decode the CPU's tokens one step at a time on ``model`` (its device argmax); every
    step with a clear CPU choice must agree, and at least a third must be clear."""
    from ..generation.runtime import SeqStep
    from ..graph.builder import ARGMAX

    n = len(want)
    st = model.runner.new_state(len(ids) + n + 2)
    slot = st.acquire()
    seq = ids + want
    step_ids = [int(model.runner.forward(st, [SeqStep(slot, ids, range(len(ids)))], ARGMAX)["argmax"][0])]
    for p in range(len(ids), len(seq) - 1):
        step_ids.append(int(model.runner.forward(st, [SeqStep(slot, [seq[p]], [p])], ARGMAX)["argmax"][0]))
    clear = [i for i, m in enumerate(margins) if m >= margin]
    bad = [(i, step_ids[i], want[i], round(margins[i], 3)) for i in clear if step_ids[i] != want[i]]
    assert not bad, f"decode steps (step, {model.backend.name}, cpu, cpu margin) differ: {bad}"
    assert len(clear) >= n // 3, f"only {len(clear)} of {n} steps had a clear choice (margins {margins})"


def teacher_forced_pass(cpu, model, seq: list[int], margin: float = MARGIN) -> None:
    """Evaluate ``seq`` as one pass with every row's logits on both; the argmaxes agree at
    every position whose CPU margin exceeds ``margin`` (at least half of them)."""
    from ..generation.runtime import SeqStep
    from ..graph.builder import ALL_LOGITS

    outs = []
    for m in (cpu, model):
        st = m.runner.new_state(len(seq) + 2)
        slot = st.acquire()
        step = SeqStep(slot, seq, range(len(seq)))
        outs.append(np.asarray(m.runner.forward(st, [step], ALL_LOGITS)["logits"], np.float64))
    a, b = outs
    top2 = np.sort(a, axis=1)[:, -2:]
    gap = top2[:, 1] - top2[:, 0]
    clear = gap > margin
    bad = np.nonzero(clear & (np.argmax(a, 1) != np.argmax(b, 1)))[0]
    assert not len(bad), f"positions {bad.tolist()} differ with CPU margins {gap[bad].round(3).tolist()}"
    assert clear.sum() >= len(seq) // 2, f"only {clear.sum()} of {len(seq)} positions had a clear choice"


def check_continuation(path, device: str, n: int, prompt: str = PROMPT, margin: float = MARGIN,
                       steps: bool = True) -> int:  # fmt: skip
    """`free_running` then (``steps``) `teacher_forced_steps` on the file at ``path``, loaded
    on the CPU and on ``device``; returns the free-running steps compared."""
    import cera

    cpu = cera.load(str(path), device="cpu", quiet=True)
    other = cera.load(str(path), device=device, quiet=True)
    try:
        assert other.backend.name == device, f"loaded on {other.backend.name}, not {device}"
        ids = cpu.tokenize(prompt)
        want, margins = cpu_greedy(cpu, ids, n)
        compared = free_running(other, ids, want, margins, margin)
        if steps:
            teacher_forced_steps(other, ids, want, margins, margin)
        return compared
    finally:
        cpu.close()
        other.close()


__all__ = ["MARGIN", "PROMPT", "check_continuation", "cpu_greedy", "free_running", "teacher_forced_pass",
           "teacher_forced_steps"]  # fmt: skip
