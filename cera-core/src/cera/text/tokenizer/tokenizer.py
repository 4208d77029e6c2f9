"""`Tokenizer`: text <-> token ids for a GGUF file, as llama.cpp does it.

`encode` is llama_tokenize, `token_to_piece` is llama_token_to_piece and `decode` is
llama_detokenize, on the same file with the same flags; the tests hold cera to
llama.cpp's own test vectors and to llama.cpp's output on real models.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable
from functools import cached_property

from ...errors import TokenizerError
from . import unicode as uc
from .vocab import (
    ATTR_BYTE,
    ATTR_CONTROL,
    ATTR_NORMAL,
    ATTR_UNKNOWN,
    ATTR_USER_DEFINED,
    BPE,
    RWKV,
    SPM,
    UGM,
    WPM,
    Vocab,
    load_vocab,
)


class Tokenizer:
    """The tokenizer of one GGUF file, built from its metadata alone."""

    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self._pieces: list[bytes | None] = [None] * vocab.n_tokens
        from .special import SpecialSplitter

        self._splitter = SpecialSplitter(vocab)
        self._encoder = self._make_encoder()

    # -- construction --------------------------------------------------------------------

    @classmethod
    def from_gguf(cls, gguf_file) -> Tokenizer:
        """Build from a `cera.formats.gguf.GGUFFile` (or anything with a `.metadata` dict)."""
        where = str(getattr(gguf_file, "path", "the model file"))
        return cls(load_vocab(gguf_file.metadata, where))

    @classmethod
    def from_metadata(cls, metadata: dict, where: str = "the model file") -> Tokenizer:
        return cls(load_vocab(metadata, where))

    def _make_encoder(self):
        v = self.vocab
        if v.kind == SPM:
            from .spm import SPMEncoder

            return SPMEncoder(v.token_to_id, v.scores)
        if v.kind == BPE:
            from .bpe import BPEEncoder
            from .pretokenize import pretokenizer

            self._pre = pretokenizer(v.pre_family)
            self._word_cache: dict[str, tuple[int, ...]] = {}
            self._byte_encode = v.pre_family not in ("gemma4", "sarvam")
            return BPEEncoder(
                v.token_to_id,
                v.merges,
                ignore_merges=v.ignore_merges,
                byte_tokens_hex=not self._byte_encode,
                whole_newline_words=v.pre_family == "gemma4",
            )
        if v.kind == WPM:
            from .wpm import WPMEncoder

            return WPMEncoder(v.token_to_id, v.special["unk"], lowercase=v.lowercase,
                              strip_accents=v.strip_accents)
        if v.kind == UGM:
            from .ugm import UGMEncoder

            return UGMEncoder(v)
        return _RWKVEncoder(v)

    # -- properties ----------------------------------------------------------------------

    @property
    def kind(self) -> str:
        """tokenizer.ggml.model: "llama" (SentencePiece BPE), "gpt2" (byte-level BPE), "bert", ..."""
        return self.vocab.model

    @property
    def pre(self) -> str:
        return self.vocab.pre

    @property
    def n_vocab(self) -> int:
        return self.vocab.n_tokens

    def _special(self, slot: str) -> int | None:
        return self.vocab.special[slot]

    bos_id = property(lambda self: self._special("bos"))
    eos_id = property(lambda self: self._special("eos"))
    eot_id = property(lambda self: self._special("eot"))
    eom_id = property(lambda self: self._special("eom"))
    pad_id = property(lambda self: self._special("pad"))
    unk_id = property(lambda self: self._special("unk"))
    sep_id = property(lambda self: self._special("sep"))
    mask_id = property(lambda self: self._special("mask"))
    fim_pre_id = property(lambda self: self._special("fim_pre"))
    fim_suf_id = property(lambda self: self._special("fim_suf"))
    fim_mid_id = property(lambda self: self._special("fim_mid"))
    fim_pad_id = property(lambda self: self._special("fim_pad"))
    fim_rep_id = property(lambda self: self._special("fim_rep"))
    fim_sep_id = property(lambda self: self._special("fim_sep"))

    @property
    def add_bos(self) -> bool:
        return self.vocab.add_bos

    @property
    def add_eos(self) -> bool:
        return self.vocab.add_eos

    @property
    def add_sep(self) -> bool:
        return self.vocab.add_sep

    @property
    def eog_ids(self) -> frozenset[int]:
        """Every id that ends generation, as llama.cpp's vocabulary computes them."""
        return self.vocab.eog_ids

    def is_eog(self, token_id: int) -> bool:
        return token_id in self.vocab.eog_ids

    def is_control(self, token_id: int) -> bool:
        return bool(self.vocab.attrs[self._check(token_id)] & ATTR_CONTROL)

    def token_attr(self, token_id: int) -> int:
        """llama.cpp's attribute bits of a token (see vocab.ATTR_*)."""
        return self.vocab.attrs[self._check(token_id)]

    def token_text(self, token_id: int) -> str:
        """The token's text as stored in the vocabulary (e.g. "▁Hello", "Ġworld", "<0x0A>")."""
        return self.vocab.tokens[self._check(token_id)]

    def token_id(self, text: str) -> int | None:
        """The id whose vocabulary text is exactly `text`, or None."""
        return self.vocab.token_to_id.get(text)

    @cached_property
    def nl_id(self) -> int | None:
        """llama.cpp's newline token (it falls back to the kind's default padding id)."""
        v = self.vocab
        if v.kind == SPM:
            try:
                return self._encoder.byte_token(10)
            except TokenizerError:
                return v.default_pad
        if v.kind == WPM:
            return v.default_pad
        ids = self.encode("\n", add_special=False)
        return ids[0] if ids else v.default_pad

    def _check(self, token_id: int) -> int:
        if not isinstance(token_id, int) or not 0 <= token_id < self.vocab.n_tokens:
            raise TokenizerError(f"token id {token_id!r} is out of range (the vocabulary has {self.vocab.n_tokens})")
        return token_id

    # -- encoding ------------------------------------------------------------------------

    def encode(self, text: str | bytes, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of `text`, as llama_tokenize(text, add_special, parse_special).

        `add_special` adds BOS/EOS (or CLS/SEP) where the file asks for them;
        `parse_special` turns special-token text such as "<|im_end|>" into that token
        (on for chat prompts built by a template, off for raw user text).
        """
        if isinstance(text, (bytes, bytearray, memoryview)):
            text = uc.decode_utf8_lenient(bytes(text))
        elif not isinstance(text, str):
            raise TokenizerError(f"can only tokenize str or bytes, not {type(text).__name__}")
        v = self.vocab
        frags = self._splitter.split(text, parse_special)
        out: list[int] = []
        kind = v.kind
        if kind == SPM:
            if add_special and v.add_bos:
                out.append(self._need("bos"))
            prev_special = True
            for frag in frags:
                if type(frag) is int:
                    out.append(frag)
                    prev_special = True
                    continue
                if v.add_space_prefix and prev_special:
                    frag = " " + frag
                self._encoder.encode(frag.replace(" ", "\u2581"), out)
                prev_special = False
            if add_special and v.add_eos:
                out.append(self._need("eos"))
        elif kind == BPE:
            if add_special and v.add_bos:
                out.append(self._need("bos"))
            encode_word = self._encoder.encode_word
            split = self._pre.split
            for frag in frags:
                if type(frag) is int:
                    out.append(frag)
                    continue
                if v.escape_whitespaces:
                    frag = frag.replace(" ", "\u2581")
                words = split(frag)
                if self._byte_encode:
                    cache = self._word_cache  # raw word -> ids (the encoder caches encoded words)
                    for w in words:
                        ids = cache.get(w)
                        if ids is None:
                            ids = encode_word(uc.byte_encode(w))
                            if len(cache) > 200_000:
                                cache.clear()
                            cache[w] = ids
                        out.extend(ids)
                else:
                    for w in words:
                        out.extend(encode_word(w))
            if add_special and v.add_eos:
                out.append(self._need("eos"))
        elif kind == WPM:
            if add_special:
                out.append(self._need("bos"))
            for frag in frags:
                if type(frag) is int:
                    out.append(frag)
                else:
                    self._encoder.encode(frag, out)
            if add_special:
                out.append(self._need("sep"))
        elif kind == UGM:
            if add_special and v.add_bos:
                out.append(self._need("bos"))
            for frag in frags:
                if type(frag) is int:
                    out.append(frag)
                else:
                    self._encoder.encode(frag, out)
            if add_special and v.add_eos:
                out.append(self._need("eos"))
        else:
            for frag in frags:
                if type(frag) is int:
                    out.append(frag)
                else:
                    self._encoder.encode(frag, out)
        return out

    def _need(self, slot: str) -> int:
        tid = self.vocab.special[slot]
        if tid is None:
            raise TokenizerError(
                f"the vocabulary asks for a {slot.upper()} token but has none; pass add_special=False"
            )
        return tid

    # -- decoding ------------------------------------------------------------------------

    def _piece(self, token_id: int) -> bytes:
        """llama.cpp's piece with special=True (what it caches at load)."""
        p = self._pieces[token_id]
        if p is not None:
            return p
        v = self.vocab
        text = v.tokens[token_id]
        attr = v.attrs[token_id]
        raw = text.encode("utf-8", "surrogateescape")
        if v.kind == RWKV:
            p = _unescape_rwkv(text)
        elif attr & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED):
            p = raw
        elif attr & ATTR_NORMAL:
            if v.kind != BPE or v.escape_whitespaces:
                p = raw.replace("\u2581".encode(), b" ")
            else:
                p = _gpt2_decode(text)
        elif attr & ATTR_BYTE:
            p = bytes([_hex_byte(text)])
        else:
            p = b""
        self._pieces[token_id] = p
        return p

    def token_to_piece(self, token_id: int, special: bool = False) -> bytes:
        """The bytes a token stands for, as llama_token_to_piece(id, lstrip=0, special):
        control and unknown tokens are empty unless `special`."""
        self._check(token_id)
        if not special and self.vocab.attrs[token_id] & (ATTR_UNKNOWN | ATTR_CONTROL):
            return b""
        return self._piece(token_id)

    def decode_bytes(self, ids: Iterable[int], special: bool = False, remove_special: bool = False) -> bytes:
        """llama_detokenize(ids, remove_special, unparse_special=special), as bytes."""
        v = self.vocab
        ids = list(ids)
        remove_space = v.add_space_prefix
        if remove_special and v.add_bos and ids and ids[0] == v.special["bos"]:
            remove_space = False
            ids = ids[1:]
        if remove_special and v.add_eos and ids and ids[-1] == v.special["eos"]:
            ids = ids[:-1]
        parts = []
        for tid in ids:
            piece = self.token_to_piece(tid, special)
            if remove_space and piece[:1] == b" ":
                piece = piece[1:]
            remove_space = False
            parts.append(piece)
        text = b"".join(parts)
        if v.clean_spaces:
            text = _clean_spaces(text)
        return text

    def decode(self, ids: Iterable[int], special: bool = False, remove_special: bool = False) -> str:
        """Text of token ids, as llama_detokenize (bytes that are not UTF-8 become U+FFFD)."""
        return self.decode_bytes(ids, special, remove_special).decode("utf-8", "replace")

    def detokenizer(self, special: bool = False) -> IncrementalDetokenizer:
        """A streaming decoder: feed ids one at a time, get text that never splits a character."""
        return IncrementalDetokenizer(self, special)

    def __repr__(self) -> str:
        return f"<Tokenizer {self.vocab.model}/{self.vocab.pre or '-'} n_vocab={self.n_vocab}>"


