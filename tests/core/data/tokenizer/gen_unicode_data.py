"""Generate cera/text/tokenizer/_unicode_data.py: the Unicode tables the tokenizers need.

llama.cpp classifies code points with tables built from Unicode 15.1. Python's own
`unicodedata` follows the interpreter's Unicode version (14.0 in 3.11, 15.1 in 3.13,
16.0 in 3.14), so a tokenizer that asked it at run time would split differently on
code points assigned in between, and differently on each Python. cera therefore ships
fixed tables, generated here from `unicodedata2==15.1.0` (the `unicodedata` backport
pinned to Unicode 15.1):

- the general category of every code point, reduced to the eight classes pre-tokenizer
  patterns use (\\p{N}, \\p{L}, \\p{Z}, \\p{M}, \\p{P}, \\p{S}, \\p{C}, unassigned), as runs;
- the White_Space code points (\\s);
- simple lowercase mappings (per code point, no context: U+0130 -> U+0069);
- the first code point of each canonical decomposition (NFD), which is what BERT's
  accent stripping keeps.

Run:  python -m venv /tmp/ud && /tmp/ud/bin/pip install unicodedata2==15.1.0 &&
      /tmp/ud/bin/python tests/core/data/tokenizer/gen_unicode_data.py
(from the repository root; it rewrites cera-core/src/cera/text/tokenizer/_unicode_data.py).
The lowercase table uses the running Python's str.lower for single code points; case
pairs did not change between Unicode 14 and 15.1, and the script refuses to run on a
Python whose Unicode is older than 14.
"""

from __future__ import annotations

import sys
import unicodedata
from pathlib import Path

import unicodedata2 as ud

assert ud.unidata_version == "15.1.0", ud.unidata_version
assert tuple(int(x) for x in unicodedata.unidata_version.split(".")) >= (14, 0, 0)

UNDEFINED, NUMBER, LETTER, SEPARATOR, MARK, PUNCTUATION, SYMBOL, CONTROL = 1, 2, 4, 8, 16, 32, 64, 128
MAJOR = {"N": NUMBER, "L": LETTER, "Z": SEPARATOR, "M": MARK, "P": PUNCTUATION, "S": SYMBOL, "C": CONTROL}
# Unicode's White_Space property (PropList.txt); unchanged since Unicode 6.
WHITE_SPACE = (
    [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680]
    + list(range(0x2000, 0x200B))
    + [0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
)


def category_flag(cp: int) -> int:
    cat = ud.category(chr(cp))
    return UNDEFINED if cat == "Cn" else MAJOR[cat[0]]


def main() -> None:
    runs: list[int] = []
    prev = None
    for cp in range(0x110000):
        f = category_flag(cp)
        if f != prev:
            runs += [cp, f]
            prev = f

    lower: list[int] = []
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        lo = chr(cp).lower()
        if len(lo) > 1:  # full mapping (only U+0130); the simple mapping is its first code point
            lo = lo[0]
        if ord(lo) != cp:
            lower += [cp, ord(lo)]

    nfd: list[int] = []  # first, last, first code point of the decomposition
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        d = ud.normalize("NFD", chr(cp))
        if d == chr(cp):
            continue
        first = ord(d[0])
        if nfd and nfd[-2] == cp - 1 and nfd[-1] == first:
            nfd[-2] = cp
        else:
            nfd += [cp, cp, first]

    def fmt(name: str, values: list[int], per_line: int) -> str:
        lines = [f"{name} = ("]
        for i in range(0, len(values), per_line):
            lines.append("    " + ", ".join(f"0x{v:X}" for v in values[i : i + per_line]) + ",")
        lines.append(")")
        return "\n".join(lines)

    out = [
        '"""Unicode 15.1 tables for the tokenizers (generated: do not edit).',
        "",
        "Written by tests/core/data/tokenizer/gen_unicode_data.py from unicodedata2 15.1.0;",
        "see that script for why cera ships these instead of asking `unicodedata`.",
        '"""',
        "",
        f"UNICODE_VERSION = {ud.unidata_version!r}",
        "",
        "# Category runs: (first code point, class flag) pairs; a run lasts until the next one starts.",
        fmt("CATEGORY_RUNS", runs, 12),
        "",
        fmt("WHITE_SPACE", WHITE_SPACE, 12),
        "",
        "# Simple lowercase mapping: (code point, lowercase) pairs.",
        fmt("LOWERCASE", lower, 12),
        "",
        "# Canonical decomposition, first code point only: (first, last, maps-to) triples.",
        fmt("NFD_FIRST", nfd, 12),
        "",
    ]
    target = Path(__file__).resolve().parents[4] / "cera-core/src/cera/text/tokenizer/_unicode_data.py"
    target.write_text("\n".join(out))
    print(f"wrote {target}: {len(runs) // 2} runs, {len(lower) // 2} lowercase pairs, {len(nfd) // 3} NFD ranges")


if __name__ == "__main__":
    sys.exit(main())
