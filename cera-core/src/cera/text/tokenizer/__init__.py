"""Tokenizers built from a GGUF file's metadata, at parity with llama.cpp.

    from cera.text.tokenizer import Tokenizer
    tok = Tokenizer.from_gguf(gguf_file)
    ids = tok.encode("Hello world")             # llama_tokenize(text, add_special=True, parse_special=False)
    text = tok.decode(ids)                      # llama_detokenize
    det = tok.detokenizer(); det.feed(ids[0])   # streaming, never splits a UTF-8 character

Supported `tokenizer.ggml.model` values: llama (SentencePiece BPE), gpt2 and gemma4
(byte-level / SentencePiece-style BPE, with the pre-tokenizer `tokenizer.ggml.pre` names),
bert (WordPiece), t5 (Unigram) and rwkv.
"""

from ...errors import TokenizerError
from .tokenizer import IncrementalDetokenizer, Tokenizer
from .vocab import Vocab, load_vocab

__all__ = ["IncrementalDetokenizer", "Tokenizer", "TokenizerError", "Vocab", "load_vocab"]
