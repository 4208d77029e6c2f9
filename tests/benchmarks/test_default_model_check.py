"""The default model is the smallest language-model bundle that passes the fixed quality
check of `benchmarks/default_model_check.py` (stated in the README): the default passes
it, and every smaller bundle with a chat template fails it. The check's rules are checked
on written answers too."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def dmc():
    sys.path.insert(0, str(BENCH))
    try:
        import default_model_check

        yield default_model_check
    finally:
        sys.path.remove(str(BENCH))


def test_the_rules_read_answers_as_a_person_would(dmc):
    rules = {q: ok for q, _, ok in dmc.QUESTIONS}
    prime = rules["Name a prime number."]
    assert prime("7") and prime("A prime number is 13.") and not prime("9") and not prime("A prime has two divisors.")
    assert not prime("2, 3 and 4")
    sky = rules["Why is the sky blue? Answer in two sentences."]
    assert sky("Sunlight is scattered by the air; blue light scatters most.") and not sky("The answer is in the description.")
    assert rules["What is 7 + 5?"]("7 + 5 = 12") and not rules["What is 7 + 5?"]("125")


@pytest.mark.slow  # three real models answer five questions each (about 2 minutes on 2 cores)
def test_the_default_is_the_smallest_bundle_that_passes(dmc):
    import cera
    from cera.sources import bundles

    names = dmc.llm_bundles()
    default = bundles.DEFAULT_MODEL
    assert default in names
    for name in names[: names.index(default) + 1]:
        loaded = cera.load(name, device="cpu", threads=2, quiet=True)
        try:
            if loaded.chat_template.is_fallback:
                continue  # a base model: not a candidate
            results = dmc.check(loaded)
        finally:
            loaded.close()
        if name == default:
            assert dmc.passes(results), results
        else:
            assert not dmc.passes(results), f"{name} is smaller than the default and passes: {results}"