class IncrementalDetokenizer:
    """Turns a stream of token ids into text chunks.

    Each chunk is the concatenation of the tokens' pieces (llama_token_to_piece, as
    llama.cpp's server streams them), cut so that no UTF-8 character is split between
    two chunks; bytes that can never form a character come out as U+FFFD.
    """

    def __init__(self, tokenizer: Tokenizer, special: bool = False):
        self.tokenizer = tokenizer
        self.special = special
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, token_id: int) -> str:
        return self._decoder.decode(self.tokenizer.token_to_piece(token_id, self.special))

    def feed_many(self, ids: Iterable[int]) -> str:
        return "".join(self.feed(i) for i in ids)

    def flush(self) -> str:
        """Whatever is pending (an incomplete character comes out as U+FFFD); then reset."""
        return self._decoder.decode(b"", final=True)


# -- helpers ----------------------------------------------------------------------------


def _hex_byte(text: str) -> int:
    # llama.cpp: strtol(text.substr(3, 2), 16), i.e. the leading hex digits, 0 if none
    digits = ""
    for ch in text[3:5]:
        if ch in "0123456789abcdefABCDEF":
            digits += ch
        else:
            break
    return int(digits, 16) if digits else 0


def _gpt2_decode(text: str) -> bytes:
    """A byte-level BPE token's text back to its bytes (llama_decode_text)."""
    table = uc.unicode_to_byte()
    out = bytearray()
    raw = text.encode("utf-8", "surrogateescape")
    for ch in uc.decode_utf8_lenient(raw):
        b = table.get(ch)
        if b is not None:
            out.append(b)
        else:
            out += b"[UNK_BYTE_0x" + ch.encode("utf-8", "surrogatepass").hex().encode() + raw + b"]"
    return bytes(out)


