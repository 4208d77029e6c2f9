"""Comparing a cera Tokenizer with what make_llama_reference.py recorded for a file."""

from __future__ import annotations

from cera.text.tokenizer import Tokenizer


def check_against_record(tok: Tokenizer, rec: dict, corpus: list[str]) -> None:
    """Everything make_llama_reference.py recorded for one file."""
    assert tok.n_vocab == rec["n_vocab"]
    for slot, expected in rec["special"].items():
        got = tok.nl_id if slot == "nl" else getattr(tok, f"{slot}_id")
        assert got == expected, f"{slot}_id: {got} != llama.cpp's {expected}"
    assert (tok.add_bos, tok.add_eos) == (rec["add_bos"], rec["add_eos"])
    assert sorted(tok.eog_ids) == rec["eog"]
    assert [i for i in range(tok.n_vocab) if tok.is_control(i)] == rec["control"]
    for tid, (plain, special) in rec["pieces"].items():
        tid = int(tid)
        assert tok.token_to_piece(tid, special=False).hex() == plain, f"piece of {tid}"
        assert tok.token_to_piece(tid, special=True).hex() == special, f"special piece of {tid}"
    for key, rows in rec["tokenize"].items():
        add_special, parse_special = bool(int(key[0])), bool(int(key[1]))
        for text, row in zip(corpus, rows, strict=True):
            got = tok.encode(text, add_special=add_special, parse_special=parse_special)
            assert got == row["ids"], f"add_special={add_special} parse_special={parse_special} text={text!r}"
            assert tok.decode_bytes(row["ids"]).hex() == row["detok"], f"detokenize {text!r}"
            assert tok.decode_bytes(row["ids"], special=True).hex() == row["detok_special"], f"detokenize {text!r}"
