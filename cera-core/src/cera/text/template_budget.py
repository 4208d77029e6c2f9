"""The budgets of the chat-template sandbox (`cera.text.template_sandbox`): the limits
(`TemplateBudget`), the watchdog that interrupts a render or a compilation past its time,
and the accounting of one render: what it has produced, and estimates of what an
operation would produce, refused before it runs when too much."""

from __future__ import annotations

import contextvars
import ctypes
import re
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

import attrs
import jinja2
from jinja2.runtime import LoopContext, Macro, Undefined
from markupsafe import Markup

from ..errors import TemplateError



@attrs.frozen
class TemplateBudget:
    """The limits one chat template works within (see the module docstring)."""

    seconds: float = 2.0  # wall time of one render
    max_output: int = 8 * 2**20  # characters of the prompt, and of any one value built
    max_produced: int = 32 * 2**20  # characters all operations of one render produce together
    max_range: int = 2_000_000  # items all range() calls of one render may produce
    max_int_bits: int = 65_536  # size of any integer a template computes
    compile_seconds: float = 10.0
    max_source: int = 128 * 1024  # characters of template source
    max_brackets: int = 32  # nesting of ( [ { and runs of unary operators
    max_blocks: int = 24  # nesting of block statements ({% for %}, {% if %}, {% macro %}, ...)
    max_loops: int = 16  # nesting of {% for %} loops
    max_expression_depth: int = 32  # nesting of any one expression's syntax tree


DEFAULT_BUDGET = TemplateBudget()


class BudgetExceeded(TemplateError):
    """A chat template hit one of its `TemplateBudget` limits."""


class _Interrupted(BaseException):
    """Raised into a render or compilation by the watchdog. A BaseException, so that no
    `except Exception` in a library filter swallows it."""


# -- the watchdog ---------------------------------------------------------------------------

_set_async_exc = getattr(getattr(ctypes, "pythonapi", None), "PyThreadState_SetAsyncExc", None)
if _set_async_exc is not None:
    _set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)
    _set_async_exc.restype = ctypes.c_int

WATCHDOG_GRACE_S = 0.25  # the cooperative checks get this long to stop the work first


class _Watchdog:
    """Raises `_Interrupted` in the calling thread if it is still inside the `with` block
    ``seconds`` after entering it. Where the interpreter offers no way to do that (not
    CPython), it does nothing and the cooperative checks alone bound the time."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.lock = threading.Lock()
        self.done = False
        self.fired = False
        self.thread_id = threading.get_ident()
        self.timer = None

    def _fire(self) -> None:
        with self.lock:
            if not self.done and not self.fired:
                self.fired = True
                _set_async_exc(self.thread_id, ctypes.py_object(_Interrupted))

    def __enter__(self):
        if _set_async_exc is not None and self.seconds > 0:
            self.timer = threading.Timer(self.seconds, self._fire)
            self.timer.daemon = True
            self.timer.start()
        return self

    def stop(self) -> None:
        if self.timer is None:
            return
        self.timer.cancel()
        with self.lock:
            self.done = True
            if self.fired:
                # Fired but maybe not yet delivered: withdraw it.
                _set_async_exc(self.thread_id, ctypes.py_object())

    def __exit__(self, *exc):
        self.stop()
        return False


def guarded(seconds: float, what: str, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, interrupted with a `BudgetExceeded` after ``seconds``."""
    watch = _Watchdog(seconds + WATCHDOG_GRACE_S)
    try:
        with watch:
            return fn(*args, **kwargs)
    except _Interrupted:
        watch.stop()
        raise BudgetExceeded(f"{what} took longer than its budget of {seconds:g} s") from None


# -- per-render accounting ------------------------------------------------------------------


