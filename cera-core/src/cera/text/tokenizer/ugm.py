"""Unigram (T5 / XLM-R SentencePiece) tokenization, as llama.cpp's llm_tokenizer_ugm.

The text is first normalised with the file's precompiled character map (SentencePiece's
"XOR-compressed compact double array" of replacement rules), spaces become "▁"; then a
Viterbi search picks the segmentation whose token scores sum highest, with an unknown
token (scored 10 below the worst token) where no token covers a character.
"""

from __future__ import annotations

import struct

import numpy as np

from ...errors import TokenizerError
from .vocab import ATTR_NORMAL, ATTR_UNUSED, ATTR_USER_DEFINED, Vocab

_SPACE = "\u2581".encode()
MAX_MATCH_BYTES = 1024


def _utf8_len(b: int) -> int:
    return (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)[b >> 4]


class UGMEncoder:
    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self.unk_id = vocab.special["unk"]
        cm = vocab.precompiled_charsmap
        self.xcda: tuple[int, ...] = ()
        self.replacements = b""
        if cm:
            if len(cm) < 4:
                raise TokenizerError("tokenizer.ggml.precompiled_charsmap is too short for its header")
            (blob,) = struct.unpack_from("<I", cm, 0)
            if blob + 4 >= len(cm):
                raise TokenizerError("tokenizer.ggml.precompiled_charsmap: its trie runs past the end of the map")
            self.xcda = struct.unpack_from(f"<{blob // 4}I", cm, 4)
            self.replacements = cm[4 + blob :]
        self.tokens: dict[bytes, int] = {}
        self.user_defined: set[bytes] = set()
        min_score = np.float32(np.inf)
        for i, (text, attr) in enumerate(zip(vocab.tokens, vocab.attrs, strict=True)):
            b = text.encode("utf-8", "surrogateescape")
            if attr & ATTR_NORMAL:
                min_score = min(min_score, vocab.scores[i])
            if attr & (ATTR_NORMAL | ATTR_USER_DEFINED | ATTR_UNUSED):
                self.tokens[b] = i
            if attr & ATTR_USER_DEFINED:
                self.user_defined.add(b)
        self.scores = [float(s) for s in vocab.scores]
        self.user_scores = {i: 0.0 for b, i in self.tokens.items() if b in self.user_defined}
        # float arithmetic, as llama.cpp computes it
        self.unknown_score = float(np.float32(min_score) - np.float32(10.0))
        # Tokens longer than MAX_MATCH_BYTES are never matched: no real vocabulary has one,
        # and a hostile file's would make every position of the text cost that much.
        self.token_lengths = sorted({len(b) for b in self.tokens if len(b) <= MAX_MATCH_BYTES})
        # llama.cpp's user-defined matcher returns the longest stretch that follows a path
        # of its trie, whether or not that path spells a whole token: a trie of their bytes
        # (its size is the tokens' total length, where a set of every prefix would be its square).
        self.user_trie: dict = {}
        for b in self.user_defined:
            node = self.user_trie
            for c in b[:MAX_MATCH_BYTES]:
                node = node.setdefault(c, {})

    # -- normalisation ----------------------------------------------------------------

    def _normalize_prefix(self, data: bytes, off: int) -> tuple[bytes, int]:
        node = self.user_trie
        n = 0
        while off + n < len(data):
            node = node.get(data[off + n])
            if node is None:
                break
            n += 1
        if n:
            return data[off : off + n], n
        best_len = 0
        best_off = 0
        xcda = self.xcda
        if xcda:
            size = len(xcda)

            def node(i: int) -> int:
                if i >= size:
                    raise TokenizerError("tokenizer.ggml.precompiled_charsmap: trie index out of bounds")
                return xcda[i]

            def base(v: int) -> int:
                return (v >> 10) << ((v & (1 << 9)) >> 6)

            idx = base(node(0))
            for p in range(off, min(len(data), off + MAX_MATCH_BYTES)):
                c = data[p]
                if c == 0:
                    break
                idx ^= c
                v = node(idx)
                if v & ((1 << 31) | 0xFF) != c:
                    break
                leaf = (v >> 8) & 1
                idx ^= base(v)
                if leaf:
                    best_len = p - off + 1
                    best_off = node(idx) & ((1 << 31) - 1)
        if best_len:
            if best_off >= len(self.replacements):
                raise TokenizerError("tokenizer.ggml.precompiled_charsmap: replacement index out of bounds")
            end = self.replacements.find(b"\0", best_off)
            if end < 0:
                raise TokenizerError("tokenizer.ggml.precompiled_charsmap: unterminated replacement")
            return self.replacements[best_off:end], best_len
        # no rule: the next UTF-8 character unchanged, or U+FFFD for an invalid byte
        b = data[off]
        n = _utf8_len(b) if b >= 0xC0 else (1 if b < 0x80 else 0)
        if n and off + n <= len(data) and all(data[off + k] & 0xC0 == 0x80 for k in range(1, n)):
            return data[off : off + n], n
        return "\ufffd".encode(), 1

    def normalize(self, text: str) -> bytes:
        v = self.vocab
        data = text.encode("utf-8", "surrogatepass")
        space = _SPACE if v.escape_whitespaces else b" "
        prepend = not v.treat_whitespace_as_suffix and v.add_space_prefix
        append_end = v.treat_whitespace_as_suffix and v.add_space_prefix
        merge = v.remove_extra_whitespaces
        out = bytearray()
        space_prepended = False
        in_word = False
        off = 0
        while off < len(data):
            piece, used = self._normalize_prefix(data, off)
            for c in piece:
                if c != 0x20:
                    if not in_word:
                        in_word = True
                        if (prepend and not space_prepended) or merge:
                            out += space
                            space_prepended = True
                    out.append(c)
                else:
                    in_word = False
                    if not merge:
                        out += space
            off += used
        if append_end:
            out += space
        return bytes(out)

    # -- Viterbi ------------------------------------------------------------------------

    def encode(self, text: str, out: list[int]) -> None:
        data = self.normalize(text)
        n = len(data)
        if n == 0:
            return
        unk = self.unk_id
        tokens, scores, user_scores = self.tokens, self.scores, self.user_scores
        lengths = self.token_lengths
        neg = -float("inf")
        best_score = [neg] * (n + 1)
        best_tok = [unk] * (n + 1)
        best_from = [0] * (n + 1)
        best_score[0] = 0.0
        off = 0
        while off < n:
            units = min(_utf8_len(data[off]), n - off)
            cur = best_score[off]
            single = False
            for ln in lengths:
                end = off + ln
                if end > n:
                    break
                tid = tokens.get(data[off:end])
                if tid is None:
                    continue
                if ln == units:
                    single = True
                s = cur + user_scores.get(tid, scores[tid])
                if s > best_score[end]:
                    best_score[end], best_tok[end], best_from[end] = s, tid, off
            if not single:
                end = off + units
                s = cur + self.unknown_score
                if s > best_score[end]:
                    best_score[end], best_tok[end], best_from[end] = s, unk, off
            off += units
        seq = []
        pos = n
        prev_unknown = False
        while True:
            tid = best_tok[pos]
            is_unknown = tid == unk
            if not (prev_unknown and is_unknown):
                seq.append(tid)
            if best_from[pos] == 0:
                break
            prev_unknown = is_unknown
            pos = best_from[pos]
        out.extend(reversed(seq))
