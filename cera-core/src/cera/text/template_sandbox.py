"""The sandbox chat templates run in: jinja2's immutable sandbox, plus budgets.

A chat template is code that comes with a model file, so it is untrusted. jinja2's
sandbox stops it from reaching Python internals; it does not stop it from spending
unbounded time or memory: nested loops over a long string, exponential macro recursion,
`center(10**9)`, a `replace` that multiplies a string, a list built by doubling itself
forty times. This module bounds all of that, and states the bounds (`TemplateBudget`):

**Compile time** (a template is compiled once, on its first render):
- ``max_source`` characters of source;
- nesting: brackets and unary operators (checked on the tokens, before jinja's recursive
  parser runs), block statements and `for` loops (Python refuses more than 20 nested
  loops), and the depth of any one expression (jinja's code generator is quadratic in it);
- ``compile_seconds`` of wall time.

**Render time**:
- ``seconds`` of wall time per render;
- ``max_output`` characters: the rendered prompt, and any one value the template builds
  (a string's length; a list, tuple or dict counts the characters and items it holds,
  and a part it holds twice counts twice, so structures that share parts cannot grow
  exponentially behind a small size);
- ``max_produced`` characters that all the operations of one render produce together
  (each string a filter, method, operator or output statement makes counts, so memory
  stays bounded even when each single value is within ``max_output``).

Every limit, when hit, stops the render with a `TemplateError` naming it.

How it is enforced:
- the template's syntax tree is rewritten before jinja compiles it: every `for` loop
  iterates through a checkpoint, every output statement and `~` concatenation goes
  through one that measures it, and every list, tuple and dict literal is measured when
  it is built (filters with the context argument, which also keeps jinja from running
  them at compile time);
- every call (functions, macros, methods), every filter and every arithmetic operator
  goes through a checkpoint that checks the clock, refuses arguments that would make one
  operation produce more than ``max_output`` (widths, repeat counts, the fan-out of
  `replace`, `join`, `format` and `%`, big-integer sizes) before it runs, and measures
  its result after;
- a watchdog thread interrupts the render (or the compilation) shortly after its time
  budget, in case time goes somewhere no checkpoint sees (a library filter's own loop).

Output never shows Python internals: turning a function, method, macro or other object
into text (whose default text is its memory address) is refused.

The limits, the watchdog and the accounting of a render are `cera.text.template_budget`;
this module holds the environment, the budgeted filters, the syntax-tree rewrite and the
compile-time checks.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping

import jinja2
import jinja2.ext
import jinja2.nodes as nodes
import jinja2.utils
from jinja2.exceptions import SecurityError
from jinja2.runtime import Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range
from jinja2.utils import _PassArg, pass_context
from markupsafe import Markup

from ..errors import TemplateError
from .template_budget import (
    BudgetExceeded,
    TemplateBudget,
    _account,
    _check_int_args,
    _current,
    _join_estimate,
    _percent_estimate,
    _Render,
    _render_state,
    _replace_estimate,
    _SIZED_METHODS,
    _StrMethod,
    guarded,
)


# -- filters --------------------------------------------------------------------------------


def _filter_estimate(state: _Render, name: str, value, args, kwargs) -> int | None:
    """What a filter with a large fan-out may produce, before it runs (None: at most a
    small multiple of its input, measured after)."""

    def arg(i, key, default):
        return args[i] if len(args) > i else kwargs.get(key, default)

    if name not in _SIZED_FILTERS:
        return _guard_filter(state, name, args, kwargs)
    size = len(value) if isinstance(value, str) else state.text_weight(f"the input of |{name}", value)
    if name == "center":
        width = arg(0, "width", 80)
        return max(size, width if type(width) is int else 0)
    if name == "indent":
        width = arg(0, "width", 4)
        per_line = len(width) if isinstance(width, str) else (width if type(width) is int else 4)
        lines = (value.count("\n") if isinstance(value, str) else size) + 1
        return size + lines * per_line
    if name == "wordwrap":
        wrap = arg(2, "wrapstring", None)
        return size + (size + 1) * (len(wrap) if isinstance(wrap, str) else 2)
    if name == "urlize":
        extra = sum(len(x) for x in (arg(3, "target", None), arg(4, "rel", None)) if isinstance(x, str))
        return size * (8 + extra)
    if name == "replace":
        if isinstance(value, str):
            return _replace_estimate(value, *args, **kwargs)
        new = args[1] if len(args) > 1 else kwargs.get("new", "")
        return size + (size + 1) * (len(new) if isinstance(new, str) else 0)
    if name == "format":
        if args and kwargs:
            return None  # jinja refuses both
        return _percent_estimate(state, value if isinstance(value, str) else "", kwargs or tuple(args))
    if name == "tojson":
        indent = arg(0, "indent", None)
        depth = _depth(value)
        step = indent if type(indent) is int else len(indent) if isinstance(indent, str) else 0
        return 2 * size * (1 + depth * max(0, step))
    if name == "striptags":
        # markupsafe removes one tag per pass over the whole string: quadratic in the tags.
        tags = value.count("<") if isinstance(value, str) else 0
        if tags * size > 50 * state.budget.max_output:
            raise BudgetExceeded(
                f"|striptags on a text of {size} characters with {tags} tags would take too long "
                f"(TemplateBudget.max_output)"
            )
        return size
    return None


_SIZED_FILTERS = frozenset(["center", "indent", "wordwrap", "urlize", "replace", "format", "tojson", "striptags"])


def _guard_filter(state: _Render, name: str, args, kwargs) -> None:
    """Filters whose arguments alone can make them misbehave."""

    def arg(i, key, default):
        return args[i] if len(args) > i else kwargs.get(key, default)

    if name == "sum":
        start = arg(1, "start", 0)
        if not isinstance(start, (int, float)):
            raise TemplateError("|sum adds numbers; a start value that is not a number is refused")
        return None
    if name == "round":
        precision = arg(0, "precision", 0)
        if type(precision) is int and abs(precision) > 400:
            raise TemplateError(f"|round with a precision of {precision} digits is refused (at most 400)")
        return None
    if name == "truncate":
        length = arg(0, "length", 255)
        end = arg(2, "end", "...")
        if type(length) is int and isinstance(end, str) and length < len(end):
            raise TemplateError(f"|truncate: the length ({length}) must be at least that of the end text ({end!r})")
        return None
    return None


def _depth(value, limit: int = 1000) -> int:
    depth = 0
    stack = [(value, 1)]
    seen = 0
    while stack:
        v, d = stack.pop()
        seen += 1
        if seen > 1_000_000 or d > limit:
            return d
        if isinstance(v, (list, tuple)):
            depth = max(depth, d)
            stack.extend((x, d + 1) for x in v)
        elif isinstance(v, dict):
            depth = max(depth, d)
            stack.extend((x, d + 1) for x in v.values())
    return depth


# Filters that stringify their input: refusing opaque input there keeps addresses out.
def _wrap_filter(name: str, fn):
    pass_arg = _PassArg.from_obj(fn)

    @pass_context
    @functools.wraps(fn)
    def checked(context, value, *args, **kwargs):
        state = _render_state()
        state.tick()
        what = f"|{name}"
        _check_int_args(state, what, args, kwargs)
        if name == "join":
            # Materialized first, so that its size is known; items picked by `attribute`
            # are parts of these, so the estimate bounds them too.
            value = list(value) if not isinstance(value, str) else value
            sep = args[0] if args else kwargs.get("d", "")
            state.check_size(f"a string from {what}", _join_estimate(state, sep, list(value)))
        else:
            est = _filter_estimate(state, name, value, args, kwargs)
            if est is not None:
                state.check_size(f"a string from {what}", est)
        if pass_arg is _PassArg.context:
            result = fn(context, value, *args, **kwargs)
        elif pass_arg is _PassArg.eval_context:
            result = fn(context.eval_ctx, value, *args, **kwargs)
        elif pass_arg is _PassArg.environment:
            result = fn(context.environment, value, *args, **kwargs)
        else:
            result = fn(value, *args, **kwargs)
        if isinstance(result, str) and name not in _DATA_FILTERS:
            state.text_weight(f"the input of {what}", value)  # refuses opaque input
            for a in (*args, *kwargs.values()):
                state.text_weight(f"an argument of {what}", a)
        _account(state, what, result)
        return result

    return checked


# Filters that return a str without turning their input into text.
_DATA_FILTERS = frozenset(["filesizeformat", "tojson", "length", "count", "wordcount"])


# -- the syntax-tree rewrite ----------------------------------------------------------------

F_ITER, F_EMIT, F_CONCAT, F_VALUE = "cera:iter", "cera:emit", "cera:concat", "cera:value"


def _filter(node: nodes.Expr, name: str) -> nodes.Filter:
    return nodes.Filter(node, name, [], [], None, None, lineno=node.lineno)


def _rewrite(tree: nodes.Template) -> None:
    """Route loops, output, concatenation and literals through the checkpoints."""
    stack: list[nodes.Node] = [tree]
    while stack:
        node = stack.pop()
        for field in node.fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, nodes.Node):
                        stack.append(item)
                        replaced = _replacement(node, field, item)
                        if replaced is not None:
                            value[i] = replaced
            elif isinstance(value, nodes.Node):
                stack.append(value)
                replaced = _replacement(node, field, value)
                if replaced is not None:
                    setattr(node, field, replaced)


def _replacement(parent: nodes.Node, field: str, node: nodes.Node):
    if isinstance(parent, nodes.Filter) and parent.name.startswith("cera:"):
        return None  # already routed
    inner = node
    if isinstance(node, nodes.Concat):
        inner = _filter(nodes.List(node.nodes, lineno=node.lineno), F_CONCAT)
    elif isinstance(node, (nodes.List, nodes.Dict)) or (isinstance(node, nodes.Tuple) and node.ctx == "load"):
        inner = _filter(node, F_VALUE)
    if isinstance(parent, nodes.For) and field == "iter":
        return _filter(inner, F_ITER)
    if isinstance(parent, nodes.Output) and field == "nodes":
        return _filter(inner, F_EMIT)
    return inner if inner is not node else None


@pass_context
def _iter(context, iterable):
    state = _render_state()
    state.tick()
    return _CheckedIter(iterable, state)


class _CheckedIter:
    """An iterable that checks the clock at every item (and keeps len() for `loop`)."""

    def __init__(self, iterable, state: _Render):
        self.iterable = iterable
        self.state = state

    def __iter__(self):
        tick = self.state.tick
        for item in self.iterable:
            tick()
            yield item

    def __len__(self):
        return len(self.iterable)


@pass_context
def _emit(context, value):
    state = _render_state()
    state.tick()
    t = type(value)
    if t is str or t is Markup:
        state.produce(len(value))
        return value
    size = state.text_weight("an output statement", value)
    state.check_size("output", size)
    text = str(value)
    state.produce(len(text))
    return text


@pass_context
def _concat(context, parts):
    state = _render_state()
    state.tick()
    size = sum(state.text_weight("a ~ concatenation", p) for p in parts)
    state.check_size("a string from ~", size)
    text = "".join(map(str, parts))
    state.produce(len(text))
    return text


@pass_context
def _value(context, value):
    state = _render_state()
    state.tick()
    _account(state, "a literal", value)
    return value


# -- compile-time limits --------------------------------------------------------------------

_BLOCK_TAGS = frozenset(["for", "if", "macro", "call", "filter", "set", "with", "block", "generation", "autoescape"])
_OPEN = frozenset(["lparen", "lbracket", "lbrace"])
_CLOSE = frozenset(["rparen", "rbracket", "rbrace"])
_UNARY = frozenset(["not", "sub", "add"])


def _check_tokens(env: jinja2.Environment, source: str, budget: TemplateBudget, label: str) -> None:
    """Nesting limits checked on the token stream, before jinja's recursive parser runs."""
    brackets = unary = blocks = 0
    after_block_begin = False
    set_is_block = False
    prev = None
    for tok in env.lexer.tokenize(source):
        typ, val = tok.type, tok.value
        if typ in _OPEN:
            brackets += 1
            if brackets > budget.max_brackets:
                _nest_error(label, f"nests brackets deeper than {budget.max_brackets}", tok.lineno, "max_brackets")
        elif typ in _CLOSE:
            brackets -= 1
        if (typ == "name" and val == "not") or (typ in ("sub", "add") and prev in _OPERATOR_BEFORE_UNARY):
            unary += 1
            if unary > budget.max_brackets:
                _nest_error(
                    label, f"chains more than {budget.max_brackets} unary operators", tok.lineno, "max_brackets"
                )
        else:
            unary = 0
        if after_block_begin and typ == "name":
            if val in _BLOCK_TAGS:
                blocks += 1
                set_is_block = val == "set"
                if blocks > budget.max_blocks:
                    _nest_error(
                        label, f"nests block statements deeper than {budget.max_blocks}", tok.lineno, "max_blocks"
                    )
            elif val.startswith("end") and val[3:] in _BLOCK_TAGS:
                blocks -= 1
        if set_is_block and typ == "assign":
            blocks -= 1  # {% set x = ... %} has no end tag
            set_is_block = False
        if typ == "block_end":
            set_is_block = False
        after_block_begin = typ == "block_begin"
        prev = typ