class _Render:
    """What one render has spent so far."""

    def __init__(self, budget: TemplateBudget):
        self.budget = budget
        self.deadline = time.monotonic() + budget.seconds
        self.produced = 0
        self.range_left = budget.max_range
        # id -> (object, weight, opaque) for containers that cannot change (not namespaces);
        # the object is kept so that its id is not reused while the render runs.
        self.weights: dict[int, tuple[Any, int, str | None]] = {}

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise BudgetExceeded(
                f"the chat template ran past its time budget of {self.budget.seconds:g} s (TemplateBudget.seconds)"
            )

    def refuse_size(self, what: str, size: int) -> None:
        raise BudgetExceeded(
            f"the chat template would build {what} of about {size} characters, over its limit of "
            f"{self.budget.max_output} (TemplateBudget.max_output)"
        )

    def check_size(self, what: str, size: int) -> None:
        if size > self.budget.max_output:
            self.refuse_size(what, size)

    def produce(self, n: int) -> None:
        self.produced += n
        if self.produced > self.budget.max_produced:
            raise BudgetExceeded(
                f"the chat template produced more than {self.budget.max_produced} characters in all "
                f"(TemplateBudget.max_produced)"
            )

    def check_int(self, value: int) -> None:
        if value.bit_length() > self.budget.max_int_bits:
            raise BudgetExceeded(
                f"the chat template computed an integer of {value.bit_length()} bits, over its limit of "
                f"{self.budget.max_int_bits} (TemplateBudget.max_int_bits)"
            )

    # -- sizes of values ------------------------------------------------------------------

    def weight(self, value: Any) -> tuple[int, str | None]:
        """(characters and items ``value`` holds, shared parts counted each time; the type
        name of a function or other object inside it, whose text would show Python internals,
        or None). Stops counting a little past ``max_output``."""
        self._visits = 0
        w, opaque, _ = self._weight(value, 0, ())
        return w, opaque

    def _weight(self, v: Any, depth: int, path: tuple) -> tuple[int, str | None, bool]:
        """(weight, opaque, mutable): ``mutable`` when a namespace or cycler is inside, whose
        contents may change later (such values are not cached)."""
        t = type(v)
        if t is str or t is Markup or t is bytes or t is bytearray:
            return len(v) + 1, None, False
        if t is int:
            return 1 + v.bit_length() // 64, None, False
        if t is float or t is bool or v is None or isinstance(v, Undefined):
            return 1, None, False
        if t is range:
            return 1 + len(v), None, False
        if isinstance(v, str):
            return len(v) + 1, None, False
        cached = self.weights.get(id(v))
        if cached is not None and cached[0] is v:
            return cached[1], cached[2], False
        self._visits += 1
        if not self._visits & 0x3FF:
            self.tick()
        mutable = False
        if isinstance(v, Mapping):
            parts = [x for kv in v.items() for x in kv]
        elif isinstance(v, (list, tuple, set, frozenset)):
            parts = v
        elif t in _DICT_VIEWS:
            parts = (v.mapping,)
        elif isinstance(v, jinja2.utils.Namespace):
            if id(v) in path:
                raise TemplateError("the chat template built a namespace that contains itself")
            path = (*path, id(v))
            parts = list(_namespace_items(v).values())
            mutable = True
        elif isinstance(v, jinja2.utils.Cycler):
            parts = v.items
            mutable = True
        else:
            return 1, _kind(v), False
        if depth > 100:  # deeper than any real data: measured without recursion, uncached
            return (*self._flat_weight(v), True)
        limit = self.budget.max_output
        total = 1
        opaque = "cycler" if isinstance(v, jinja2.utils.Cycler) else None
        for part in parts:
            tp = type(part)
            if tp is str:
                total += len(part) + 1
            elif tp is int or tp is float or tp is bool or part is None:
                total += 1
            else:
                w, o, m = self._weight(part, depth + 1, path)
                total += w
                opaque = opaque or o
                mutable = mutable or m
            if total > limit:
                return total, opaque, True  # over the limit: never cached
        if not mutable:
            self.weights[id(v)] = (v, total, opaque)
        return total, opaque, mutable

    def _flat_weight(self, value: Any) -> tuple[int, str | None]:
        limit = self.budget.max_output
        total = 0
        opaque = None
        stack = [value]
        while stack:
            v = stack.pop()
            self._visits += 1
            if not self._visits & 0x3FF:
                self.tick()
            t = type(v)
            if isinstance(v, (str, bytes, bytearray)):
                total += len(v) + 1
            elif t is int or t is float or t is bool or v is None or t is range or isinstance(v, Undefined):
                total += 1
            elif isinstance(v, Mapping):
                total += 1
                stack.extend(v.keys())
                stack.extend(v.values())
            elif isinstance(v, (list, tuple, set, frozenset)):
                total += 1
                stack.extend(v)
            elif isinstance(v, jinja2.utils.Namespace):
                total += 1
                stack.extend(_namespace_items(v).values())
            elif isinstance(v, jinja2.utils.Cycler):
                total += 1
                stack.extend(v.items)
            elif t in _DICT_VIEWS:
                stack.append(v.mapping)
            else:
                total += 1
                opaque = opaque or _kind(v)
            if total > limit:
                break
        return total, opaque

    def check_value(self, what: str, value: Any) -> None:
        """Refuse a value (a container) larger than ``max_output``."""
        t = type(value)
        if t is str or t is Markup or t is bytes:
            self.check_size(what, len(value))
        elif t is int:
            self.check_int(value)
        elif t in (list, tuple, dict, set, frozenset) or isinstance(value, jinja2.utils.Namespace):
            w, _ = self.weight(value)
            self.check_size(what, w)

    def text_weight(self, what: str, value: Any) -> int:
        """The size of ``str(value)`` (bounded), refusing values whose text would show
        Python internals."""
        t = type(value)
        if t is str or t is Markup:
            return len(value)
        w, opaque = self.weight(value)
        if opaque:
            raise TemplateError(
                f"the chat template tried to turn a {opaque} into text ({what}); its text would show "
                f"Python internals, so cera refuses it"
            )
        # str() of a container adds quotes, commas and spaces around each part.
        return w if t in (int, float, bool, bytes) or value is None else 4 * w


