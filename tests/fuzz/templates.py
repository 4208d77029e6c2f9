"""Hostile chat templates: a corpus of known attack shapes, and a generator of nested and
expensive ones.

The corpus covers sandbox escapes (the CVE-2024-34359 payload shapes and their cousins),
time sinks (nested loops, exponential recursion, big integers), size bombs (repetition,
widths, replace/join/format fan-out, self-sharing structures), compile-time bombs (deep
nesting of brackets, blocks and expressions, huge sources), information leaks (printing
functions and objects) and plain breakage (syntax errors, missing variables, wrong types).

`generate(rng)` builds random templates from a small grammar of jinja constructs, biased
towards nesting, loops, macros, recursion and the operations with large outputs, with
parameters drawn from interesting values. The fuzz tests render both under a small budget
and accept only a rendered prompt or a `TemplateError`.
"""

from __future__ import annotations

import random

CORPUS = [
    # escapes
    "{% for x in ().__class__.__base__.__subclasses__() %}{% if 'warning' in x.__name__ %}"
    "{{ x()._module.__builtins__['__import__']('os').popen('id') }}{% endif %}{% endfor %}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ self.__init__.__globals__.__builtins__.__import__('os').system('id') }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{{ joiner.__init__.__globals__.os }}",
    "{{ lipsum.__globals__['os'] }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ raise_exception.__globals__ }}",
    "{{ ''|attr('__class__')|attr('__mro__') }}",
    "{{ '{0.__class__.__mro__}'.format(1) }}",
    "{{ '{0.__class__}'.format_map({}) }}",
    "{{ messages.pop() }}{{ {}.update(x=1) }}",
    "{% set ns = namespace(__init__=1) %}",
    "{% import 'os' as os %}",
    "{% include '/etc/passwd' %}",
    "{% extends 'base.html' %}",
    "{{ dict.__call__.__globals__ }}",
    "{{ messages|map(attribute='__class__')|list }}",
    "{{ (messages|attr('__len__'))() }}",
    "{{ range.__self__ }}",
    # time
    "{% set s = 'x' * 100000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}",
    "{% macro f(n) %}{% if n > 0 %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}{{ f(50) }}",
    "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "{% for x in [1] recursive %}{{ loop([1, 1]) }}{% endfor %}",
    "{{ 9 ** 9 ** 9 }}",
    "{{ (2 ** 9999) ** 9999 }}",
    "{% set ns = namespace(x=3) %}{% for i in range(64) %}{% set ns.x = ns.x * ns.x %}{% endfor %}",
    "{{ lipsum(10**7) }}",
    "{{ range(10000000000)|list }}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{{ ('<' * 1000000)|striptags }}",
    "{{ ('a ' * 1000000)|wordwrap(1) }}",
    "{{ ('http://x.y ' * 200000)|urlize }}",
    "{{ ('a' * 1000000)|title }}",
    # size
    "{{ 'A' * 100000000 }}",
    "{{ [0] * 100000000 }}",
    "{{ 'x'|center(1000000000) }}",
    "{{ '%999999999s' % 'x' }}",
    "{{ '{:>999999999}'.format('x') }}",
    "{% set s = 'a' * 100000 %}{{ s.replace('a', s) }}",
    "{% set s = 'a' * 1000000 %}{{ s|join(s) }}",
    "{{ ('{0}' * 300000).format('x' * 100000) }}",
    "{% set ns = namespace(x=[1]) %}{% for i in range(80) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x }}",
    "{% set ns = namespace(x=(1,)) %}{% for i in range(80) %}{% set ns.x = (ns.x, ns.x) %}{% endfor %}{{ {ns.x: 1} }}",
    "{% set ns = namespace(x='ab') %}{% for i in range(80) %}{% set ns.x = ns.x ~ ns.x %}{% endfor %}",
    "{% set ns = namespace(x=[1]) %}{% for i in range(300) %}{% set ns.x = [ns.x] %}{% endfor %}"
    "{{ ns.x|tojson(indent=1000000) }}",
    "{{ range(2000)|map('center', 5000000)|join }}",
    "{{ (1).to_bytes(1000000000, 'big') }}",
    "{{ ('\t' * 100000).expandtabs(100000) }}",
    "{{ ('a' * 100000).translate({97: 'b' * 100000}) }}",
    "{{ 5|round(-100000000) }}",
    "{% set ns = namespace() %}{% set ns.x = ns %}{{ ns }}",
    "{% set c = cycler(1, 2) %}{% set ns = namespace(x=[1]) %}{% for i in range(80) %}"
    "{% set ns.x = cycler(ns.x, ns.x).items %}{% endfor %}{{ ns.x == ns.x }}",
    # compile time
    "{{ " + "(" * 500 + "1" + ")" * 500 + " }}",
    "{{ " + "[" * 500 + "1" + "]" * 500 + " }}",
    "{{ " + "not " * 2000 + "1 }}",
    "{{ " + "-" * 2000 + "1 }}",
    "".join(f"{{% for x{i} in y %}}" for i in range(40)) + "{% endfor %}" * 40,
    "{% if a %}" * 500 + "{% endif %}" * 500,
    "{% macro m() %}" * 200 + "{% endmacro %}" * 200,
    "{{ " + "+".join(["a"] * 3000) + " }}",
    "{{ a" + "|trim" * 3000 + " }}",
    "{{ a" + ".b" * 3000 + " }}",
    "{{ a" + "[0]" * 3000 + " }}",
    "x" * 2_000_000,
    "{% raw %}" + "{{" * 100000 + "{% endraw %}",
    # leaks
    "{{ raise_exception }}{{ strftime_now }}{{ namespace }}{{ dict }}{{ range }}",
    "{{ 'x'.upper }}{{ messages.copy }}",
    "{{ messages|map(attribute='role') }}",
    "{{ cycler(1) }}{{ joiner() }}",
    "{% for m in messages %}{{ loop }}{% endfor %}",
    "{{ self }}",
    "{{ [raise_exception]|string }}",
    # breakage
    "{% if %}",
    "{{ }}",
    "{% for %}",
    "{{ messages[99].content }}",
    "{{ messages.content.missing.deeper }}",
    "{{ 1 / 0 }}{{ 1 // 0 }}{{ 1 % 0 }}",
    "{{ 'abc'|truncate(1) }}",
    "{{ 'x'|int(base=99) }}",
    "{{ none.x }}",
    "{{ raise_exception('nope') }}",
    "{{ strftime_now('%' * 100000) }}",
    "{{ messages|sort(attribute='nope')|list }}",
    "{{ messages|groupby('role')|list }}",
    "{{ messages|sum }}",
    "{{ messages|dictsort }}",
    "{{ tools|tojson }}{{ documents|tojson }}",
    "{{ '%s %s' % 'x' }}",
    "{{ '{} {}'.format('x') }}",
    "{{ '\\udcff' ~ bos_token }}",
]