_OPERATOR_BEFORE_UNARY = frozenset(
    [None, "variable_begin", "block_begin", "lparen", "lbracket", "lbrace", "comma", "colon", "sub", "add", "mul",
     "div", "floordiv", "mod", "pow", "tilde", "eq", "ne", "lt", "lteq", "gt", "gteq", "assign", "pipe"]
)  # fmt: skip


def _nest_error(label: str, what: str, line: int, limit: str):
    raise BudgetExceeded(f"chat template{label} {what} (line {line}; TemplateBudget.{limit})")


_BLOCK_NODES = (nodes.For, nodes.If, nodes.Macro, nodes.CallBlock, nodes.FilterBlock, nodes.With, nodes.AssignBlock,
                nodes.Block, nodes.Scope, nodes.ScopedEvalContextModifier)  # fmt: skip


def _check_tree(tree: nodes.Template, budget: TemplateBudget, label: str) -> None:
    """Nesting limits on the syntax tree: blocks, loops and expression depth."""
    stack = [(tree, 0, 0, 0)]
    while stack:
        node, blocks, loops, expr = stack.pop()
        line = getattr(node, "lineno", 0)
        if isinstance(node, _BLOCK_NODES):
            blocks += 1
            if blocks > budget.max_blocks:
                _nest_error(label, f"nests block statements deeper than {budget.max_blocks}", line, "max_blocks")
        if isinstance(node, nodes.For):
            loops += 1
            if loops > budget.max_loops:
                _nest_error(label, f"nests for-loops deeper than {budget.max_loops}", line, "max_loops")
        if isinstance(node, nodes.Expr):
            expr += 1
            if expr > budget.max_expression_depth:
                _nest_error(
                    label, f"has an expression nested deeper than {budget.max_expression_depth}", line,
                    "max_expression_depth",
                )  # fmt: skip
        elif not isinstance(node, nodes.Helper):  # pairs and keywords sit inside expressions
            expr = 0
        for child in node.iter_child_nodes():
            stack.append((child, blocks, loops, expr))


