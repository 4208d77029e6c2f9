"""WordPiece (BERT) tokenization, as llama.cpp's llm_tokenizer_wpm.

Text is normalised code point by code point (optional accent stripping through the first
code point of each canonical decomposition, optional lowercasing, control characters
dropped), split at white space, and punctuation, ASCII symbols and CJK ideographs become
words of their own. Each word, prefixed with "▁", is covered greedily by the longest
tokens from the left; a word that cannot be covered becomes the unknown token.
"""

from __future__ import annotations

from . import unicode as uc

# Tokens longer than this are never matched (no real vocabulary has one; a hostile file's
# would make every position cost that much).
MAX_MATCH_CHARS = 1024


def _is_chinese(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B920 <= cp <= 0x2CEAF  # as Hugging Face's BERT normaliser has it (0x2B820 in Unicode)
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


class WPMEncoder:
    def __init__(self, token_to_id: dict[str, int], unk_id: int | None, *, lowercase: bool, strip_accents: bool):
        self.token_to_id = token_to_id
        self.unk_id = unk_id
        self.lowercase = lowercase
        self.strip_accents = strip_accents
        self.cache: dict[str, tuple[int, ...]] = {}
        # As llama.cpp: a match is tried from the longest token length down, not from the
        # end of the word, so a long word costs its length times this, not its square.
        self.max_len = min(max((len(t) for t in token_to_id), default=1), MAX_MATCH_CHARS)

    def words(self, text: str) -> list[str]:
        cats = uc.category_bytes()
        ws = uc.WHITE_SPACE
        words = [[]]
        for ch in text:
            cp = ord(ch)
            if self.strip_accents:
                cp = uc.nfd_first(cp)
            if cp in ws:
                if words[-1]:
                    words.append([])
                continue
            flag = cats[cp] if cp < uc.MAX_CODEPOINT else uc.UNDEFINED
            if cp == 0 or cp == 0xFFFD or flag == uc.CONTROL:
                continue
            if self.strip_accents and flag == uc.MARK:
                continue
            s = chr(uc.to_lower(cp) if self.lowercase else cp)
            if flag == uc.PUNCTUATION or (cp < 0x7F and flag == uc.SYMBOL) or _is_chinese(cp):
                if words[-1]:
                    words.append([])
                words[-1].append(s)
                words.append([])
            else:
                words[-1].append(s)
        return ["".join(w) for w in words if w]

    def encode(self, text: str, out: list[int]) -> None:
        for word in self.words(text):
            ids = self.cache.get(word)
            if ids is None:
                ids = self._word(word)
                if len(self.cache) > 200_000:
                    self.cache.clear()
                self.cache[word] = ids
            out.extend(ids)

    def _word(self, word: str) -> tuple[int, ...]:
        t2i = self.token_to_id
        w = "\u2581" + word
        n = len(w)
        ids = []
        i = 0
        while i < n:
            # the longest token starting at i
            j = min(n, i + self.max_len)
            while j > i:
                tid = t2i.get(w[i:j])
                if tid is not None:
                    break
                j -= 1
            else:
                return (self.unk_id,) if self.unk_id is not None else ()
            ids.append(tid)
            i = j
        return tuple(ids)
