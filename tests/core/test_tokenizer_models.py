"""The tokenizers of real models (SmolLM2, Gemma 3 270M, Qwen2.5-Coder) against llama.cpp.

Stored results (data/tokenizer/llama_cpp_reference.json, made by make_llama_reference.py)
are always checked; where llama-cpp-python is installed the same and random texts are
also compared live.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cera.formats.gguf import GGUFFile
from cera.text.tokenizer import Tokenizer

DATA = Path(__file__).parent / "data" / "tokenizer"
REFERENCE = json.loads((DATA / "llama_cpp_reference.json").read_text())
sys.path.insert(0, str(DATA))
from make_llama_reference import LONG_TEXT  # noqa: E402
from reference_check import check_against_record  # noqa: E402

sys.path.pop(0)

MODELS = {"smollm2": "smollm2_path", "gemma3": "gemma3_path", "qwen05": "qwen05_path"}
_cache: dict[str, Tokenizer] = {}


def tokenizer_for(request, key: str) -> Tokenizer:
    if key not in _cache:
        path = request.getfixturevalue(MODELS[key])
        _cache[key] = Tokenizer.from_gguf(GGUFFile(path))
    return _cache[key]


@pytest.mark.parametrize("key", sorted(MODELS))
def test_recorded_llama_cpp_results(request, key):
    tok = tokenizer_for(request, key)
    rec = REFERENCE["models"][key]
    check_against_record(tok, rec, REFERENCE["corpus"])
    assert tok.encode(LONG_TEXT, add_special=True, parse_special=True) == rec["long_text_ids"]


def test_kinds_and_flags(request):
    smol, gemma, qwen = (tokenizer_for(request, k) for k in ("smollm2", "gemma3", "qwen05"))
    assert (smol.kind, smol.pre) == ("gpt2", "smollm")
    assert (gemma.kind, gemma.n_vocab) == ("llama", 262144)
    assert (qwen.kind, qwen.pre) == ("gpt2", "qwen2")
    # llama.cpp picks EOT by text; with two candidates its hash map decides (see hashorder)
    assert smol.eot_id == 0 and smol.token_text(0) == "<|endoftext|>"
    assert qwen.eot_id == 151645 and qwen.token_text(151645) == "<|im_end|>"
    assert gemma.token_text(gemma.eot_id) == "<end_of_turn>"
    assert {qwen.token_text(i) for i in qwen.eog_ids} >= {"<|im_end|>", "<|endoftext|>", "<|file_sep|>"}


def test_parse_special_splits_chat_markup(request):
    tok = tokenizer_for(request, "qwen05")
    text = "<|im_start|>user\nhi<|im_end|>"
    with_special = tok.encode(text, add_special=False, parse_special=True)
    assert with_special[0] == tok.token_id("<|im_start|>") and with_special[-1] == tok.token_id("<|im_end|>")
    raw = tok.encode(text, add_special=False, parse_special=False)
    assert tok.token_id("<|im_start|>") not in raw and len(raw) > len(with_special)
    assert tok.decode(raw) == text


@pytest.mark.parametrize("key", sorted(MODELS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(st.characters(blacklist_categories=("Cs", "Cc"), max_codepoint=0x3FFFF), max_size=60))
def test_round_trip(request, key, text):
    """Byte-level BPE and SentencePiece with byte fallback lose nothing (without special text).

    (SmolLM2's vocabulary lacks a few byte tokens, control characters and the lead bytes of
    planes 4-11, which llama.cpp then drops too: the text avoids them.)"""
    tok = tokenizer_for(request, key)
    ids = tok.encode(text, add_special=False, parse_special=False)
    assert tok.decode(ids, special=True) == text


# -- live, against the installed llama.cpp -------------------------------------------------

ALPHABETS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    " \t\n\r\u00a0\u3000\u2009",
    "'\".,;:!?()[]{}<>-_=+*/\\|@#$%^&~`",
    "äöüßéèêçñøåÆŒ",
    "中文字符测试我想在工作",
    "ひらがなカタカナ",
    "한국어텍스트",
    "абвгдежзийклмнопрстуфхцчшщъыьэюя",
    "αβγδεζηθικλμνξοπρστυφχψω",
    "अआइईउऊएऐओऔकखगघ्ािीुू",
    "🚀😀👍🏽🦙\u200d❤️",
    "\u0301\u0308\u0323",
    "ـءآأؤإئابةتثجحخدذرزسشصضطظعغ",
]
LIVE_SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<start_of_turn>", "<end_of_turn>", "<bos>", "</s>"]

live_text = st.lists(
    st.one_of(
        st.sampled_from(ALPHABETS).flatmap(lambda a: st.text(st.sampled_from(a), min_size=1, max_size=8)),
        st.sampled_from(LIVE_SPECIALS),
    ),
    max_size=12,
).map("".join)


@pytest.fixture(scope="module")
def live_llama():
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    import llama_cpp

    cache = {}

    def get(path):
        if path not in cache:
            cache[path] = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
        return cache[path]

    yield get
    for llm in cache.values():
        llm.close()


@pytest.mark.peer
@pytest.mark.parametrize("key", sorted(MODELS))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=live_text, add_special=st.booleans(), parse_special=st.booleans())
def test_live_random_text(request, live_llama, key, text, add_special, parse_special):
    tok = tokenizer_for(request, key)
    llm = live_llama(request.getfixturevalue(MODELS[key]))
    expected = llm.tokenize(text.encode(), add_bos=add_special, special=parse_special)
    assert tok.encode(text, add_special=add_special, parse_special=parse_special) == expected


@pytest.mark.peer
@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(MODELS))
def test_live_every_piece(request, live_llama, key):
    """llama_token_to_piece of every id of the vocabulary, special and not."""
    import ctypes

    import llama_cpp

    tok = tokenizer_for(request, key)
    llm = live_llama(request.getfixturevalue(MODELS[key]))
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    buf = ctypes.create_string_buffer(512)
    for tid in range(tok.n_vocab):
        for special in (False, True):
            n = llama_cpp.llama_token_to_piece(vocab, tid, buf, 512, 0, special)
            assert tok.token_to_piece(tid, special) == buf.raw[:n], (tid, special)
