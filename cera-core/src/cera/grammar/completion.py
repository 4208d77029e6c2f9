"""The shortest completion of a grammar from where its matcher stands: the fewest bytes
that take the output so far to a state where the grammar may end, and those bytes as
tokens. The token budget rule (`cera.grammar.processor`) steers by it.

The search runs on the grammar engine itself (an llguidance matcher, deep-copied), so
it works for every kind of constraint (GBNF, JSON Schema, regex, Lark) without knowing
its grammar. It is a breadth-first search over single-byte steps: a state's children are
the single-byte tokens the grammar's mask allows. These rules keep the frontier small
without losing the shortest path in the grammars cera meets:

- a child that allows the same tokens as its parent or grandparent, by a letter or a
  digit or inside free text, is back in a place of the grammar the path has just been (a
  letter inside a string, a digit inside a number, an escape that returns into its
  string) and is dropped, unless every child is such (then one is kept); a bracket that
  closes one level of many is not such a step (the same tokens follow, one level up);
- states of one depth that allow the same tokens are one state (the first stands for all);
- at most `BEAM` states go on from each depth, those whose grammar allows the fewest
  next bytes first (where a completion closes in, the grammar allows least);
- of a large set of next bytes (free text) one letter of each case and one digit stand
  for all letters and digits.

Where the grammar forces a text (a JSON Schema's required key), its mask allows only that
text's own tokens, so no single byte shows: the search then takes the forced bytes at once.
A special token the grammar names (a tool call's ``</tool_call>`` marker) is one step too.

Byte by byte is an upper bound on tokens (a vocabulary has a token for each byte the
search uses, or the byte is not a child); the completion is then tokenized, and that
token path is checked on a copy of the matcher.
"""

from __future__ import annotations

import attrs
import numpy as np

# Past this many states the search gives up (None: no completion known).
MAX_STATES = 4000
BEAM = 16  # states kept per byte of depth


@attrs.frozen
class Completion:
    data: bytes  # the shortest bytes that complete the grammar
    tokens: tuple[int, ...]  # a token path that writes them, accepted by the grammar


def single_byte_tokens(token_bytes: list[bytes]) -> dict[int, int]:
    """byte value -> a token id whose bytes are that byte alone."""
    out: dict[int, int] = {}
    for tid, b in enumerate(token_bytes):
        if len(b) == 1 and b[0] not in out:
            out[b[0]] = tid
    return out


def special_tokens(token_bytes: list[bytes], eog_ids=()) -> np.ndarray:
    """The ids of special tokens (no text; cera's token view marks them with 0xFF), less
    the end-of-generation ones."""
    eog = set(eog_ids)
    return np.array([t for t, b in enumerate(token_bytes) if b[:1] == b"\xff" and t not in eog], np.int64)


def _bit(words: np.ndarray, ids: np.ndarray) -> np.ndarray:
    return ((words[ids >> 5] >> (ids & 31)) & 1).astype(bool)


def _look(matcher, n_words: int, byte_values: np.ndarray, byte_ids: np.ndarray, specials: np.ndarray):
    """The bytes the grammar's mask allows next (by their single-byte tokens), the special
    tokens it allows, and the whole mask (what tells two states apart beyond the next byte)."""
    words = np.zeros(n_words, np.int32)
    matcher.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)
    here = tuple(byte_values[_bit(words, byte_ids)].tolist())
    marks = tuple(specials[_bit(words, specials)].tolist()) if len(specials) else ()
    return here, marks, words.tobytes()


SPACES = frozenset(b" \t\n\r")


def _representatives(allowed: tuple[int, ...], spaces: bool) -> list[int]:
    """The bytes to try: all of a small set; of a large one (free text) every ASCII byte
    that is no letter or digit, and the first lowercase, uppercase letter and digit (bytes
    past ASCII only when the grammar takes nothing else). Without ``spaces``, whitespace
    only where the grammar takes nothing else."""
    if not spaces:
        rest = tuple(b for b in allowed if b not in SPACES)
        allowed = rest or allowed
    if len(allowed) <= 16:
        return list(allowed)
    ascii_ = [b for b in allowed if b < 0x80]
    if not ascii_:
        return list(allowed[:16])
    out, classes = [], set()
    for b in ascii_:
        c = chr(b)
        cls = "a" if c.islower() else "A" if c.isupper() else "0" if c.isdigit() else None
        if cls is None:
            out.append(b)
        elif cls not in classes:
            classes.add(cls)
            out.append(b)
    return out


@attrs.define
class _Node:
    matcher: object
    data: bytes  # the bytes written from the start of the search
    tokens: tuple[int, ...]  # ... as the tokens walked (single bytes, forced bytes, specials)
    up: bytes | None  # the parent's mask
    here: tuple[int, ...] | None = None  # the bytes allowed next (None: not looked at yet)
    marks: tuple[int, ...] = ()  # the special tokens allowed next
    mask: bytes | None = None


