"""No key twice in one JSON object: what a JSON Schema grammar cannot say (the grammar
engine matches a context-free language; "a key not yet written" is not one).

`KeyGuard` reads the value as it is generated (a small scanner: objects, arrays,
strings, escapes) and knows, in each open object, the keys written so far. Each step it
bans the tokens that would close a key equal to one already in that object: while a key
is being written with prefix P, the tokens that start with the rest of an existing key
and its closing quote; before a key, the tokens that write a whole existing key at once.
Tokens are found by prefix in the vocabulary sorted by bytes (a bisection per key).
"""

from __future__ import annotations

import bisect

import numpy as np


# whitespace a token may carry before a key (the JSON grammar's: a space, or a newline and an indent)
LEADS = (b"", b" ", b"\n", b"\n\t", *(b"\n" + b" " * k for k in (1, 2, 3, 4, 6, 8)))


_SORTED: dict[int, tuple[list[bytes], list[bytes], np.ndarray]] = {}  # id(token bytes) -> (them, sorted, ids)


def _sorted_vocabulary(token_bytes: list[bytes]) -> tuple[list[bytes], np.ndarray]:
    """The text tokens sorted by their bytes, and their ids (once per vocabulary)."""
    hit = _SORTED.get(id(token_bytes))
    if hit is None or hit[0] is not token_bytes:
        pairs = sorted((b, i) for i, b in enumerate(token_bytes) if b[:1] != b"\xff")
        hit = (token_bytes, [b for b, _ in pairs], np.array([i for _, i in pairs], np.int64))
        _SORTED[id(token_bytes)] = hit
    return hit[1], hit[2]


class KeyGuard:
    def __init__(self, token_bytes: list[bytes]):
        self._bytes = token_bytes
        self._sorted, self._ids = _sorted_vocabulary(token_bytes)
        self.stack: list[dict | None] = []  # an object: {"keys": set, "expect": bool}; an array: None
        self.in_string = False
        self.is_key = False
        self.escape = False
        self.text = b""  # the string being written (without its quotes)

    # -- reading what was generated ---------------------------------------------------------

    def feed(self, data: bytes) -> None:
        for c in data:
            if self.in_string:
                if self.escape:
                    self.escape = False
                    self.text += bytes([c])
                elif c == 0x5C:  # backslash
                    self.escape = True
                    self.text += bytes([c])
                elif c == 0x22:  # closing quote
                    self.in_string = False
                    top = self.stack[-1] if self.stack else None
                    if self.is_key and top is not None:
                        top["keys"].add(self.text)
                        top["expect"] = False
                else:
                    self.text += bytes([c])
                continue
            top = self.stack[-1] if self.stack else None
            if c == 0x7B:  # {
                self.stack.append({"keys": set(), "expect": True})
            elif c == 0x5B:  # [
                self.stack.append(None)
            elif c in (0x7D, 0x5D):  # } ]
                if self.stack:
                    self.stack.pop()
            elif c == 0x2C and top is not None:  # , in an object: a key comes next
                top["expect"] = True
            elif c == 0x22:
                self.in_string, self.escape, self.text = True, False, b""
                self.is_key = top is not None and top["expect"]

    # -- banning --------------------------------------------------------------------------------

    def banned(self) -> list[int]:
        """Tokens that would write a key the open object already has."""
        top = self.stack[-1] if self.stack else None
        if top is None or not top["keys"]:
            return []
        if self.in_string:
            if not self.is_key or self.escape:
                return []
            rests = [k[len(self.text) :] + b'"' for k in top["keys"] if k.startswith(self.text)]
        elif top["expect"]:
            rests = [lead + b'"' + k + b'"' for k in top["keys"] for lead in LEADS]
        else:
            return []
        out: list[int] = []
        for rest in rests:
            lo = bisect.bisect_left(self._sorted, rest)
            hi = lo
            while hi < len(self._sorted) and self._sorted[hi].startswith(rest):
                hi += 1
            out.extend(self._ids[lo:hi].tolist())
        return out
