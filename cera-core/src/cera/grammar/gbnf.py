"""GBNF, llama.cpp's grammar format: a parser that reads exactly what llama.cpp's
`llama_grammar_parser` reads, and a translation to the Lark dialect of llguidance.

The parser follows llama.cpp's rules: rule names are letters, digits and ``-``; ``#``
starts a comment; a rule ends at a newline outside parentheses; literals and character
classes take the escapes ``\\x.. \\u.... \\U........ \\t \\r \\n \\\\ \\" \\[ \\] \\-``;
``.`` is any character (newlines too); ``* + ? {m} {m,} {m,n}`` repeat the item before
them; ``<[id]>`` is one token by id, ``<text>`` one token by its text, ``!`` before either
any other single token. A later definition of a rule replaces an earlier one, as there.
Errors name the line and column and what was expected there.

The translation keeps GBNF's meaning exactly. GBNF is a grammar over characters with
no lexer, while llguidance splits text into lexemes and extends a lexeme as long as it
can (maximal munch): a grammar like ``num ::= [0-9]+ ws`` followed by ``"\\n"`` loses
strings when ``num`` is one lexeme (its ``ws`` swallows the newline). So a rule or
group becomes one lexeme only when that cannot happen: its language is *prefix-free*
(no string of it is a proper prefix of another, so a complete lexeme can never be
extended) and it never competes with another lexeme from the same position. Everything
else is written at the rule level over single-character lexemes, which the Earley
parser handles exactly. See `Lexemes` below for the check.
"""

from __future__ import annotations

import attrs

from ..errors import GrammarError

MAX_REPETITION = 2000  # llama.cpp's MAX_REPETITION_THRESHOLD


# -- the syntax tree ----------------------------------------------------------------------