def _clean_spaces(text: bytes) -> bytes:
    """llama_detokenize's clean-up of tokenization spaces (clean_up_tokenization_spaces)."""
    # 1: " ?", " !", " .", " ," lose their space
    for p in (b" ?", b" !", b" .", b" ,"):
        if p in text:
            text = text.replace(p, p[1:])
    if b"'" not in text:
        return text
    buf = bytearray(text)
    # 2: a single apostrophe between spaces loses both spaces
    n = len(buf)
    total = 1 if n else 0
    i = 1
    while i < n:
        x = buf[i]
        if x == 0x27 and i + 1 < n and buf[i - 1] == 0x20 and buf[i + 1] == 0x20:
            total -= 1
            i += 1
            buf[i] = 0
        buf[total] = x
        total += 1
        i += 1
    del buf[total:]
    # 3: " 's", " 'm", " 're", " 've" lose their space
    n = len(buf)
    total = 1 if n else 0
    for i in range(1, n):
        x = buf[i]
        if buf[i - 1] == 0x20 and x == 0x27 and i + 1 < n:
            x1 = buf[i + 1]
            if x1 in b"sm":
                total -= 1
            elif x1 not in b"td" and i + 2 < n:
                x2 = buf[i + 2]
                if (x1 == 0x72 and x2 == 0x65) or (x1 == 0x76 and x2 == 0x65):
                    total -= 1
        buf[total] = x
        total += 1
    del buf[total:]
    return bytes(buf)