def shortest_completion(matcher, lt, singles: dict[int, int], n_vocab: int, specials=None,
                        max_states: int = MAX_STATES) -> Completion | None:  # fmt: skip
    """The shortest completion from ``matcher``'s state (None when the search finds none
    within ``max_states`` states). ``matcher`` is not changed; ``specials``: the special
    token ids the search may step through (`special_tokens`). Whitespace the grammar
    merely allows is left out first (it only lengthens a completion, and each place that
    allows it would double the states: a first search of few states goes without it); a
    grammar that needs it is searched again with it."""
    if matcher.is_accepting():
        return Completion(b"", ())
    specials = np.zeros(0, np.int64) if specials is None else specials
    found = _search(matcher, lt, singles, n_vocab, specials, max_states // 2, spaces=False)
    if found is None:
        found = _search(matcher, lt, singles, n_vocab, specials, max_states, spaces=True)
    return found


def _search(matcher, lt, singles, n_vocab, specials, max_states, spaces: bool) -> Completion | None:
    byte_values = np.array(sorted(singles), np.int64)
    byte_ids = np.array([singles[b] for b in sorted(singles)], np.int64)
    n_words = (n_vocab + 31) // 32

    def look(node: _Node) -> None:
        node.here, node.marks, node.mask = _look(node.matcher, n_words, byte_values, byte_ids, specials)

    frontier = [_Node(matcher.deep_copy(), b"", (), None)]
    seen = 0
    while frontier and seen < max_states:
        nxt, level = [], set()  # the next level, and the masks it has
        for node in frontier:
            if node.here is None:
                look(node)
            kids, same, masks = [], [], set()
            for t in node.marks:  # a special token the grammar names: one step
                child = node.matcher.deep_copy()
                if child.consume_token(int(t)):
                    seen += 1
                    kid = _Node(child, node.data, node.tokens + (int(t),), node.mask)
                    if child.is_accepting():
                        return _as_tokens(matcher, lt, kid)
                    kids.append(kid)
            if not node.here and not node.marks:  # text the grammar forces may show as no single byte
                forced = _forced(node.matcher, singles)
                if forced is not None:
                    child, data = forced
                    seen += 1
                    kid = _Node(child, node.data + data, node.tokens + tuple(singles[b] for b in data), node.mask)
                    if child.is_accepting():
                        return _as_tokens(matcher, lt, kid)
                    nxt.append(kid)
                continue
            free = len(node.here) > 16  # free text (a string's inside)
            for b in _representatives(node.here, spaces) if node.here else ():
                child = node.matcher.deep_copy()
                if not child.consume_token(singles[b]):
                    continue
                seen += 1
                kid = _Node(child, node.data + bytes([b]), node.tokens + (singles[b],), node.mask)
                if child.is_accepting():
                    return _as_tokens(matcher, lt, kid)
                look(kid)
                if (kid.mask == node.mask or kid.mask == node.up) and (free or chr(b).isalnum()):
                    if not same:
                        same.append(kid)
                    continue
                if kid.mask in masks or kid.mask in level:
                    continue
                masks.add(kid.mask)
                kids.append(kid)
            if not kids and same and same[0].mask not in level:
                kids = same
            level.update(k.mask for k in kids if k.mask is not None)
            nxt.extend(kids)
        # the most constrained states first (a completion closes in where the grammar allows
        # least), and no more than BEAM of them
        nxt.sort(key=lambda k: len(k.here) if k.here is not None else 0)
        frontier = nxt[:BEAM]
    return None


def _forced(m, singles: dict[int, int]):
    """A copy of ``m`` past the bytes its grammar forces now, and those bytes (None: none)."""
    data = bytes(m.compute_ff_bytes())
    if not data or any(b not in singles for b in data):
        return None
    child = m.deep_copy()
    for b in data:
        if not child.consume_token(singles[b]):
            return None
    return child, data


def _as_tokens(matcher, lt, node: _Node) -> Completion:
    """The completion as few tokens as the tokenizer writes it, when the grammar takes that
    path (and no special token is in it); else as the search walked it."""
    data = node.data
    if len(node.tokens) == len(data):  # bytes alone: the tokenizer may write them shorter
        try:
            tokens = list(lt.tokenize_bytes(data))
        except Exception:  # noqa: BLE001 - any tokenizer failure falls back to the walked path
            tokens = []
        if tokens and len(tokens) < len(data):
            probe = matcher.deep_copy()
            if probe.try_consume_tokens(tokens) == len(tokens) and probe.is_accepting():
                return Completion(data, tuple(tokens))
    return Completion(data, node.tokens)
