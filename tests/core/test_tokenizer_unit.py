"""Pieces of the tokenizer checked against independent references: Python's own Unicode
database, GNU libstdc++ (for llama.cpp's hash-map order), llama.cpp (live), and properties
any correct implementation has (streaming never splits a character)."""

from __future__ import annotations

import ctypes
import ctypes.util
import random
import shutil
import subprocess
import sys
import unicodedata

import numpy as np
import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cera.errors import TokenizerError
from cera.formats.gguf import GGUFFile
from cera.text.tokenizer import Tokenizer, hashorder
from cera.text.tokenizer import unicode as uc

MAJOR = {"N": uc.NUMBER, "L": uc.LETTER, "Z": uc.SEPARATOR, "M": uc.MARK, "P": uc.PUNCTUATION, "S": uc.SYMBOL,
         "C": uc.CONTROL}


# -- Unicode tables ---------------------------------------------------------------------------


def test_categories_agree_with_pythons_unicodedata():
    """Every code point Python's Unicode assigns has our class (our tables are Unicode 15.1;
    on a Python with an older Unicode every assigned code point must agree, and on a newer
    one those assigned since 15.1 are the only allowed difference)."""
    table = uc.category_table()
    py_version = tuple(map(int, unicodedata.unidata_version.split(".")))
    newer = []
    for cp in range(0x110000):
        cat = unicodedata.category(chr(cp))
        if cat == "Cn":
            continue
        ours = int(table[cp])
        if ours == uc.UNDEFINED:
            newer.append(cp)
            continue
        assert ours == MAJOR[cat[0]], (hex(cp), cat, ours)
    if py_version <= (15, 1, 0):
        assert newer == []


def test_white_space_and_lowercase_agree_with_python():
    python_space = {cp for cp in range(0x110000) if chr(cp).isspace()} - {0x1C, 0x1D, 0x1E, 0x1F}
    assert uc.WHITE_SPACE == python_space  # str.isspace also counts the ASCII separators
    for cp in random.Random(0).sample(range(0x30000), 20000) + list(range(0x250)):
        if 0xD800 <= cp < 0xE000:
            continue
        low = chr(cp).lower()
        if len(low) == 1 and unicodedata.category(chr(cp)) != "Cn":
            assert uc.to_lower(cp) == ord(low), hex(cp)
    assert uc.to_lower(0x130) == ord("i")  # simple mapping (str.lower gives "i̇")


def test_nfd_first_code_point():
    for ch in "éÅǅḉ가ﬁ":
        assert uc.nfd_first(ord(ch)) == ord(unicodedata.normalize("NFD", ch)[0])
    assert uc.nfd_first(ord("a")) == ord("a")


def test_property_fixups_make_regex_agree_with_our_tables():
    table = uc.category_table()
    fix = uc.property_fixups()
    sample = list(fix) + random.Random(1).sample(range(0x110000), 30000)
    for cp in sample:
        ch = chr(cp).translate(fix)
        for flag, prop in ((uc.LETTER, "L"), (uc.NUMBER, "N"), (uc.MARK, "M")):
            assert bool(regex.match(rf"\p{{{prop}}}", ch)) == (int(table[cp]) == flag), (hex(cp), prop)


def test_gpt2_byte_map_is_a_bijection():
    chars = uc.byte_to_unicode()
    assert len(set(chars)) == 256
    assert uc.byte_encode(" é\n") == "ĠÃ©Ċ"


def test_lenient_utf8_like_llama_cpp():
    assert uc.decode_utf8_lenient("héllo".encode()) == "héllo"
    assert uc.decode_utf8_lenient(b"a\xffb") == "a\ufffdb"
    assert uc.decode_utf8_lenient(b"\xe4\xb8") == "\ufffd\ufffd"
    assert uc.decode_utf8_lenient(b"\xc0\x80") == "\x00"  # overlong forms are not rejected


# -- llama.cpp's hash-map order (GNU libstdc++) --------------------------------------------------


def _libstdcxx():
    name = ctypes.util.find_library("stdc++")
    if sys.platform != "linux" or not name:
        pytest.skip("GNU libstdc++ is not available here")
    lib = ctypes.CDLL(name)
    fn = lib._ZSt11_Hash_bytesPKvmm
    fn.restype = ctypes.c_size_t
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t]
    return fn


def test_hash_bytes_equals_libstdcxx():
    hash_bytes = _libstdcxx()
    rng = random.Random(2)
    texts = [bytes(rng.randrange(256) for _ in range(rng.randrange(50))) for _ in range(3000)]
    texts += [b"", b"<|im_end|>", "▁hello".encode()]
    ours = hashorder.hash_bytes(texts)
    assert [int(h) for h in ours] == [hash_bytes(t, len(t), 0xC70F6907) for t in texts]