def _unescape_rwkv(text: str) -> bytes:
    """RWKV vocabularies store tokens with C-style escapes (\\t, \\n, \\r, \\xNN)."""
    out = bytearray()
    escaping = False
    hex_left = acc = 0
    for c in text.encode("utf-8", "surrogateescape"):
        if hex_left:
            acc = ((acc << 4) + ((c - 0x61 + 10) if c >= 0x61 else (c - 0x30))) & 0xFF
            hex_left -= 1
            if not hex_left:
                out.append(acc)
                acc = 0
        elif escaping:
            escaping = False
            if c == 0x78:  # x
                hex_left = 2
            else:
                out.append({0x74: 9, 0x6E: 10, 0x72: 13}.get(c, c))
        elif c == 0x5C:  # backslash
            escaping = True
        else:
            out.append(c)
    return bytes(out)


class _RWKVEncoder:
    """RWKV "world" tokenizer: greedy longest match over the unescaped token bytes.

    A byte trie, as llama.cpp's: each position costs at most the longest token's length.
    A token that unescapes to nothing can never be matched (it would match forever without
    moving on), nor can one longer than `MAX_MATCH_BYTES` (no real vocabulary has one)."""

    MAX_MATCH_BYTES = 1024

    def __init__(self, vocab: Vocab):
        self.unk = vocab.special["unk"]
        self.trie: dict = {}
        for i, t in enumerate(vocab.tokens):
            b = _unescape_rwkv(t)
            if not b or len(b) > self.MAX_MATCH_BYTES:
                continue
            node = self.trie
            for c in b:
                node = node.setdefault(c, {})
            node[-1] = i  # the last token with these bytes wins, as in llama.cpp's trie

    def encode(self, text: str, out: list[int]) -> None:
        data = text.encode("utf-8", "surrogatepass")
        pos, n = 0, len(data)
        trie = self.trie
        while pos < n:
            node = trie
            best = best_len = 0
            k = pos
            while k < n:
                node = node.get(data[k])
                if node is None:
                    break
                k += 1
                tid = node.get(-1)
                if tid is not None:
                    best, best_len = tid, k - pos
            if best_len:
                out.append(best)
                pos += best_len
            else:
                if self.unk is not None:
                    out.append(self.unk)
                pos += 1
