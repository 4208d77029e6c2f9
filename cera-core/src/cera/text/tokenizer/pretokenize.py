"""Pre-tokenization of byte-level BPE vocabularies: splitting text into words.

llama.cpp names, per `tokenizer.ggml.pre`, a list of regular expressions applied one
after the other, each splitting the pieces the previous one left (text between matches
becomes a piece too). The patterns below are those lists (they come from the models'
tokenizer.json files, as llama.cpp adapted them).

llama.cpp does not run all of them through a Unicode regex engine, and its results are
what we must reproduce:
- a handful of common patterns (GPT-2's, Llama 3's, Qwen 2's, ...) have hand-written
  splitters; we run equivalent patterns with the `regex` module, writing \\p{L}, \\p{N},
  \\s out as explicit classes from llama.cpp's Unicode 15.1 tables;
- every other pattern goes through std::regex on a "collapsed" copy of the text in which
  each non-ASCII code point is replaced by one byte standing for its class (see
  `unicode.collapse_table`), and \\p{X} in the pattern by that byte plus X's ASCII
  members. We build the same collapsed text and pattern, so patterns keep llama.cpp's
  exact (sometimes surprising) meaning, for example \\p{Lu} matching any letter.
"""

from __future__ import annotations

from functools import cache

import regex

from ...errors import TokenizerError
from . import unicode as uc

