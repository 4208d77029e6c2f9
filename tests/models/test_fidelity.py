"""cera against llama.cpp on the same files: greedy tokens and teacher-forced logits.

The reference data (tests/models/reference/data/*.json) was produced by llama.cpp through
llama-cpp-python with the script beside it. SmolLM2 runs in CI; the larger files are
marked slow. See fidelity.py for the measure.
"""

from __future__ import annotations

import pytest
from fidelity import MARGIN, load_reference, model_source, reference_names, teacher_forced

import cera

FAST = {"smollm2-135m-instruct-q4_1"}


def _params():
    out = []
    for name in reference_names():
        record = load_reference(name)
        tiny = record["model"].get("tiny_random_weights")
        marks = [] if (name in FAST or tiny) else [pytest.mark.slow]
        out.append(pytest.param(name, marks=marks, id=name))
    return out


_loaded = {}


def _load(name):
    if name not in _loaded:
        record = load_reference(name)
        _loaded[name] = (record, cera.load(model_source(record), device="cpu", quiet=True))
    return _loaded[name]


@pytest.mark.parametrize("name", _params())
def test_prompt_tokens_match_llama_cpp(name):
    record, loaded = _load(name)
    for case in record["cases"]:
        if "text" not in case:
            continue
        ids = loaded.tokenizer.encode(
            case["text"], add_special=case["add_special"], parse_special=case["parse_special"]
        )
        assert ids == case["prompt_tokens"], case["id"]


@pytest.mark.parametrize("name", _params())
def test_greedy_and_teacher_forced_tokens_match_llama_cpp(name):
    record, loaded = _load(name)
    failures = []
    for case in record["cases"]:
        result = teacher_forced(loaded, case, record["settings"]["n_ctx"])
        early = result.mismatches_before_first_low_margin()
        confident = result.mismatches_above_margin()
        if early or confident:
            failures.append(
                f"{case['id']}: first low-margin step {result.first_low_margin}; "
                + "; ".join(
                    f"step {s.step}: cera {s.cera_token} vs llama.cpp {s.reference_token} "
                    f"(margin {s.margin:.3f}, max |diff| {s.max_abs_diff:.3f})"
                    for s in (early + confident)[:4]
                )
            )
    assert not failures, f"{len(failures)} cases disagree with llama.cpp where its margin > {MARGIN}:\n" + "\n".join(
        failures
    )


@pytest.mark.parametrize("name", _params())
def test_generation_stops_where_llama_cpp_stops(name):
    """Cases where llama.cpp's greedy loop ended on an end-of-generation token."""
    record, loaded = _load(name)
    cases = [c for c in record["cases"] if c["finish_reason"] == "eog" and c["first_step_margin_below_0_5"] is None]
    if not cases:
        pytest.skip(f"{name}: no reference case ends on an end-of-generation token with confident steps")
    for case in cases:
        session = loaded.new_session(n_ctx=len(case["prompt_tokens"]) + 64, n_batch=512)
        session.append_tokens(case["prompt_tokens"])
        summary = session.generate(max_tokens=len(case["steps"]) + 8, temperature=0.0)
        assert summary.finish_reason.value == "stop", case["id"]
        assert summary.tokens == case["generated_tokens"][:-1], case["id"]  # the EOG token itself is not emitted
