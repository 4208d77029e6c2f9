"""Hostile chat templates (templates.py: a corpus of attack shapes and a generator of
nested, recursive and expensive ones), each rendered in a child process under a time and
memory limit with a small budget. A rendered prompt (that shows no memory address) or a
`TemplateError` is the only acceptable outcome.
"""

from __future__ import annotations

import random

import pytest
from harness import Tally, case_numbers
from templates import CORPUS, generate

BUDGET_S = 0.5  # per render; the child gets far longer before it counts as hung
TIMEOUT_S = 20


def run(pool, label: str, sources: list[tuple[str, str]]) -> Tally:
    tally = Tally(label)
    cases = [
        {"kind": "template", "source": src, "budget_s": BUDGET_S, "timeout": TIMEOUT_S, "case": name}
        for name, src in sources
    ]
    for lo in range(0, len(cases), 500):
        part = cases[lo : lo + 500]
        for case, result in zip(part, pool.run(part), strict=True):
            tally.add(case, result)
    return tally


def test_hostile_template_corpus(pool):
    run(pool, "template-corpus", [(f"corpus-{i}", src) for i, src in enumerate(CORPUS)]).check()


def test_generated_templates(request, pool):
    numbers = case_numbers(200, 10_000, request.config.getoption("--run-slow"), offset=3_000_000)
    sources = [(f"generated-{n}", generate(random.Random(n))) for n in numbers]
    run(pool, "template-generated", sources).check()


@pytest.mark.parametrize("n", range(3))
def test_the_generator_makes_templates_that_do_render(n):
    """A guard on the generator itself: some of its templates must render, or the fuzzing
    would only ever test the error paths."""
    from cera.text.chat_template import ChatTemplate
    from cera.errors import TemplateError
    from cera.text.template_budget import TemplateBudget

    rendered = 0
    for k in range(60):
        try:
            ChatTemplate(generate(random.Random(n * 1000 + k)), budget=TemplateBudget(seconds=0.2)).render(
                [{"role": "user", "content": "hi"}]
            )
            rendered += 1
        except TemplateError:
            pass
    assert rendered >= 3, rendered