# fmt: off
PATTERNS: dict[str, tuple[str, ...]] = {
    'llama3': (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    'jais2': (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}",
    ),
    'deepseek-llm': (
        '[\r\n]',
        '\\s?[A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+',
        '\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+',
        '\\s+$',
        '[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+',
        '\\p{N}+',
    ),
    'deepseek3-llm': (
        '\\p{N}{1,3}',
        '[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+',
        '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+',
    ),
    'spark2_5': (
        '\\p{N}{1,3}',
        '[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+',
        '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+',
        '\\p{N}',
    ),
    'youtu': (
        '[\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c\u3001-\u303f\ufe30-\ufe4f]+|[\u3105-\u312f]+|[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+',
        "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    'deepseek-coder': (
        '[\r\n]',
        '\\s?\\p{L}+',
        '\\s?\\p{P}+',
        '[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+',
        '\\p{N}',
    ),
    'falcon': (
        '[\\p{P}\\$\\+<=>\\^~\\|`]+',
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
        '[0-9][0-9][0-9]',
    ),
    'starcoder': (
        '\\p{N}',
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    ),
    'gpt2': (
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    ),
    'qwen2': (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    'qwen35': (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    'poro': (
        ' ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+',
    ),
    'viking': (
        ' ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+',
        '\\p{N}',
    ),
    'tekken': (
        '[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ),
    'chameleon': (
        '<sentinel:[0-9]+>',
        '(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z',
        '([\\t\\n]|    |  )',
        '\\p{N}',
        '[\\p{P}!-/:-@\\[-`{-~]',
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    ),
    'gpt4o': (
        "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    'granite-emb-multi': (
        "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    'tiny-aya': (
        '\\d{1,3}(?=(?:\\d{3})*\\b)',
        "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    'superbpe': (
        '\\p{N}+',
        '(?=(\\d{3})+(?!\\d))',
    ),
    'bailingmoe': (
        "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    ),
    'seed-coder': (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    'ufakzeka': (
        '[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ),
    'afmoe': (
        '\\p{AFMoE_digits}',
        '[\u4e00-\u9fff\u3400-\u4dbf\u8c48-\ufaff\u3040-\u309f\u30a0-\u30ff\uff65-\uff9f\u2f00-\u2fdf\u0e40-\u0e7f\u0e80-\u0eff\u1780-\u17ff\u1000-\u109f\uaa60-\uaa7f\ua9e0-\ua9ff\uac00-\ud7af\u1100-\u11ff]+',
        '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ),
    'laguna': (
        '[^\\n]+|[\\n]+',
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    'exaone-moe': (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    ),
    'gemma4': (
        '[^\\n]+|[\\n]+',
    ),
    'minicpm5': (
        '\\p{N}{1,3}',
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    'default': (
        '[\\p{P}\\$\\+<=>\\^~\\|]+',
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
        '\\p{N}+',
        '[0-9][0-9][0-9]',
    ),
}
# fmt: on
# Families that share another's patterns (their flags differ, in vocab.py).
PATTERNS["sarvam"] = PATTERNS["gemma4"]

# The patterns llama.cpp splits with hand-written code (matched by exact text).
_GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
_LLAMA3 = (
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
)
_QWEN2 = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
_QWEN35 = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
_NEWLINES = "[^\\n]+|[\\n]+"
# StarCoder, SmolLM, Command-R, ...: single digits first, then GPT-2's pattern (fused below).
_DIGITS_THEN_GPT2 = ("\\p{N}", _GPT2)
_DIGIT_GROUPS = ("\\p{AFMoE_digits}", "\\d{1,3}(?=(?:\\d{3})*\\b)")

# \p{..} names llama.cpp rewrites for its std::regex path, and the class each stands for.
_UCAT = {
    "\\p{N}": uc.NUMBER, "\\p{L}": uc.LETTER, "\\p{P}": uc.PUNCTUATION, "\\p{M}": uc.MARK, "\\p{S}": uc.SYMBOL,
    "\\p{Lu}": uc.LETTER, "\\p{Ll}": uc.LETTER, "\\p{Lt}": uc.LETTER, "\\p{Lm}": uc.LETTER, "\\p{Lo}": uc.LETTER,
}


def _exact_custom_pattern(expr: str) -> regex.Pattern:
    """The regex equivalent of one of llama.cpp's hand-written splitters.

    It runs on the text mapped through `unicode.property_fixups()`, where the regex
    module's \\p{L}, \\p{N}, \\p{M} mean exactly llama.cpp's classes; \\s is spelled out
    (White_Space). A last alternative takes any single code point, as the hand-written
    code does when nothing else matches.
    """
    S = uc.char_class_body(0, whitespace=True)
    contractions = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    tail = f"|[{S}]*[\\r\\n]+|[{S}]+(?![^{S}])|[{S}]+|(?s:.)"
    if expr == _GPT2:
        p = f"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{{L}}+| ?\\p{{N}}+| ?[^{S}\\p{{L}}\\p{{N}}]+|[{S}]+(?![^{S}])|[{S}]+|(?s:.)"
    elif expr in _LLAMA3:
        p = f"{contractions}|[^\\r\\n\\p{{L}}\\p{{N}}]?\\p{{L}}+|\\p{{N}}{{1,3}}| ?[^{S}\\p{{L}}\\p{{N}}]+[\\r\\n]*" + tail
    elif expr == _QWEN2:
        p = f"{contractions}|[^\\r\\n\\p{{L}}\\p{{N}}]?\\p{{L}}+|\\p{{N}}| ?[^{S}\\p{{L}}\\p{{N}}]+[\\r\\n]*" + tail
    elif expr == _QWEN35:
        p = (f"{contractions}|[^\\r\\n\\p{{L}}\\p{{N}}]?[\\p{{L}}\\p{{M}}]+|\\p{{N}}"
             f"| ?[^{S}\\p{{L}}\\p{{M}}\\p{{N}}]+[\\r\\n]*" + tail)
    elif expr == _DIGITS_THEN_GPT2:
        # "\p{N}" then GPT-2's pattern within each piece, as one pattern: a number is a piece
        # of its own, and a piece's end before a number counts as the end for (?!\S).
        p = f"\\p{{N}}|'s|'t|'re|'ve|'m|'ll|'d| ?\\p{{L}}+| ?[^{S}\\p{{L}}\\p{{N}}]+|[{S}]+(?![^{S}\\p{{N}}])|[{S}]+|(?s:.)"
    elif expr == _NEWLINES:
        p = "[^\\n]+|\\n+"
    else:  # pragma: no cover - guarded by the caller
        raise AssertionError(expr)
    return regex.compile(p, regex.V0)


def _collapse_pattern(expr: str) -> str:
    """Rewrite \\p{..} as llama.cpp does for matching the collapsed text."""
    out = []
    inside = False
    i, n = 0, len(expr)
    while i < n:
        c = expr[i]
        if c == "[" and (i == 0 or expr[i - 1] != "\\"):
            out.append("[")
            inside = True
            i += 1
            continue
        if inside and c == "]" and expr[i - 1] != "\\":
            out.append("]")
            inside = False
            i += 1
            continue
        if c == "\\" and i + 3 < n and expr[i + 1] == "p" and expr[i + 2] == "{":
            close = expr.find("}", i + 3)
            if close != -1 and close <= i + 10 and expr[i : close + 1] in _UCAT:
                flag = _UCAT[expr[i : close + 1]]
                body = uc.COLLAPSED_BYTE[flag] + uc.COLLAPSED_ASCII[flag]
                out.append(body if inside else f"[{body}]")
                i = close + 1
                continue
        out.append(c)
        i += 1
    return "".join(out)


def _ecmascript_to_python(expr: str) -> str:
    """std::regex (ECMAScript) -> Python regex, for the constructs the patterns use:
    only `$` differs (ECMAScript's matches only at the very end)."""
    out = []
    inside = False
    escaped = False
    for c in expr:
        if escaped:
            out.append(c)
            escaped = False
            continue
        if c == "\\":
            escaped = True
        elif c == "[":
            inside = True
        elif c == "]":
            inside = False
        elif c == "$" and not inside:
            out.append("\\Z")
            continue
        out.append(c)
    return "".join(out)


class _Step:
    """One pattern of a pre-tokenizer: splits each piece into sub-pieces."""

    kind: str  # "exact" (no gaps possible), "std" (gaps become pieces), "digits"
    # which copy of the text it runs on: "plain", "fixed" (property_fixups applied),
    # "collapsed" or "wide" (llama.cpp's std::regex inputs)
    text_form: str

    def __init__(self, expr: str | tuple[str, ...]):
        self.expr = expr
        if expr in (_GPT2, _QWEN2, _QWEN35, _NEWLINES, _DIGITS_THEN_GPT2) or expr in _LLAMA3:
            self.kind, self.text_form = "exact", "plain" if expr == _NEWLINES else "fixed"
            self.pattern = _exact_custom_pattern(expr)
        elif expr in _DIGIT_GROUPS:
            self.kind, self.text_form = "digits", "fixed"
            self.pattern = regex.compile("\\p{N}+")
        elif "\\p{Han}" in expr:
            raise TokenizerError("the Kimi-K2 pre-tokenizer is not implemented")
        else:
            uses_classes = any(name in expr for name in _UCAT)
            if uses_classes:
                if any(ord(ch) >= 128 for ch in expr):
                    raise TokenizerError(f"pre-tokenizer pattern mixes \\p{{..}} and non-ASCII text: {expr!r}")
                py = _ecmascript_to_python(_collapse_pattern(expr))
                self.text_form = "collapsed"
            else:
                py = _ecmascript_to_python(expr)
                self.text_form = "wide"
            self.kind = "std"
            try:
                self.pattern = regex.compile(py, regex.V0 | regex.ASCII)
            except regex.error as e:
                raise TokenizerError(f"cannot compile pre-tokenizer pattern {expr!r}: {e}") from None

    def split(self, text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        append = out.append
        if self.kind == "exact":
            for s, e in spans:
                for m in self.pattern.finditer(text, s, e):
                    append(m.span())
        elif self.kind == "std":
            for s, e in spans:
                prev = s
                for m in self.pattern.finditer(text, s, e):
                    a, b = m.span()
                    if a > prev:
                        append((prev, a))
                    if b > a:
                        append((a, b))
                    prev = b
                if prev < e:
                    append((prev, e))
        else:  # llama.cpp's digit grouping (AFMoE, Tiny Aya): 1-2 leading digits, then threes.
            for s, e in spans:
                prev = s
                for m in self.pattern.finditer(text, s, e):
                    a, b = m.span()
                    cur = a
                    r = (b - a) % 3
                    if r:
                        # the first group also takes the text before the digits (as llama.cpp does)
                        append((prev, cur + r))
                        prev = cur = cur + r
                    while cur < b:
                        append((prev, cur + 3))
                        prev = cur = cur + 3
                if prev < e:
                    append((prev, e))
        return out


class PreTokenizer:
    """Splits text into the words a BPE vocabulary merges within."""

    def __init__(self, family: str):
        if family not in PATTERNS:
            raise TokenizerError(f"no pre-tokenizer patterns for {family!r}")
        self.family = family
        exprs = PATTERNS[family]
        if exprs == _DIGITS_THEN_GPT2:
            self.steps = [_Step(exprs)]
        else:
            self.steps = [_Step(e) for e in exprs]
        self._single = self.steps[0] if len(self.steps) == 1 and self.steps[0].kind == "exact" else None

    def split(self, text: str) -> list[str]:
        if not text:
            return []
        if self._single is not None:
            if self._single.text_form == "plain":
                return self._single.pattern.findall(text)
            fixed = text.translate(uc.property_fixups())
            if fixed is text or fixed == text:
                return self._single.pattern.findall(text)
            return [text[a:b] for a, b in (m.span() for m in self._single.pattern.finditer(fixed))]
        forms = {"plain": text}
        spans = [(0, len(text))]
        for step in self.steps:
            form = forms.get(step.text_form)
            if form is None:
                if step.text_form == "fixed":
                    form = text.translate(uc.property_fixups())
                elif step.text_form == "collapsed":
                    form = text.translate(uc.collapse_table())
                else:
                    form = text.translate(uc.WIDE_WS_TABLE)
                forms[step.text_form] = form
            spans = step.split(form, spans)
        return [text[s:e] for s, e in spans]


@cache
def pretokenizer(family: str) -> PreTokenizer:
    return PreTokenizer(family)