def _namespace_items(ns) -> dict:
    return object.__getattribute__(ns, "_Namespace__attrs")


_DICT_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))


def _kind(v) -> str:
    if isinstance(v, Macro):
        return "macro"
    if isinstance(v, LoopContext):
        return "loop object"
    if callable(v):
        return "function"
    return f"{type(v).__name__} object"


_current: contextvars.ContextVar[_Render | None] = contextvars.ContextVar("cera_template_render", default=None)


def _render_state() -> _Render:
    state = _current.get()
    if state is None:
        # Only a render sets it; anything else (jinja folding constants at compile time,
        # which these filters opt out of) gets the default budget.
        state = _Render(DEFAULT_BUDGET)
    return state


# -- estimates of what one operation produces -----------------------------------------------

_DIGITS = re.compile(r"\d+")


def _spec_digits(fmt: str) -> int:
    """The sum of the numbers written in a format string (widths and precisions)."""
    total = 0
    for m in _DIGITS.finditer(fmt):
        s = m.group()
        total += int(s) if len(s) < 12 else 10**12
    return total


def _int_args(values) -> int:
    return sum(abs(v) for v in values if type(v) is int)


def _check_int_args(state: _Render, what: str, args, kwargs) -> None:
    """Any integer argument is a potential width or count: none may exceed ``max_output``."""
    for v in (*args, *kwargs.values()):
        if type(v) is int and abs(v) > state.budget.max_output:
            state.refuse_size(f"{what} with an argument of {v}", abs(v))


def _percent_estimate(state: _Render, fmt: str, right: Any) -> int:
    if isinstance(right, Mapping):
        values = list(right.values())
        fan = fmt.count("%")
        biggest = max((state.text_weight("a % format argument", v) for v in values), default=0)
        return len(fmt) + _spec_digits(fmt) + fan * biggest
    values = right if isinstance(right, tuple) else (right,)
    total = sum(state.text_weight("a % format argument", v) for v in values)
    return len(fmt) + _spec_digits(fmt) + total + _int_args(values)


