"""Splitting text at special-token texts, before the tokenizer proper sees it.

This is llama.cpp's `tokenizer_st_partition`: special tokens are taken longest first;
each one's occurrences are cut out of every stretch of text not yet assigned, left to
right. Control and unknown tokens are recognised only when `parse_special` is set;
user-defined tokens always are (as Hugging Face tokenizers do). A token with the
lstrip / rstrip attribute swallows the ASCII white space before / after it.
"""

from __future__ import annotations

from .vocab import ATTR_CONTROL, ATTR_LSTRIP, ATTR_RSTRIP, ATTR_UNKNOWN, Vocab

_C_SPACE = " \t\n\v\f\r"  # isspace() in the C locale


class SpecialSplitter:
    def __init__(self, vocab: Vocab):
        tokens, attrs = vocab.tokens, vocab.attrs
        # (text, id, attr) longest first; texts that are not valid UTF-8 can never match text.
        self._all = [(tokens[i], i, attrs[i]) for i in vocab.special_tokens if not _has_surrogate(tokens[i])]
        self._user = [t for t in self._all if not t[2] & (ATTR_CONTROL | ATTR_UNKNOWN)]

    def split(self, text: str, parse_special: bool) -> list[str | int]:
        """Text fragments (str) and special token ids (int), in order."""
        if not text:
            return []
        frags: list[str | int] = [text]
        for tok_text, tid, attr in self._all if parse_special else self._user:
            if tok_text not in text:
                continue
            lstrip = attr & ATTR_LSTRIP
            rstrip = attr & ATTR_RSTRIP
            out: list[str | int] = []
            for frag in frags:
                if type(frag) is int or tok_text not in frag:
                    out.append(frag)
                    continue
                pos, end, n = 0, len(frag), len(tok_text)
                while pos < end:
                    m = frag.find(tok_text, pos)
                    if m < 0:
                        out.append(frag[pos:])
                        break
                    left = frag[pos:m]
                    if lstrip:
                        left = left.rstrip(_C_SPACE)
                    if left:
                        out.append(left)
                    out.append(tid)
                    pos = m + n
                    if rstrip:
                        while pos < end and frag[pos] in _C_SPACE:
                            pos += 1
            frags = out
        return frags


def _has_surrogate(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