@attrs.frozen
class Chars:
    """One character from a set of code-point ranges (a literal's character, a class, or `.`)."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False

    def intervals(self) -> tuple[tuple[int, int], ...]:
        """The set as sorted, disjoint ranges of code points (complement taken)."""
        merged: list[list[int]] = []
        for lo, hi in sorted(self.ranges):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        if not self.negated:
            return tuple((a, b) for a, b in merged)
        out, at = [], 0
        for lo, hi in merged:
            if lo > at:
                out.append((at, lo - 1))
            at = max(at, hi + 1)
        if at <= 0x10FFFF:
            out.append((at, 0x10FFFF))
        return tuple(out)


ANY = Chars(((0, 0x10FFFF),))


@attrs.frozen
class Seq:
    items: tuple


@attrs.frozen
class Alt:
    options: tuple  # of Seq


@attrs.frozen
class Ref:
    name: str
    line: int
    col: int


@attrs.frozen
class Token:
    """One token: by id, or by its text (resolved with the model's tokenizer)."""

    id: int | None
    text: str | None
    negated: bool
    line: int
    col: int


@attrs.frozen
class Repeat:
    item: object
    min: int
    max: int | None  # None: unbounded


@attrs.frozen
class Rule:
    name: str
    body: Alt
    line: int
    col: int


# -- the parser -----------------------------------------------------------------------------


def _is_word(c: str) -> bool:
    return ("a" <= c <= "z") or ("A" <= c <= "Z") or ("0" <= c <= "9") or c == "-"


_SIMPLE_ESCAPES = {"t": 9, "r": 13, "n": 10, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45}


class _Parser:
    def __init__(self, text: str):
        self.s = text
        self.i = 0

    # position and errors
    def where(self, i: int | None = None) -> tuple[int, int]:
        i = self.i if i is None else i
        line = self.s.count("\n", 0, i) + 1
        col = i - (self.s.rfind("\n", 0, i) + 1) + 1
        return line, col

    def fail(self, expected: str, i: int | None = None):
        i = self.i if i is None else i
        line, col = self.where(i)
        found = repr(self.s[i]) if i < len(self.s) else "the end of the grammar"
        src = self.s.splitlines()[line - 1] if self.s.splitlines()[line - 1 : line] else ""
        raise GrammarError(
            f"GBNF grammar, line {line}, column {col}: expected {expected}, found {found}\n  {src}\n  {' ' * (col - 1)}^"
        )

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def space(self, newline_ok: bool) -> None:
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in " \t" or (newline_ok and c in "\r\n"):
                self.i += 1
            elif c == "#":
                while self.i < len(s) and s[self.i] not in "\r\n":
                    self.i += 1
            else:
                break

    def name(self) -> str:
        start = self.i
        while _is_word(self.peek()):
            self.i += 1
        if self.i == start:
            self.fail("a rule name (letters, digits and '-')")
        return self.s[start : self.i]

    def integer(self) -> int:
        start = self.i
        while self.peek().isdigit() and self.peek().isascii():
            self.i += 1
        if self.i == start:
            self.fail("an integer")
        return int(self.s[start : self.i])

    def char(self, what: str) -> int:
        if self.i >= len(self.s):
            self.fail(what)
        c = self.s[self.i]
        if c != "\\":
            self.i += 1
            return ord(c)
        e = self.peek(1)
        if e in ("x", "u", "U"):
            n = {"x": 2, "u": 4, "U": 8}[e]
            digits = self.s[self.i + 2 : self.i + 2 + n]
            if len(digits) != n or any(d not in "0123456789abcdefABCDEF" for d in digits):
                self.fail(f"{n} hex digits after \\{e}", self.i + 2)
            cp = int(digits, 16)
            if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
                self.fail("a Unicode scalar value (not a surrogate, at most 10FFFF)", self.i)
            self.i += 2 + n
            return cp
        if e in _SIMPLE_ESCAPES:
            self.i += 2
            return _SIMPLE_ESCAPES[e]
        self.fail("an escape (\\x \\u \\U \\t \\r \\n \\\\ \\\" \\[ \\] \\-)", self.i + 1)

    # grammar
    def grammar(self) -> dict[str, Rule]:
        rules: dict[str, Rule] = {}
        self.space(True)
        while self.i < len(self.s):
            rule = self.rule()
            rules[rule.name] = rule  # a later definition replaces an earlier one, as in llama.cpp
        return rules

    def rule(self) -> Rule:
        line, col = self.where()
        name = self.name()
        self.space(False)
        if not self.s.startswith("::=", self.i):
            self.fail("'::=' after the rule name")
        self.i += 3
        self.space(True)
        body = self.alternates(nested=False)
        if self.peek() == "\r":
            self.i += 2 if self.peek(1) == "\n" else 1
        elif self.peek() == "\n":
            self.i += 1
        elif self.i < len(self.s):
            self.fail("a newline or the end of the grammar after the rule")
        self.space(True)
        return Rule(name, body, line, col)

    def alternates(self, nested: bool) -> Alt:
        options = [self.sequence(nested)]
        while self.peek() == "|":
            self.i += 1
            self.space(True)
            options.append(self.sequence(nested))
        return Alt(tuple(options))

    def sequence(self, nested: bool) -> Seq:
        items: list = []
        while self.i < len(self.s):
            c = self.s[self.i]
            start = self.i
            if c == '"':
                self.i += 1
                chars = []
                while self.peek() != '"':
                    if self.i >= len(self.s):
                        self.fail("'\"' to close the literal")
                    chars.append(self.char("'\"' to close the literal"))
                self.i += 1
                items.append(Seq(tuple(Chars(((cp, cp),)) for cp in chars)))
            elif c == "[":
                self.i += 1
                negated = self.peek() == "^"
                if negated:
                    self.i += 1
                ranges = []
                while self.peek() != "]":
                    if self.i >= len(self.s):
                        self.fail("']' to close the character class")
                    lo = self.char("']' to close the character class")
                    hi = lo
                    if self.peek() == "-" and self.peek(1) != "]":
                        self.i += 1
                        if self.i >= len(self.s):
                            self.fail("the end of the character range")
                        hi = self.char("the end of the character range")
                        if hi < lo:
                            self.fail(f"a range whose end is not below its start (U+{lo:04X})", self.i - 1)
                    ranges.append((lo, hi))
                self.i += 1
                if not ranges and not negated:
                    self.fail("at least one character in the class", start + 1)
                items.append(Chars(tuple(ranges), negated))
            elif c in "<!":
                negated = c == "!"
                if negated:
                    self.i += 1
                items.append(self.token(negated))
            elif _is_word(c):
                line, col = self.where()
                items.append(Ref(self.name(), line, col))
            elif c == "(":
                self.i += 1
                self.space(True)
                group = self.alternates(nested=True)
                if self.peek() != ")":
                    self.fail("')' to close the group")
                self.i += 1
                items.append(group)
            elif c == ".":
                self.i += 1
                items.append(ANY)
            elif c in "*+?{":
                if not items:
                    self.fail("an item before the repetition operator")
                lo, hi = self.repetition()
                items[-1] = Repeat(items[-1], lo, hi)
                self.space(nested)
                continue
            else:
                break
            self.space(nested)
        return Seq(tuple(items))

    def repetition(self) -> tuple[int, int | None]:
        c = self.s[self.i]
        self.i += 1
        if c == "*":
            lo, hi = 0, None
        elif c == "+":
            lo, hi = 1, None
        elif c == "?":
            lo, hi = 0, 1
        else:
            self.space(True)
            if not self.peek().isdigit():
                self.fail("an integer after '{'")
            lo = self.integer()
            self.space(True)
            if self.peek() == "}":
                hi = lo
                self.i += 1
            elif self.peek() == ",":
                self.i += 1
                self.space(True)
                hi = None
                if self.peek().isdigit():
                    hi = self.integer()
                    self.space(True)
                if self.peek() != "}":
                    self.fail("'}' to close the repetition")
                self.i += 1
            else:
                self.fail("',' or '}' in the repetition")
            if lo > MAX_REPETITION:
                self.fail(f"a repetition count of at most {MAX_REPETITION}")
            if hi is not None and hi > MAX_REPETITION:
                hi = None  # as llama.cpp: a larger maximum means no maximum
            if hi is not None and hi < lo:
                self.fail(f"a maximum of at least the minimum {lo}")
        return lo, hi

    def token(self, negated: bool) -> Token:
        line, col = self.where()
        if self.peek() != "<":
            self.fail("'<' (a token: <[id]> or <text>) after '!'")
        self.i += 1
        if self.peek() == "[":
            self.i += 1
            tid = self.integer()
            if self.peek() != "]":
                self.fail("']' after the token id")
            self.i += 1
            if self.peek() != ">":
                self.fail("'>' after the token id")
            self.i += 1
            return Token(tid, None, negated, line, col)
        end = self.s.find(">", self.i)
        if end < 0:
            self.fail("'>' to close the token")
        text = "<" + self.s[self.i : end + 1]
        self.i = end + 1
        return Token(None, text, negated, line, col)


def parse(text: str) -> dict[str, Rule]:
    """The rules of a GBNF grammar, checked: every referenced rule defined, a root rule."""
    if not isinstance(text, str):
        raise GrammarError(f"a GBNF grammar must be a string, got {type(text).__name__}")
    p = _Parser(text)
    rules = p.grammar()
    for rule in rules.values():
        for ref in _walk(rule.body):
            if isinstance(ref, Ref) and ref.name not in rules:
                raise GrammarError(
                    f"GBNF grammar, line {ref.line}, column {ref.col}: rule {ref.name!r} is used but never defined"
                )
    if "root" not in rules:
        raise GrammarError("GBNF grammar: expected a rule named 'root' (the start of the grammar), found none")
    return rules


def _walk(node):
    yield node
    if isinstance(node, Alt):
        for o in node.options:
            yield from _walk(o)
    elif isinstance(node, Seq):
        for it in node.items:
            yield from _walk(it)
    elif isinstance(node, Repeat):
        yield from _walk(node.item)


def resolve_tokens(rules: dict[str, Rule], tokenizer, n_vocab: int | None) -> dict[str, Rule]:
    """Check token ids against the vocabulary and turn ``<text>`` tokens into ids."""

    def fix(node):
        if isinstance(node, Token):
            tid = node.id
            if tid is None:
                if tokenizer is None:
                    raise GrammarError(
                        f"GBNF grammar, line {node.line}, column {node.col}: the token {node.text} needs the "
                        "model's vocabulary; use <[id]> or compile the grammar for a model"
                    )
                ids = tokenizer.encode(node.text, add_special=False, parse_special=True)
                if len(ids) != 1:
                    raise GrammarError(
                        f"GBNF grammar, line {node.line}, column {node.col}: expected {node.text} to be one "
                        f"token of the vocabulary, it is {len(ids)} tokens {ids[:8]}"
                    )
                tid = ids[0]
            elif n_vocab is not None and tid >= n_vocab:
                raise GrammarError(
                    f"GBNF grammar, line {node.line}, column {node.col}: token id {tid} is outside the "
                    f"vocabulary (0..{n_vocab - 1})"
                )
            return attrs.evolve(node, id=tid)
        if isinstance(node, Alt):
            return Alt(tuple(fix(o) for o in node.options))
        if isinstance(node, Seq):
            return Seq(tuple(fix(i) for i in node.items))
        if isinstance(node, Repeat):
            return attrs.evolve(node, item=fix(node.item))
        return node

    return {name: attrs.evolve(r, body=fix(r.body)) for name, r in rules.items()}


# -- lexemes: which regular pieces may be one lexeme --------------------------------------


class _TooBig(Exception):
    pass


MAX_POSITIONS = 3000
MAX_STATES = 2000


class _Automaton:
    """The Glushkov automaton of a regular piece (its characters are the positions) and
    the facts the lexeme check needs: whether it matches the empty string, whether it is
    prefix-free, whether it can be longer than one character, and its first characters."""

    def __init__(self, node, rules: dict[str, Rule]):
        self.rules = rules
        self.chars: list[tuple[tuple[int, int], ...]] = []
        self.follow: list[set[int]] = []
        nullable, first, last = self.build(node)
        self.nullable = nullable
        self.first_pos = first
        self.last = last
        self.first_chars = _union(self.chars[p] for p in first)
        self._explore()

    def new(self, intervals) -> int:
        if len(self.chars) >= MAX_POSITIONS:
            raise _TooBig
        self.chars.append(intervals)
        self.follow.append(set())
        return len(self.chars) - 1

    def link(self, last, first) -> None:
        for p in last:
            self.follow[p] |= first

    def build(self, node):
        if isinstance(node, Chars):
            iv = node.intervals()
            if not iv:
                raise _TooBig  # matches nothing: leave it to the rule level
            p = self.new(iv)
            return False, {p}, {p}
        if isinstance(node, Ref):
            return self.build(self.rules[node.name].body)
        if isinstance(node, Seq):
            nullable, first, last = True, set(), set()
            for item in node.items:
                n2, f2, l2 = self.build(item)
                self.link(last, f2)
                if nullable:
                    first = first | f2
                last = l2 | last if n2 else l2
                nullable = nullable and n2
            return nullable, first, last
        if isinstance(node, Alt):
            nullable, first, last = False, set(), set()
            for o in node.options:
                n2, f2, l2 = self.build(o)
                nullable, first, last = nullable or n2, first | f2, last | l2
            return nullable, first, last
        if isinstance(node, Repeat):
            parts = [node.item] * node.min
            if node.max is None:
                parts.append(Repeat(node.item, 0, -1))  # -1: star, built below
            else:
                parts += [Alt((Seq((node.item,)), Seq(()))) for _ in range(node.max - node.min)]
            if node.min == 0 and node.max == -1:
                n2, f2, l2 = self.build(node.item)
                self.link(l2, f2)
                return True, f2, l2
            return self.build(Seq(tuple(parts)))
        raise _TooBig  # a token: never inside a lexeme

    def _explore(self) -> None:
        """Subset construction over the character classes: is every accepting state final
        (prefix-free), and can a match go on after its first character?"""
        self.prefix_free = True
        self.longer_than_one = False
        start = frozenset(self.first_pos)
        # states after at least one character; a state is the set of positions just read
        seen, todo = set(), []
        for s in self._steps(None):
            if s not in seen:
                seen.add(s)
                todo.append(s)
        first_states = set(seen)
        while todo:
            s = todo.pop()
            nxt = self._steps(s)
            if nxt:
                if s in first_states:
                    self.longer_than_one = True
                if s & self.last:
                    self.prefix_free = False
                    return
            for t in nxt:
                if t not in seen:
                    if len(seen) >= MAX_STATES:
                        raise _TooBig
                    seen.add(t)
                    todo.append(t)
        del start

    def _steps(self, state) -> list[frozenset]:
        cand = self.first_pos if state is None else set().union(*(self.follow[p] for p in state))
        if not cand:
            return []
        cuts = sorted({lo for q in cand for lo, _ in self.chars[q]} | {hi + 1 for q in cand for _, hi in self.chars[q]})
        out = set()
        for a, b in zip(cuts, cuts[1:], strict=False):
            t = frozenset(q for q in cand if any(lo <= a and b - 1 <= hi for lo, hi in self.chars[q]))
            if t:
                out.add(t)
        return list(out)


def _union(parts) -> tuple[tuple[int, int], ...]:
    return Chars(tuple(r for p in parts for r in p)).intervals()


def _overlap(a, b) -> bool:
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][1] < b[j][0]:
            i += 1
        elif b[j][1] < a[i][0]:
            j += 1
        else:
            return True
    return False


