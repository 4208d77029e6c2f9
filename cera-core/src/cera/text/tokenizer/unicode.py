"""Code point classes, byte-level encoding and the helpers the tokenizers share.

Everything here follows llama.cpp's `unicode.cpp` semantics, on the Unicode 15.1
tables in `_unicode_data` (see tests/core/data/tokenizer/gen_unicode_data.py for why
cera ships fixed tables). Lookup structures are built once, on first use.
"""

from __future__ import annotations

import bisect
from functools import cache, lru_cache

import numpy as np

from . import _unicode_data as _ud

# Class flags of a code point (one per code point), as in the generated table.
UNDEFINED, NUMBER, LETTER, SEPARATOR, MARK, PUNCTUATION, SYMBOL, CONTROL = 1, 2, 4, 8, 16, 32, 64, 128
MAX_CODEPOINT = 0x110000

WHITE_SPACE = frozenset(_ud.WHITE_SPACE)


@lru_cache(maxsize=1)
def category_table() -> np.ndarray:
    """uint8 class flag of every code point (index = code point)."""
    runs = np.array(_ud.CATEGORY_RUNS, dtype=np.int64).reshape(-1, 2)
    starts = runs[:, 0]
    lengths = np.diff(np.append(starts, MAX_CODEPOINT))
    return np.repeat(runs[:, 1].astype(np.uint8), lengths)


@lru_cache(maxsize=1)
def category_bytes() -> bytes:
    """The same table as bytes (indexing a bytes object is the fastest per-character look-up)."""
    return category_table().tobytes()


def flags_of(cp: int) -> int:
    return int(category_table()[cp]) if 0 <= cp < MAX_CODEPOINT else UNDEFINED


def _ranges(mask: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) runs of True in a per-code-point mask."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.view(np.int8), [0]))))
    return [(int(a), int(b) - 1) for a, b in zip(edges[0::2], edges[1::2], strict=True)]


def _escape(cp: int) -> str:
    # literal characters parse much faster than \U escapes in a pattern of thousands of ranges
    ch = chr(cp)
    if ch in "\\]^-[&|~" or cp < 0x20 or 0xD800 <= cp < 0xE000 or cp in WHITE_SPACE:
        return f"\\U{cp:08x}"
    return ch


@cache
def char_class_body(flags: int, whitespace: bool = False) -> str:
    """The inside of a regex character class matching every code point whose class is
    in `flags` (a bit set), plus the White_Space code points when `whitespace`.

    Used to write llama.cpp's pre-tokenizer patterns with exactly its \\p{L}, \\p{N},
    \\s, instead of the (newer, version-dependent) Unicode data of the regex module.
    """
    mask = (category_table() & flags) != 0
    if whitespace:
        mask = mask.copy()
        mask[list(WHITE_SPACE)] = True
    parts = []
    for a, b in _ranges(mask):
        parts.append(_escape(a) if a == b else f"{_escape(a)}-{_escape(b)}")
    return "".join(parts)


# -- running fast Unicode-property patterns with llama.cpp's classes ------------------------
#
# Character classes spelled out from our tables are exact but make the regex engine ~10x
# slower than its own \p{..} properties. The regex module's Unicode data is newer than
# 15.1, and the two disagree only on code points assigned since (and the odd category
# change). So patterns use \p{L}, \p{N}, \p{M}, and the text is first mapped through a
# small table that replaces each code point on which the two disagree by a stand-in of
# llama.cpp's class: then the regex module's answer is llama.cpp's answer.
_STAND_IN = {LETTER: "\u00aa", NUMBER: "\u00b2", MARK: "\u0300"}  # Lo, No, Mn in every Unicode version
_STAND_IN_OTHER = "\ufdd0"  # a noncharacter: never a letter, number, mark or space


@lru_cache(maxsize=1)
def property_fixups() -> dict[int, str]:
    """str.translate table making the regex module's \\p{L}/\\p{N}/\\p{M} agree with our tables."""
    import regex

    cats = category_table()
    # every code point, in order (surrogates included), scanned once per property for runs
    everything = np.arange(MAX_CODEPOINT, dtype=np.uint32).tobytes().decode("utf-32-le", "surrogatepass")
    theirs = np.zeros(MAX_CODEPOINT, dtype=np.uint8)
    for flag, prop in ((LETTER, "L"), (NUMBER, "N"), (MARK, "M")):
        for m in regex.finditer(rf"\p{{{prop}}}+", everything):
            theirs[m.start() : m.end()] = flag
    ours = np.where(np.isin(cats, (LETTER, NUMBER, MARK)), cats, 0)
    return {int(cp): _STAND_IN.get(int(cats[cp]), _STAND_IN_OTHER) for cp in np.flatnonzero(ours != theirs)}