def _format_estimate(state: _Render, fmt: str, args, kwargs) -> int:
    values = [*args, *kwargs.values()]
    biggest = max((state.text_weight("a format() argument", v) for v in values), default=0)
    return len(fmt) + _spec_digits(fmt) + fmt.count("{") * biggest + _int_args(values)


def _replace_estimate(s, old, new, count=-1) -> int:
    if not isinstance(s, (str, bytes)) or not isinstance(old, (str, bytes)) or not isinstance(new, (str, bytes)):
        return 0
    n = s.count(old) if old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        n = min(n, count)
    return len(s) + n * max(0, len(new) - len(old))


def _join_estimate(state: _Render, sep, items: list) -> int:
    sep_len = len(sep) if isinstance(sep, (str, bytes)) else state.text_weight("a join separator", sep)
    return sum(state.text_weight("an item of join", x) for x in items) + max(0, len(items) - 1) * sep_len


class _StrMethod:
    """A method of a str (or bytes) value, bound, with a size estimate before it runs."""

    def __init__(self, owner, name: str, method):
        self.owner = owner
        self.name = name
        self.method = method

    def __call__(self, *args, **kwargs):
        state = _render_state()
        state.tick()
        s, name = self.owner, self.name
        what = f"{type(s).__name__}.{name}()"
        _check_int_args(state, what, args, kwargs)
        est = len(s)
        if name in ("center", "ljust", "rjust", "zfill"):
            est = max(len(s), *(v for v in args[:1] if type(v) is int))
        elif name == "expandtabs":
            size = args[0] if args else kwargs.get("tabsize", 8)
            est = len(s) + s.count("\t" if isinstance(s, str) else b"\t") * (size if type(size) is int else 8)
        elif name == "replace":
            est = _replace_estimate(s, *args, **kwargs)
        elif name == "join":
            items = list(args[0]) if args else []
            state.produce(len(items))
            est = _join_estimate(state, s, items)
            state.check_size(f"a string from {what}", est)
            args = (items,)
        elif name in ("format", "format_map"):
            fmt_args = args if name == "format" else ()
            fmt_kwargs = kwargs if name == "format" else (args[0] if args and isinstance(args[0], Mapping) else {})
            est = _format_estimate(state, s, fmt_args, fmt_kwargs)
        elif name == "translate":
            table = args[0] if args else None
            if isinstance(table, Mapping):
                biggest = max((state.text_weight("a translate() value", v) for v in table.values()), default=1)
                est = len(s) * max(1, biggest)
        state.check_size(f"a string from {what}", est)
        result = self.method(*args, **kwargs)
        _account(state, what, result)
        return result

    def __repr__(self) -> str:
        return f"<method {self.name} of a {type(self.owner).__name__}>"


# Methods of str/bytes whose output can be far larger than their inputs.
_SIZED_METHODS = frozenset(
    ["center", "ljust", "rjust", "zfill", "expandtabs", "replace", "join", "format", "format_map", "translate"]
)


def _account(state: _Render, what: str, result) -> None:
    """Count and bound what an operation produced."""
    t = type(result)
    if t is str or t is Markup or t is bytes or t is bytearray:
        state.produce(len(result))
        state.check_size(f"a string from {what}", len(result))
    elif t is int:
        state.check_int(result)
    elif t is float or t is bool or result is None:
        pass
    else:
        if isinstance(result, (list, tuple, dict, set, frozenset)):
            state.produce(len(result))
        w, _ = state.weight(result)
        state.check_size(f"a value from {what}", w)


if sys.implementation.name != "cpython":  # pragma: no cover - documented: cooperative checks only
    _set_async_exc = None

__all__ = ["DEFAULT_BUDGET", "BudgetExceeded", "TemplateBudget", "guarded"]
