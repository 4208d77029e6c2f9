"""What the hostile-input fuzz tests share: hypothesis settings for the default run (a few
dozen examples, each with a deadline, the same examples every run) and for the ``slow``
variant (thousands, fresh ones each run), and strategies for the parts of names, JSON and
numbers that break parsers."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

_COMMON = dict(database=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                                     HealthCheck.data_too_large])  # fmt: skip


def quick(examples: int = 40, deadline_ms: int = 5000):
    """Settings of a fuzz test in the default run: bounded in count and time, reproducible."""
    return settings(max_examples=examples, deadline=deadline_ms, derandomize=True, **_COMMON)


def long(examples: int = 2000, deadline_ms: int = 20000):
    """Settings of its ``slow`` variant (``--run-slow``)."""
    return settings(max_examples=examples, deadline=deadline_ms, **_COMMON)


# pieces that path handling, JSON schemas and parsers get wrong
PATH_PARTS = ["..", ".", "", "/", "\\", "~", "\x00", "\n", "%2e%2e", "..%2f", "C:", "//", "a", "x.gguf", "\u202e",
              "\udcff", " ", "-", ".git", "CON"]  # fmt: skip

names = st.lists(st.sampled_from(PATH_PARTS) | st.text(max_size=8), min_size=1, max_size=6).map("/".join) | st.text(max_size=40)

INTERESTING_INTS = [0, 1, -1, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**63, -(2**63), 10**30]
ints = st.sampled_from(INTERESTING_INTS) | st.integers()
scalars = st.none() | st.booleans() | ints | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                           max_leaves=20)  # fmt: skip