# -- the translation ------------------------------------------------------------------------


def _cls(intervals) -> str:
    parts = []
    for lo, hi in intervals:
        parts.append(f"\\x{{{lo:X}}}" if lo == hi else f"\\x{{{lo:X}}}-\\x{{{hi:X}}}")
    return "[" + "".join(parts) + "]"


def _regular_rules(rules: dict[str, Rule]) -> set[str]:
    """Rules that are regular: no token inside, not recursive, referencing only regular rules."""
    refs = {n: {x.name for x in _walk(r.body) if isinstance(x, Ref)} for n, r in rules.items()}
    has_token = {n for n, r in rules.items() if any(isinstance(x, Token) for x in _walk(r.body))}
    regular: set[str] = set()
    changed = True
    while changed:
        changed = False
        for n in rules:
            if n not in regular and n not in has_token and refs[n] <= regular:
                regular.add(n)
                changed = True
    return regular  # a rule on a cycle never gets in: its references never all are


class _Lark:
    """Writes the rules as llguidance Lark. A regular piece becomes one lexeme only when
    maximal munch cannot change its meaning: it does not match the empty string, it is
    prefix-free (so once complete it cannot go on), and if it can be longer than one
    character no other lexeme of the grammar starts with a character it starts with (so
    no other lexeme is ever in progress beside it). Everything else goes to the rule level,
    down to one-character lexemes if need be, which the Earley parser treats exactly."""

    def __init__(self, rules: dict[str, Rule]):
        self.rules = rules
        self.regular = _regular_rules(rules)
        self.names = {"root": "start"}
        for i, name in enumerate(rules):
            if name != "root":
                self.names[name] = f"r{i}_" + "".join(c if c.isalnum() else "_" for c in name.lower())
        self.banned: set[str] = set()  # terminal expressions that may not be lexemes
        self._auto: dict[str, _Automaton | None] = {}

    # terminal syntax of a regular piece (used inside lexemes)
    def texpr(self, node) -> str:
        if isinstance(node, Chars):
            iv = node.intervals()
            return f"/{_cls(iv)}/" if iv else "/[^\\x{0}-\\x{10FFFF}]/"
        if isinstance(node, Ref):
            return "T_" + self.names[node.name].upper()
        if isinstance(node, Seq):
            return " ".join(self.texpr(i) for i in node.items) if node.items else '""'
        if isinstance(node, Alt):
            return "(" + " | ".join(self.texpr(o) for o in node.options) + ")"
        if isinstance(node, Repeat):
            return _rep(f"({self.texpr(node.item)})", node)
        raise TypeError(node)

    def automaton(self, node, key: str):
        if key not in self._auto:
            try:
                self._auto[key] = _Automaton(node, self.rules)
            except _TooBig:
                self._auto[key] = None
        return self._auto[key]

    def good(self, node) -> tuple[str, _Automaton] | None:
        key = self.texpr(node)
        if key in self.banned:
            return None
        a = self.automaton(node, key)
        if a is None or a.nullable or not a.prefix_free:
            return None
        return key, a

    def is_regular(self, node) -> bool:
        return not any(isinstance(x, Token) or (isinstance(x, Ref) and x.name not in self.regular) for x in _walk(node))

    # rule syntax
    def expr(self, node) -> str:
        if isinstance(node, Ref):
            if node.name in self.regular and node.name not in self.lowered:
                return self.lexeme(node)
            self.needed.add(node.name)
            return self.names[node.name]
        if isinstance(node, Token):
            return f"<[^{node.id}]>" if node.negated else f"<[{node.id}]>"
        if isinstance(node, Chars):
            return self.lexeme(node)
        if isinstance(node, Seq):
            return self.seq(node.items)
        if isinstance(node, Alt):
            return "(" + " | ".join(self.expr(o) for o in node.options) + ")"
        if isinstance(node, Repeat):
            if self.is_regular(node):
                got = self.good(node)
                if got:
                    return self.lexeme(node, got)
            inner = self.expr(node.item)
            return _rep(f"({inner})", node)
        raise TypeError(node)

    def seq(self, items) -> str:
        if not items:
            return '""'
        out, i = [], 0
        while i < len(items):
            if not self.is_regular(items[i]):
                out.append(self.expr(items[i]))
                i += 1
                continue
            j = i
            while j < len(items) and self.is_regular(items[j]):
                j += 1
            # the run items[i:j]: take the longest good prefix, again and again
            while i < j:
                for k in range(j, i, -1):
                    piece = items[i] if k == i + 1 else Seq(tuple(items[i:k]))
                    got = self.good(piece) if k > i + 1 else None
                    if got:
                        out.append(self.lexeme(piece, got))
                        break
                else:
                    k = i + 1
                    out.append(self.one(items[i]))
                i = k
        return " ".join(out)

    def one(self, node) -> str:
        """A single regular item at the rule level: a lexeme if it may be one, else its parts."""
        if isinstance(node, Chars):
            return self.lexeme(node)
        got = self.good(node)
        if got:
            return self.lexeme(node, got)
        if isinstance(node, Ref):
            self.lowered.add(node.name)
            self.needed.add(node.name)
            return self.names[node.name]
        if isinstance(node, Seq):
            return "(" + self.seq(node.items) + ")"
        return self.expr_structural(node)

    def expr_structural(self, node) -> str:
        if isinstance(node, Alt):
            return "(" + " | ".join(self.seq(o.items) for o in node.options) + ")"
        if isinstance(node, Repeat):
            return _rep("(" + self.one(node.item) + ")", node)
        raise TypeError(node)

    def lexeme(self, node, got=None) -> str:
        if got is None:
            if isinstance(node, Ref):
                got = self.good(node)
                if got is None:
                    self.lowered.add(node.name)
                    self.needed.add(node.name)
                    return self.names[node.name]
            else:
                key = self.texpr(node)
                got = (key, self.automaton(node, key))
        key, auto = got
        name = self.terminals.get(key)
        if name is None:
            name = self.terminals[key] = f"L{len(self.terminals)}"
            self.autos[key] = auto
            self.nodes[key] = node
        self.refs_regular(node)
        return name

    def refs_regular(self, node) -> None:
        for x in _walk(node):
            if isinstance(x, Ref):
                self.term_rules.add(x.name)
                self.refs_regular(self.rules[x.name].body)

    def write_once(self) -> str:
        self.terminals: dict[str, str] = {}
        self.autos: dict[str, _Automaton | None] = {}
        self.nodes: dict[str, object] = {}
        self.term_rules: set[str] = set()
        self.needed: set[str] = {"root"}
        done: dict[str, str] = {}
        while True:
            todo = [n for n in self.needed if n not in done]
            if not todo:
                break
            for name in todo:
                body = self.rules[name].body
                if name in self.regular and name not in self.lowered:
                    self.lowered.add(name)  # referenced as a rule (the root, or lowered)
                done[name] = " | ".join(self.seq(o.items) for o in body.options)
        lines = [f"start: {done.pop('root')}"]
        lines += [f"{self.names[n]}: {t}" for n, t in done.items()]
        lines += [f"T_{self.names[n].upper()}: {self.texpr(self.rules[n].body)}" for n in sorted(self.term_rules)]
        lines += [f"{name}: {key}" for key, name in self.terminals.items()]
        return "\n".join(lines) + "\n"

    def conflicts(self) -> set[str]:
        """Lexemes that could be cut short by maximal munch where they meet another: a
        string of one is a proper prefix of a string of the other (checked as whether the
        union of the two is prefix-free). Of each such pair the larger one is given up."""
        items = [(k, a) for k, a in self.autos.items() if a is not None]
        bad = set()
        for i, (k1, a1) in enumerate(items):
            for k2, a2 in items[i + 1 :]:
                if k1 in bad or k2 in bad:
                    continue
                if not (a1.longer_than_one or a2.longer_than_one) or not _overlap(a1.first_chars, a2.first_chars):
                    continue
                try:
                    both = _Automaton(Alt((Seq((self.nodes[k1],)), Seq((self.nodes[k2],)))), self.rules)
                    clash = not both.prefix_free
                except _TooBig:
                    clash = True
                if clash:
                    bad.add(max((k1, a1), (k2, a2), key=lambda ka: (len(ka[1].chars), len(ka[0])))[0])
        return bad

    def write(self) -> str:
        self.lowered: set[str] = set()
        while True:
            text = self.write_once()
            bad = self.conflicts() - self.banned
            if not bad:
                return text
            self.banned |= bad


def _rep(inner: str, node: Repeat) -> str:
    if node.max is None:
        return f"{inner}*" if node.min == 0 else f"{inner}+" if node.min == 1 else f"{inner}{{{node.min},}}"
    if (node.min, node.max) == (0, 1):
        return f"{inner}?"
    if node.max == 0:
        return '""'
    return f"{inner}{{{node.min},{node.max}}}"


def to_lark(text: str, tokenizer=None, n_vocab: int | None = None) -> str:
    """A GBNF grammar as llguidance Lark (parsed and checked first)."""
    rules = parse(text)
    if any(isinstance(n, Token) for r in rules.values() for n in _walk(r.body)):
        rules = resolve_tokens(rules, tokenizer, n_vocab)
    # no_forcing: where the grammar allows one text only, llguidance would by default
    # allow only that text's canonical tokens; GBNF allows every token that fits, as llama.cpp
    return '%llguidance {"no_forcing": true}\n' + _Lark(rules).write()
