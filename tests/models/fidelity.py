"""Comparing cera's logits with llama.cpp's stored reference (tests/models/reference).

The measure: llama.cpp does not agree with itself exactly (batch
vs token-by-token evaluation moves its logits), so cera must match llama.cpp's greedy
tokens up to the first step where llama.cpp's own top two logits are less than 0.5 apart,
and, fed llama.cpp's continuation token by token (teacher forcing), must pick llama.cpp's
token at every step whose margin is over 0.5. Steps below that are reported, not asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import numpy as np

REFERENCE = Path(__file__).parent / "reference"
DATA = REFERENCE / "data"
TINY = REFERENCE / "tiny"
MARGIN = 0.5
BUCKETS = (("<0.1", 0.0, 0.1), ("0.1-0.5", 0.1, 0.5), (">0.5", 0.5, float("inf")))


def reference_names() -> list[str]:
    return sorted(p.stem for p in DATA.glob("*.json"))


def load_reference(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def model_source(record: dict):
    """Where the model file of a reference record lives: a tiny file here or a bundle."""
    m = record["model"]
    if m.get("tiny_random_weights"):
        return TINY / m["file"]
    return m["name"]


@attrs.define
class StepResult:
    step: int
    reference_token: int
    cera_token: int
    margin: float  # llama.cpp's top-1 minus top-2 logit at this step
    max_abs_diff: float  # over llama.cpp's recorded top-10 ids

    @property
    def agrees(self) -> bool:
        return self.cera_token == self.reference_token


@attrs.define
class CaseResult:
    case_id: str
    steps: list[StepResult]
    first_low_margin: int | None  # first step whose margin is under 0.5 (None: none)

    def mismatches_before_first_low_margin(self) -> list[StepResult]:
        end = len(self.steps) if self.first_low_margin is None else self.first_low_margin
        return [s for s in self.steps[:end] if not s.agrees]

    def mismatches_above_margin(self) -> list[StepResult]:
        return [s for s in self.steps if s.margin > MARGIN and not s.agrees]


def teacher_forced(loaded, case: dict, n_ctx: int = 0) -> CaseResult:
    """Feed the prompt as one batch, then llama.cpp's continuation token by token, as its
    generation loop did, comparing cera's logits at every step. ``n_ctx``: the reference's
    context size (its cache size decides how llama.cpp splits long-context attention)."""
    prompt = case["prompt_tokens"]
    steps = case["steps"]
    n_ctx = max(n_ctx, len(prompt) + len(steps) + 8)
    session = loaded.new_session(n_ctx=n_ctx, n_batch=max(len(prompt), 1))
    session.append_tokens(prompt)
    logits = session.evaluate()
    results = []
    for i, step in enumerate(steps):
        ids = np.array([t for t, _ in step["top10"]])
        ref = np.array([v for _, v in step["top10"]], dtype=np.float64)
        results.append(
            StepResult(
                step=i,
                reference_token=step["token"],
                cera_token=int(np.argmax(logits)),
                margin=float(step["margin"]),
                max_abs_diff=float(np.abs(logits[ids].astype(np.float64) - ref).max()),
            )
        )
        if i + 1 < len(steps):
            session.append_tokens([step["token"]])
            logits = session.evaluate()
    return CaseResult(case["id"], results, case.get("first_step_margin_below_0_5"))


def free_running_greedy(loaded, case: dict, n_ctx: int = 0) -> list[int]:
    """cera's own greedy continuation (the prompt as one batch, then one token at a time)."""
    prompt = case["prompt_tokens"]
    n = len(case["steps"])
    session = loaded.new_session(n_ctx=max(n_ctx, len(prompt) + n + 8), n_batch=max(len(prompt), 1))
    session.append_tokens(prompt)
    logits = session.evaluate()
    eog = loaded.tokenizer.eog_ids
    out = []
    for _ in range(n):
        t = int(np.argmax(logits))
        out.append(t)
        if t in eog or len(out) == n:
            break
        session.append_tokens([t])
        logits = session.evaluate()
    return out


def summarize(results: list[CaseResult]) -> dict:
    steps = [s for r in results for s in r.steps]
    out = {"cases": len(results), "steps": len(steps)}
    for label, lo, hi in BUCKETS:
        chosen = [s for s in steps if lo <= s.margin < hi]
        out[f"agree_{label}"] = f"{sum(s.agrees for s in chosen)}/{len(chosen)}"
    out["max_abs_logit_diff_top10"] = round(max((s.max_abs_diff for s in steps), default=0.0), 4)
    return out
