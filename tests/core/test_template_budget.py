"""Chat templates within their budgets: every hostile template reproduced as a
regression test. Each hostile template must end quickly with a `TemplateError` that names
the limit it hit; nothing may hang, grow without bound, print Python internals or escape
as another exception.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from cera.text.chat_template import ChatTemplate
from cera.errors import TemplateError
from cera.text.template_budget import TemplateBudget

MESSAGES = [{"role": "user", "content": "hi"}]
QUICK = TemplateBudget(seconds=0.5)  # keeps the time-budget cases short


def refused(src: str, match: str, budget: TemplateBudget = QUICK, within: float = 5.0) -> TemplateError:
    t0 = time.monotonic()
    with pytest.raises(TemplateError, match=match) as info:
        ChatTemplate(src, budget=budget).render(MESSAGES)
    assert time.monotonic() - t0 < within, f"took {time.monotonic() - t0:.1f} s"
    return info.value


# -- time -------------------------------------------------------------------------------------

TIME_CASES = {
    "nested loops over a long string": "{% set s = 'x' * 100000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}",
    "nested loops that print": "{% set s = 'x' * 100000 %}{% for a in s %}{% for b in s %}{{ b }}{% endfor %}{% endfor %}",
    "exponential macro recursion": "{% macro f(n) %}{% if n > 0 %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}{{ f(40) }}",
    "exponential recursion, no output": (
        "{% macro f(n) %}{% if n > 0 %}{% set a = f(n-1) %}{% set b = f(n-1) %}{% endif %}{% endmacro %}{{ f(40) }}"
    ),
}


@pytest.mark.parametrize("src", TIME_CASES.values(), ids=TIME_CASES.keys())
def test_time_budget(src):
    refused(src, r"time budget of 0\.5 s \(TemplateBudget\.seconds\)", within=3.0)


def test_the_watchdog_stops_time_spent_outside_the_template_code(monkeypatch):
    """A filter's own Python loop has no checkpoint inside: the watchdog interrupts it."""
    import cera.text.chat_template as ct
    import cera.text.template_sandbox as ts

    def slow(value):
        while True:
            pass

    real = ct.make_environment

    def make(budget, globals_=None):
        env = real(budget, globals_)
        env.filters["slow"] = ts._wrap_filter("slow", slow)
        return env

    monkeypatch.setattr(ct, "make_environment", make)
    t0 = time.monotonic()
    with pytest.raises(TemplateError, match="took longer than its budget of 0.5 s"):
        ChatTemplate("{{ 'x'|slow }}", budget=QUICK).render(MESSAGES)
    assert time.monotonic() - t0 < 3.0


# -- size -------------------------------------------------------------------------------------