# -- the "collapsed" text of llama.cpp's std::regex fallback ---------------------------
#
# For patterns that llama.cpp runs through std::regex, it first replaces every code point
# >= 128 by one byte standing for its class (whitespace first), and rewrites \p{X} in the
# pattern as "[<that byte> + the ASCII members of X]". We do the same, so patterns keep
# llama.cpp's exact meaning (and its quirks) whatever the regex engine's Unicode data.
COLLAPSED_WS = "\x0b"
COLLAPSED_BYTE = {NUMBER: "\xd1", LETTER: "\xd2", PUNCTUATION: "\xd3", MARK: "\xd4", SYMBOL: "\xd5"}
COLLAPSED_OTHER = "\xd0"
# ASCII members of each class, as llama.cpp lists them.
COLLAPSED_ASCII = {
    NUMBER: "0-9",
    LETTER: "A-Za-z",
    PUNCTUATION: r"!-#%-*,-/:-;?-@\[-\]_\{\}",
    MARK: "",
    SYMBOL: r"\$\+<->\^`\|~",
}


@lru_cache(maxsize=1)
def collapse_table() -> str:
    """A str of length 0x110000 usable with str.translate: code point -> collapsed char."""
    cats = category_table()
    out = np.full(MAX_CODEPOINT, ord(COLLAPSED_OTHER), dtype=np.uint8)
    for flag, ch in COLLAPSED_BYTE.items():
        out[cats == flag] = ord(ch)
    out[list(WHITE_SPACE)] = ord(COLLAPSED_WS)
    out[:128] = np.arange(128, dtype=np.uint8)
    return out.tobytes().decode("latin-1")


# Non-ASCII white space -> vertical tab, for patterns without \p{..} (llama.cpp's wregex path).
WIDE_WS_TABLE = {cp: COLLAPSED_WS for cp in WHITE_SPACE if cp > 0x7F}


# -- case and decomposition ---------------------------------------------------------------


@lru_cache(maxsize=1)
def _lower_map() -> dict[int, int]:
    it = iter(_ud.LOWERCASE)
    return dict(zip(it, it, strict=True))


def to_lower(cp: int) -> int:
    """Simple (one code point) lowercase mapping."""
    return _lower_map().get(cp, cp)


@lru_cache(maxsize=1)
def _nfd_table() -> tuple[list[int], list[int], list[int]]:
    t = _ud.NFD_FIRST
    return list(t[0::3]), list(t[1::3]), list(t[2::3])


def nfd_first(cp: int) -> int:
    """First code point of the canonical decomposition (the code point itself if none)."""
    firsts, lasts, maps = _nfd_table()
    i = bisect.bisect_right(firsts, cp) - 1
    if i >= 0 and cp <= lasts[i]:
        return maps[i]
    return cp


# -- GPT-2 byte-level encoding ---------------------------------------------------------------


@lru_cache(maxsize=1)
def byte_to_unicode() -> list[str]:
    """GPT-2's reversible map of the 256 byte values onto printable code points."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table = [""] * 256
    for b in keep:
        table[b] = chr(b)
    n = 0
    for b in range(256):
        if not table[b]:
            table[b] = chr(256 + n)
            n += 1
    return table


@lru_cache(maxsize=1)
def byte_encode_table() -> dict[int, str]:
    """str.translate table: a code point < 256 standing for a byte -> its GPT-2 character."""
    return dict(enumerate(byte_to_unicode()))


@lru_cache(maxsize=1)
def unicode_to_byte() -> dict[str, int]:
    return {ch: b for b, ch in enumerate(byte_to_unicode())}


def byte_encode(text: str) -> str:
    """UTF-8 bytes of `text`, each written as its GPT-2 character."""
    return text.encode("utf-8", "surrogatepass").decode("latin-1").translate(byte_encode_table())


# -- lenient UTF-8, as llama.cpp decodes it ---------------------------------------------------


def decode_utf8_lenient(data: bytes) -> str:
    """Decode bytes the way llama.cpp's unicode_cpts_from_utf8 does.

    Valid input decodes as usual. A byte that does not start a complete sequence becomes
    U+FFFD and decoding resumes at the next byte. Like llama.cpp, overlong forms and
    surrogate code points are not rejected.
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    out = []
    i, n = 0, len(data)
    while i < n:
        b = data[i]
        if b < 0x80:
            out.append(b)
            i += 1
            continue
        if b & 0x40 == 0:
            size = 0
        elif b & 0x20 == 0:
            size = 2
        elif b & 0x10 == 0:
            size = 3
        elif b & 0x08 == 0:
            size = 4
        else:
            size = 0
        if size and i + size - 1 < n and all(data[i + k] & 0xC0 == 0x80 for k in range(1, size)):
            cp = b & (0x7F >> size)
            for k in range(1, size):
                cp = (cp << 6) | (data[i + k] & 0x3F)
            out.append(cp)
            i += size
        else:
            out.append(0xFFFD)
            i += 1
    return "".join(map(chr, out))