# -- the environment ------------------------------------------------------------------------


class _GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` (marks assistant text for training masks):
    rendered as its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


class Namespace(jinja2.utils.Namespace):
    """jinja2's namespace(), refusing underscore names (they would shadow internals)."""

    def __init__(*args, **kwargs):  # noqa: N805 - same signature trick as jinja2's Namespace
        self, args = args[0], args[1:]
        values = dict(*args, **kwargs)
        for name in values:
            Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, values)

    def __setitem__(self, name, value):
        Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name):
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError(f"a template may not store the underscore name {name!r} in a namespace")


class _Dict:
    """dict() for templates, without the dict type itself (no attribute to climb from)."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)

    def __repr__(self) -> str:
        return "<dict>"


class _Global:
    """A helper function offered to templates, printed without an address."""

    def __init__(self, name: str, fn):
        self.name = name
        self.fn = fn

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<function {self.name}>"


def _budgeted_range(*args):
    """range() for templates: every call at most jinja's own limit, and all the calls of
    one render together at most ``max_range`` items (nested loops cannot spin for hours)."""
    r = safe_range(*args)
    state = _render_state()
    state.range_left -= len(r)
    if state.range_left < 0:
        raise BudgetExceeded(
            f"the chat template iterates over more than {state.budget.max_range} range() items "
            f"(TemplateBudget.max_range)"
        )
    return r


def _lipsum(n=5, html=True, min=20, max=100):  # noqa: A002 - jinja's parameter names
    for v in (n, min, max):
        if type(v) is not int or not 0 <= v <= 1000:
            raise TemplateError("lipsum() takes counts from 0 to 1000")
    return jinja2.utils.generate_lorem_ipsum(n=n, html=html, min=min, max=max)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # As transformers: plain json.dumps (jinja2's own tojson escapes HTML and sorts keys).
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _refuse_private(obj, name) -> None:
    """Underscore names are Python's internals: asking for one stops the render, even where
    the object happens to lack it (a data key of that name is still readable)."""
    if isinstance(name, str) and name.startswith("_") and not (isinstance(obj, Mapping) and name in obj):
        raise SecurityError(f"access to {name!r} of a {type(obj).__name__} object is not allowed")


_ALL_BINOPS = frozenset(["+", "-", "*", "/", "//", "%", "**"])


class SandboxEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox with the checkpoints described in the module docstring."""

    intercepted_binops = _ALL_BINOPS

    def __init__(self, budget: TemplateBudget, globals_: dict | None = None):
        super().__init__(
            trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols], loader=None,
            cache_size=0,
        )  # fmt: skip
        self.budget = budget
        self.label = ""  # " 'name'" of the template, for messages
        self.filters["tojson"] = _tojson
        for name, fn in list(self.filters.items()):
            self.filters[name] = _wrap_filter(name, fn)
        self.filters[F_ITER] = _iter
        self.filters[F_EMIT] = _emit
        self.filters[F_CONCAT] = _concat
        self.filters[F_VALUE] = _value
        self.globals["dict"] = _Dict()
        self.globals["namespace"] = Namespace
        self.globals["range"] = _Global("range", _budgeted_range)
        self.globals["lipsum"] = _Global("lipsum", _lipsum)
        for name, fn in (globals_ or {}).items():
            self.globals[name] = _Global(name, fn)

    # -- compilation ------------------------------------------------------------------------

    def _parse(self, source, name, filename):
        label = self.label
        b = self.budget
        if len(source) > b.max_source:
            raise BudgetExceeded(
                f"chat template{label} has {len(source)} characters of source, over its limit of "
                f"{b.max_source} (TemplateBudget.max_source)"
            )
        _check_tokens(self, source, b, label)
        tree = super()._parse(source, name, filename)
        _check_tree(tree, b, label)
        _rewrite(tree)
        return tree

    # -- attribute access -------------------------------------------------------------------

    def getattr(self, obj, attribute):
        _refuse_private(obj, attribute)
        return super().getattr(obj, attribute)

    def getitem(self, obj, argument):
        _refuse_private(obj, argument)
        return super().getitem(obj, argument)

    def unsafe_undefined(self, obj, attribute):
        raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__} object is not allowed")

    def wrap_str_format(self, value):
        wrapped = super().wrap_str_format(value)
        owner = getattr(value, "__self__", None)
        name = getattr(value, "__name__", None)
        if isinstance(owner, (str, bytes)) and name in _SIZED_METHODS:
            return _StrMethod(owner, name, wrapped or value)
        return wrapped

    # -- calls and operators ----------------------------------------------------------------

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja's own convention
        state = _render_state()
        state.tick()
        plain = not isinstance(__obj, (_StrMethod, Macro)) and not (
            isinstance(__obj, _Global) and __obj.fn is _budgeted_range
        )
        if plain:
            _check_int_args(state, "a call", args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        if plain:
            if isinstance(result, str):
                for a in (*args, *kwargs.values()):
                    if not isinstance(a, Macro):  # a call block's `caller`
                        state.text_weight("an argument of a call", a)
            _account(state, "a call", result)
        return result

    def call_binop(self, context, operator, left, right):
        state = _render_state()
        state.tick()
        what = f"the {operator} operator"
        lt, rt = type(left), type(right)
        if operator == "+":
            if isinstance(left, (str, bytes)) and isinstance(right, (str, bytes)):
                state.check_size(f"a string from {what}", len(left) + len(right))
            elif isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
                state.check_size(f"a list from {what}", state.weight(left)[0] + state.weight(right)[0])
        elif operator == "*":
            for seq, count in ((left, right), (right, left)):
                if isinstance(seq, (str, bytes, list, tuple)) and type(count) is int:
                    w = len(seq) if isinstance(seq, (str, bytes)) else state.weight(seq)[0]
                    state.check_size(f"a sequence from {what}", w * max(count, 0))
            if lt is int and rt is int and left.bit_length() + right.bit_length() > state.budget.max_int_bits:
                raise BudgetExceeded(
                    f"a product of about {left.bit_length() + right.bit_length()} bits is over the limit of "
                    f"{state.budget.max_int_bits} (TemplateBudget.max_int_bits)"
                )
        elif operator == "**":
            if lt is int and rt is int and right > 0 and abs(left) > 1:
                if left.bit_length() * right > state.budget.max_int_bits:
                    raise BudgetExceeded(
                        f"a power of about {left.bit_length() * right} bits is over the limit of "
                        f"{state.budget.max_int_bits} (TemplateBudget.max_int_bits)"
                    )
        elif operator == "%" and isinstance(left, str):
            state.check_size(f"a string from {what}", _percent_estimate(state, left, right))
        result = super().call_binop(context, operator, left, right)
        _account(state, what, result)
        return result


def make_environment(budget: TemplateBudget, globals_: dict | None = None) -> SandboxEnvironment:
    return SandboxEnvironment(budget, globals_)


def compile_template(env: SandboxEnvironment, source: str, label: str):
    """jinja's template object for ``source``, within the compile-time budget."""
    b = env.budget
    try:
        return guarded(b.compile_seconds, f"compiling chat template{label}", env.from_string, source)
    except (RecursionError, SyntaxError, MemoryError, OverflowError, ValueError) as e:
        # Python's own compiler limits (nested blocks, indentation), past the checks above.
        raise TemplateError(
            f"chat template{label} is too deeply nested or too large to compile ({type(e).__name__}: {e})"
        ) from None


def render(env: SandboxEnvironment, template, variables: dict) -> str:
    """Render with a fresh budget; errors of the template become TemplateErrors."""
    state = _Render(env.budget)
    token = _current.set(state)
    try:
        out = guarded(env.budget.seconds, "rendering the chat template", template.render, **variables)
    finally:
        _current.reset(token)
    if len(out) > env.budget.max_output:
        state.refuse_size("a prompt", len(out))
    return out


__all__ = ["SandboxEnvironment", "compile_template", "make_environment", "render"]