SIZE_CASES = {
    "big-integer power": ("{{ (2 ** 9999) ** 9999 }}", "max_int_bits"),
    "big integer by squaring": (
        "{% set ns = namespace(x=7) %}{% for i in range(40) %}{% set ns.x = ns.x * ns.x %}{% endfor %}",
        "max_int_bits",
    ),
    "lipsum(10**7)": ("{{ lipsum(10**7) }}", "max_output"),
    "center filter": ("{{ 'x'|center(10**9) }}", "max_output"),
    "center method": ("{{ 'x'.center(10**9) }}", "max_output"),
    "%-formatting width": ("{{ '%999999999s' % 'x' }}", "max_output"),
    "%-formatting star width": ("{{ '%*s' % (999999999, 'x') }}", "max_output"),
    "replace method": ("{% set s = 'a' * 100000 %}{{ s.replace('a', s) }}", "max_output"),
    "replace filter": ("{% set s = 'a' * 100000 %}{{ s|replace('a', s) }}", "max_output"),
    "join method": ("{% set s = 'a' * 1000000 %}{{ s.join(s) }}", "max_output"),
    "join filter": ("{% set s = 'a' * 1000000 %}{{ s|join(s) }}", "max_output"),
    "tojson indent": (
        "{% set ns = namespace(x=[1]) %}{% for i in range(200) %}{% set ns.x = [ns.x] %}{% endfor %}"
        "{{ ns.x|tojson(indent=100000) }}",
        "max_output",
    ),
    "format fan-out": ("{{ ('{0}' * 300000).format('x' * 100000) }}", "max_output"),
    "doubling with ~": (
        "{% set ns = namespace(x='ab') %}{% for i in range(60) %}{% set ns.x = ns.x ~ ns.x %}{% endfor %}",
        "max_output",
    ),
    "doubling with +": (
        "{% set ns = namespace(x='ab') %}{% for i in range(60) %}{% set ns.x = ns.x + ns.x %}{% endfor %}",
        "max_output",
    ),
    "a list that shares its halves": (
        "{% set ns = namespace(x=[1]) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x }}",
        "max_output",
    ),
    "a tuple that shares its halves, hashed": (
        "{% set ns = namespace(x=(1,)) %}{% for i in range(60) %}{% set ns.x = (ns.x, ns.x) %}{% endfor %}{{ {ns.x: 1} }}",
        "max_output",
    ),
    "dict.fromkeys sharing": (
        "{% set ns = namespace(x=[1]) %}{% for i in range(60) %}{% set ns.x = dict.fromkeys(range(2), ns.x) %}"
        "{% endfor %}",
        "max_output",
    ),
    "cycler items sharing": (
        "{% set ns = namespace(x=[1]) %}{% for i in range(60) %}{% set ns.x = cycler(ns.x, ns.x).items %}{% endfor %}",
        "max_output",
    ),
    "expandtabs": ("{{ ('\t' * 100000).expandtabs(1000) }}", "max_output"),
    "translate": ("{{ ('a' * 100000).translate({97: 'b' * 100000}) }}", "max_output"),
    "wordwrap": ("{{ ('a ' * 1000000)|wordwrap(1, wrapstring='x' * 1000) }}", "max_output"),
    "indent": ("{{ ('a\n' * 1000000)|indent(1000) }}", "max_output"),
    "to_bytes": ("{{ (1).to_bytes(100000000, 'big')|length }}", "max_output"),
    "batch": ("{{ range(100)|batch(10**12)|list }}", "max_output"),
    "many strings, each within the limit": ("{{ range(2000)|map('center', 5000000)|join }}", "max_produced"),
    "a huge prompt": ("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "max_output|max_produced"),
}


@pytest.mark.parametrize("case", SIZE_CASES.values(), ids=SIZE_CASES.keys())
def test_size_budget(case):
    src, limit = case
    refused(src, rf"TemplateBudget\.({limit})")


def test_striptags_on_many_tags_is_refused_not_quadratic():
    refused("{{ ('<>' * 500000)|striptags }}", "striptags")


def test_memory_error_under_a_memory_cap_is_a_template_error():
    """With the size budget lifted, the allocation fails under RLIMIT_AS: still a TemplateError."""
    code = textwrap.dedent(
        """
        import resource
        from cera.text.chat_template import ChatTemplate
        from cera.errors import TemplateError
        from cera.text.template_budget import TemplateBudget
        t = ChatTemplate("{{ 'x' * 4000000000 }}", budget=TemplateBudget(max_output=10**12, max_produced=10**13))
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, hard))
        try:
            t.render([{"role": "user", "content": "hi"}])
        except TemplateError as e:
            print("TemplateError:", e)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "TemplateError: chat template ran out of memory" in proc.stdout, proc.stdout + proc.stderr


# -- compile-time nesting ---------------------------------------------------------------------

NESTING_CASES = {
    "100 nested parentheses": ("{{ " + "(" * 100 + "1" + ")" * 100 + " }}", "max_brackets"),
    "200 nested dicts": ("{{ " + "{'a':" * 200 + "1" + "}" * 200 + " }}", "max_brackets"),
    "500 nots": ("{{ " + "not " * 500 + "1 }}", "max_brackets"),
    "500 unary minuses": ("{{ " + "-" * 500 + "1 }}", "max_brackets"),
    "21 nested for-loops": (
        "".join(f"{{% for x{i} in y %}}" for i in range(21)) + "x" + "{% endfor %}" * 21,
        "max_loops",
    ),
    "99 nested ifs": ("{% if a %}" * 99 + "x" + "{% endif %}" * 99, "max_blocks"),
    "400 nested ifs": ("{% if a %}" * 400 + "x" + "{% endif %}" * 400, "max_blocks"),
    "100 nested macros": ("{% macro m() %}" * 100 + "x" + "{% endmacro %}" * 100, "max_blocks"),
    "300-term sum": ("{{ " + "+".join(["a"] * 300) + " }}", "max_expression_depth"),
    "300 filters in a chain": ("{{ a" + "|trim" * 300 + " }}", "max_expression_depth"),
    "200 kB of source": ("x" * 200_000, "max_source"),
}


@pytest.mark.parametrize("case", NESTING_CASES.values(), ids=NESTING_CASES.keys())
def test_compile_time_limits(case):
    src, limit = case
    t0 = time.monotonic()
    with pytest.raises(TemplateError, match=rf"TemplateBudget\.{limit}"):
        ChatTemplate(src)
    assert time.monotonic() - t0 < 5


def test_a_file_with_a_broken_template_still_loads():
    """Compilation waits for the first render: the file stays usable for raw prompts."""

    class FakeGGUF:
        metadata = {"tokenizer.chat_template": "{% if a %}" * 99 + "x" + "{% endif %}" * 99}
        path = "hostile.gguf"

    tmpl = ChatTemplate.from_gguf(FakeGGUF())
    assert not tmpl.is_fallback
    for _ in range(2):  # the failure is kept, not recompiled
        with pytest.raises(TemplateError, match="max_blocks"):
            tmpl.render(MESSAGES)


def test_truncate_shorter_than_its_ending_is_a_template_error():
    refused("{{ 'abcdef'|truncate(1) }}", r"truncate: the length \(1\)")


# -- no Python internals in the output ----------------------------------------------------------

ADDRESS_CASES = {
    "a helper function": "{{ raise_exception }}",
    "a bound method": "{{ 'x'.upper }}",
    "a lazy map": "{{ messages|map(attribute='role') }}",
    "a cycler": "{{ cycler(1, 2) }}",
    "a joiner": "{{ joiner() }}",
    "a function turned into a string": "{{ strftime_now|string }}",
    "a function inside a list": "{{ [raise_exception] }}",
    "a function concatenated": "{{ 'x' ~ dict }}",
    "a function %-formatted": "{{ '%s' % namespace }}",
    "a loop object": "{% for m in messages %}{{ loop }}{% endfor %}",
}


@pytest.mark.parametrize("src", ADDRESS_CASES.values(), ids=ADDRESS_CASES.keys())
def test_output_never_shows_memory_addresses(src):
    refused(src, "Python internals")


def test_underscore_names_stop_the_render_even_when_missing():
    refused("{{ strftime_now.__globals__ }}", "not allowed")
    # ... but a data key that starts with an underscore is data
    out = ChatTemplate("{{ m['_id'] }}").render(MESSAGES, m={"_id": "7"})
    assert out == "7"


def test_a_namespace_that_contains_itself():
    refused("{% set ns = namespace() %}{% set ns.x = ns %}{{ ns }}", "contains itself")


def test_deeply_nested_messages_are_a_template_error():
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(TemplateError, match="nested too deeply"):
        ChatTemplate("{{ messages }}").render([{"role": "user", "content": deep}])


# -- real templates are unaffected ------------------------------------------------------------


def test_ordinary_templates_render_as_before():
    src = (
        "{% set ns = namespace(sys='') %}{% for m in messages %}{% if m.role == 'system' %}{% set ns.sys = m.content %}"
        "{% else %}<{{ m.role }}>{{ m.content | trim }}{{ '%s!' % loop.index }}{{ '{}/{}'.format(loop.index, loop.length) }}"
        "{% endif %}{% endfor %}{{ ns.sys | upper }}{{ [1, 2] }}{{ {'a': [1]} | tojson }}{{ messages | map(attribute='role') "
        "| join(',') }}{{ range(3) | list }}{{ 'a b'.split() }}{{ 10 ** 3 }}{{ lipsum(1, false, 5, 10)|length > 0 }}"
    )
    msgs = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": " hi "},
        {"role": "assistant", "content": "yo"},
    ]
    out = ChatTemplate(src).render(msgs)
    assert out == (
        "<user>hi2!2/3<assistant>yo3!3/3BE BRIEF[1, 2]{\"a\": [1]}system,user,assistant[0, 1, 2]['a', 'b']1000True"
    )
