"""The grammar engine's view of a cera vocabulary: every token's bytes, which tokens are
special, and which end a generation.

llguidance matches token *bytes* against a grammar, so the view is built from cera's own
GGUF vocabulary (`Tokenizer.token_to_piece` with special=True, the bytes llama.cpp's
grammar sampler matches too); that makes it work for every vocabulary type cera reads
(SPM, BPE, WPM, UGM, RWKV) without a Hugging Face tokenizer. Control tokens, unknown
tokens, unused (empty) tokens and user-defined tokens written like ``<...>`` are special:
they carry a 0xFF prefix, a byte that never occurs in UTF-8 text, so no text grammar can
match them; a grammar reaches them only by id (``<[id]>``) or by name (``<|im_end|>``).
"""

from __future__ import annotations

import threading
import weakref

from ..text.tokenizer.vocab import ATTR_CONTROL, ATTR_UNKNOWN, ATTR_UNUSED, ATTR_USER_DEFINED

_SPECIAL_PREFIX = b"\xff"
_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def token_bytes(tokenizer) -> list[bytes]:
    """Each token's bytes as the engine sees them (special tokens prefixed with 0xFF)."""
    v = tokenizer.vocab
    out = []
    for tid in range(v.n_tokens):
        attr = v.attrs[tid]
        piece = tokenizer.token_to_piece(tid, special=True)
        text = v.tokens[tid]
        if (
            attr & (ATTR_CONTROL | ATTR_UNKNOWN | ATTR_UNUSED)
            or not piece
            or (attr & ATTR_USER_DEFINED and text.startswith("<") and text.endswith(">"))
        ):
            piece = _SPECIAL_PREFIX + text.encode("utf-8", "surrogateescape")
        out.append(piece)
    return out


def token_bytes_cached(tokenizer) -> list[bytes]:
    """`token_bytes`, computed once per tokenizer."""
    with _lock:
        per = _cache.setdefault(tokenizer, {})
        if "bytes" not in per:
            per["bytes"] = token_bytes(tokenizer)
        return per["bytes"]


class _Wrapper:
    """What llguidance's TokenizerWrapper reads: tokens, end ids, and an encoder (used
    only to re-tokenize text a lazy grammar must take over)."""

    def __init__(self, tokenizer, n_vocab: int):
        self._tok = tokenizer
        self.tokens = list(token_bytes_cached(tokenizer))
        self.tokens += [_SPECIAL_PREFIX + b"<pad%d>" % i for i in range(n_vocab - len(self.tokens))]
        eog = sorted(tokenizer.eog_ids) or [tokenizer.eos_id if tokenizer.eos_id is not None else 0]
        self.eos_token_id = eog[0]
        self.eog_ids = eog
        self.bos_token_id = tokenizer.bos_id
        self.special_token_ids = [i for i, t in enumerate(self.tokens) if t[:1] == _SPECIAL_PREFIX]

    def __call__(self, text):
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        return self._tok.encode(text, add_special=False, parse_special=False)


def ll_tokenizer(tokenizer, n_vocab: int | None = None):
    """The llguidance tokenizer for a cera `Tokenizer`, built once per tokenizer (a 262k
    vocabulary takes a fraction of a second) and shared by every grammar on it.
    ``n_vocab``: the model's logit count when it exceeds the vocabulary (padded rows
    are special tokens no grammar allows)."""
    import llguidance

    n = max(n_vocab or 0, tokenizer.vocab.n_tokens)
    with _lock:
        per = _cache.setdefault(tokenizer, {})
        found = per.get(n)
    if found is None:
        w = _Wrapper(tokenizer, n)
        found = llguidance.LLTokenizer(llguidance.TokenizerWrapper(w), n_vocab=n, eos_token=w.eog_ids)
        with _lock:
            found = per.setdefault(n, found)
    return found