_ATOMS = ["'x'", "'ab' * 1000", "messages", "messages[0]", "messages[0].content", "ns.v", "range(1000)", "[1, 2, 3]",
          "{'a': [1, 2]}", "bos_token", "1000000", "2 ** 64", "none", "tools", "n", "(1, 2)"]  # fmt: skip
_FILTERS = ["trim", "upper", "string", "list", "length", "tojson", "join(',')", "join('x' * 100)", "center(100000)",
            "replace('a', 'aaaa')", "indent(100)", "first", "last", "reverse", "unique", "sort", "sum", "pprint",
            "wordwrap(3)", "truncate(10)", "map('string')", "batch(3)", "slice(2)", "tojson(indent=8)", "format('x')",
            "title", "striptags", "urlize", "d('y')", "int", "float", "abs", "round(2)", "escape", "items",
            "selectattr('role')", "groupby('role')", "xmlattr", "wordcount", "filesizeformat", "random"]  # fmt: skip
_OPS = ["+", "~", "*", "%", "**", "//", "-", "==", "in", "and", "or"]
_INTS = [0, 1, 2, 3, 10, 64, 1000, 100000, 10**9, 2**31, -1]


def _expr(rng: random.Random, depth: int) -> str:
    r = rng.random()
    if depth <= 0 or r < 0.25:
        return rng.choice(_ATOMS + [str(rng.choice(_INTS))])
    if r < 0.4:  # mostly text, as templates build
        return f"({_expr(rng, depth - 1)})|string ~ ({_expr(rng, depth - 1)})|string"
    if r < 0.5:
        return f"({_expr(rng, depth - 1)}) {rng.choice(_OPS)} ({_expr(rng, depth - 1)})"
    if r < 0.7:
        return f"({_expr(rng, depth - 1)})|{rng.choice(_FILTERS)}"
    if r < 0.8:
        return f"[{_expr(rng, depth - 1)}, {_expr(rng, depth - 1)}]"
    if r < 0.9:
        return f"m({rng.choice(_INTS[:6])}, {_expr(rng, depth - 1)})"
    method = rng.choice(["center", "ljust", "replace", "join", "split", "format", "expandtabs", "zfill", "strip"])
    args = {"center": str(rng.choice(_INTS)), "ljust": str(rng.choice(_INTS)), "zfill": str(rng.choice(_INTS)),
            "expandtabs": str(rng.choice(_INTS)), "replace": "'a', 'aa'", "join": _expr(rng, depth - 1),
            "split": "", "format": _expr(rng, depth - 1), "strip": ""}[method]  # fmt: skip
    return f"({_expr(rng, depth - 1)}|string).{method}({args})"


def _block(rng: random.Random, depth: int) -> str:
    if depth <= 0:
        return "{{ " + _expr(rng, 2) + " }}"
    r = rng.random()
    inner = "".join(_block(rng, depth - 1) for _ in range(rng.randint(1, 3)))
    if r < 0.3:
        it = rng.choice(["messages", f"range({rng.choice(_INTS[1:8])})", f"'x' * {rng.choice(_INTS[1:8])}",
                         _expr(rng, 1)])  # fmt: skip
        return f"{{% for n in {it} %}}{inner}{{% endfor %}}"
    if r < 0.45:
        return f"{{% if {_expr(rng, 1)} %}}{inner}{{% else %}}{_block(rng, depth - 1)}{{% endif %}}"
    if r < 0.6:
        return f"{{% set ns.v = {_expr(rng, 2)} %}}{inner}"
    if r < 0.7:
        return f"{{% set ns.v = [ns.v, ns.v] %}}{inner}"
    if r < 0.8:
        return f"{{% filter {rng.choice(['upper', 'trim', 'center(1000)'])} %}}{inner}{{% endfilter %}}"
    if r < 0.9:
        return f"{{% set blk %}}{inner}{{% endset %}}{{{{ blk ~ blk }}}}"
    return inner


def generate(rng: random.Random) -> str:
    """One random template: a (maybe recursive) macro, a namespace, nested blocks."""
    recursive = rng.random() < 0.4
    body = _block(rng, rng.randint(1, 4))
    call = "{{ m(n - 1, k) }}{{ m(n - 1, k) }}" if recursive else "{{ n }}"
    macro = f"{{% macro m(n, k) %}}{{% if n > 0 %}}{call}{{% endif %}}{{% endmacro %}}"
    return "{% set ns = namespace(v=1) %}" + macro + body + ("{{ m(30, 1) }}" if recursive else "")