CXX_ORDER = r"""
#include <iostream>
#include <string>
#include <unordered_map>
int main() {
    std::unordered_map<std::string, int> m;
    std::string line; int i = 0;
    while (std::getline(std::cin, line)) m[line] = i++;
    for (auto & kv : m) std::cout << kv.second << "\n";
}
"""


def test_map_order_equals_a_compiled_unordered_map(tmp_path):
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("g++ is not installed")
    _libstdcxx()
    src = tmp_path / "order.cpp"
    src.write_text(CXX_ORDER)
    exe = tmp_path / "order"
    subprocess.run([cxx, "-O1", "-o", str(exe), str(src)], check=True, capture_output=True)
    rng = random.Random(3)
    keys = sorted({"".join(rng.choice("abcdefgh<|>_") for _ in range(rng.randrange(1, 12))) for _ in range(30000)})
    rng.shuffle(keys)
    out = subprocess.run([str(exe)], input="\n".join(keys) + "\n", capture_output=True, text=True, check=True)
    expected = [int(x) for x in out.stdout.split()]
    assert hashorder.map_order([k.encode() for k in keys]).tolist() == expected


# -- streaming ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gemma(gemma3_path):
    return Tokenizer.from_gguf(GGUFFile(gemma3_path))


@pytest.fixture(scope="module")
def smol(smollm2_path):
    return Tokenizer.from_gguf(GGUFFile(smollm2_path))


def test_detokenizer_holds_partial_characters(gemma, smol):
    for tok in (gemma, smol):
        ids = tok.encode("a🦙b", add_special=False)
        det = tok.detokenizer()
        chunks = [det.feed(i) for i in ids]
        assert "".join(chunks) + det.flush() == "a🦙b"
        assert "🦙" in chunks  # the emoji comes out whole, in one chunk
        assert all("\ufffd" not in c for c in chunks)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_detokenizer_equals_decoding_the_concatenated_pieces(gemma, smol, data):
    tok = data.draw(st.sampled_from([gemma, smol]))
    ids = data.draw(st.lists(st.integers(0, tok.n_vocab - 1), max_size=30))
    special = data.draw(st.booleans())
    det = tok.detokenizer(special=special)
    chunks = [det.feed(i) for i in ids] + [det.flush()]
    pieces = b"".join(tok.token_to_piece(i, special=special) for i in ids)
    # equal to decoding all bytes at once: no chunk cut a character that later bytes completed
    assert "".join(chunks) == pieces.decode("utf-8", "replace")


def test_decode_remove_special_and_errors(gemma):
    ids = gemma.encode("Hello world")
    assert ids[0] == gemma.bos_id and gemma.add_bos
    assert gemma.decode(ids) == "Hello world"
    assert gemma.decode(ids, special=True) == "<bos>Hello world"
    assert gemma.decode(ids, special=True, remove_special=True) == "Hello world"
    with pytest.raises(TokenizerError, match="out of range"):
        gemma.token_to_piece(gemma.n_vocab)
    with pytest.raises(TokenizerError, match="str or bytes"):
        gemma.encode(123)


@pytest.fixture(scope="module")
def qwen_live(qwen05_path):
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    llm = llama_cpp.Llama(str(qwen05_path), vocab_only=True, verbose=False)
    yield Tokenizer.from_gguf(GGUFFile(qwen05_path)), llm, llama_cpp
    llm.close()


@pytest.mark.peer
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=40), remove_special=st.booleans())
def test_live_bytes_input_and_detokenize(qwen_live, data, remove_special):
    """Invalid UTF-8 bytes tokenized as llama.cpp does; llama_detokenize with remove_special."""
    tok, llm, llama_cpp = qwen_live
    ids = llm.tokenize(data, add_bos=True, special=False)
    assert tok.encode(data) == ids
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
    buf = ctypes.create_string_buffer(4096)
    n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, 4096, remove_special, True)
    assert tok.decode_bytes(ids, special=True, remove_special=remove_special) == buf.raw[:n]


def test_special_token_attributes(gemma, smol):
    assert smol.is_control(smol.token_id("<|im_end|>")) and not smol.is_control(smol.token_id("Hello"))
    assert gemma.token_text(gemma.bos_id) == "<bos>"
    assert gemma.eos_id in gemma.eog_ids and gemma.eot_id in gemma.eog_ids
    assert isinstance(gemma.eog_ids, frozenset)
    # BOS is added once, at the front, and only with add_special
    assert gemma.encode("x", add_special=False)[0] != gemma.bos_id
    assert np.all(np.array(gemma.encode("x y z")) < gemma.n_vocab)
