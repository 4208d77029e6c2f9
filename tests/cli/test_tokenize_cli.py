"""`cera tokenize` and `cera template`, checked against llama.cpp's recorded ids and
transformers' recorded renderings (tests/core/data/tokenizer/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cera.errors import CeraError, ModelNotFound, TemplateError
from cera_cli.main import cli

DATA = Path(__file__).parents[1] / "core" / "data" / "tokenizer"
TOK_REF = json.loads((DATA / "llama_cpp_reference.json").read_text())
TMPL_REF = json.loads((DATA / "chat_template_reference.json").read_text())
CORPUS = TOK_REF["corpus"]


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=True)


def corpus_case(text_startswith: str) -> int:
    return next(i for i, t in enumerate(CORPUS) if t.startswith(text_startswith))


def test_tokenize_json_matches_llama_cpp(smollm2_path):
    i = corpus_case("I'm sure")
    r = run("tokenize", "-m", str(smollm2_path), "--json", CORPUS[i])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    expected = TOK_REF["models"]["smollm2"]["tokenize"]["10"][i]["ids"]
    assert out["ids"] == expected and out["n_tokens"] == len(expected)
    assert out["tokenizer"] == "gpt2" and out["pre"] == "smollm"
    assert "".join(t["piece"] for t in out["tokens"]) == CORPUS[i]


@pytest.mark.parametrize("flags,key", [((), "10"), (("--no-add-special",), "00"), (("--parse-special",), "11")])
def test_tokenize_flags(gemma3_path, flags, key):
    i = corpus_case("<start_of_turn>")
    r = run("tokenize", "-m", str(gemma3_path), "--ids", *flags, CORPUS[i])
    assert r.exit_code == 0, r.output
    assert [int(x) for x in r.stdout.split()] == TOK_REF["models"]["gemma3"]["tokenize"][key][i]["ids"]


def test_tokenize_stdin_and_file(qwen05_path, tmp_path):
    i = corpus_case("def fib")
    expected = TOK_REF["models"]["qwen05"]["tokenize"]["10"][i]["ids"]
    r = run("tokenize", "-m", str(qwen05_path), "--ids", input=CORPUS[i].encode())
    assert [int(x) for x in r.stdout.split()] == expected
    f = tmp_path / "code.py"
    f.write_bytes(CORPUS[i].encode())
    r = run("tokenize", "-m", str(qwen05_path), "--ids", "--file", str(f))
    assert [int(x) for x in r.stdout.split()] == expected


def test_tokenize_human_output_shows_ids_and_pieces(smollm2_path):
    r = run("tokenize", "-m", str(smollm2_path), "Hello world\n")
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert lines[0].split(" -> ") == ["19556", "'Hello'"]
    assert lines[1].split(" -> ") == ["  905", "' world'"]
    assert lines[2].endswith("'\\n'")


def test_tokenize_errors(tmp_path, smollm2_path):
    r = run("tokenize", "-m", str(tmp_path / "missing.gguf"), "hi")
    assert isinstance(r.exception, ModelNotFound)
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"caf\xe9")
    r = run("tokenize", "-m", str(smollm2_path), "--file", str(bad))
    assert isinstance(r.exception, CeraError) and "UTF-8" in str(r.exception)
    r = run("tokenize", "-m", str(smollm2_path), "--file", str(bad), "text too")
    assert r.exit_code == 2 and "not both" in r.output


# -- cera template ---------------------------------------------------------------------------


def test_template_matches_transformers(qwen05_path, tmp_path):
    spec = TMPL_REF["conversations"]["tools_multi_turn"]
    expected = TMPL_REF["transformers"]["qwen05"]["renders"]["tools_multi_turn/1"]
    msgs = tmp_path / "msgs.json"
    msgs.write_text(json.dumps(spec["messages"]))
    r = run("template", "-m", str(qwen05_path), "--messages", f"@{msgs}", "--tools", json.dumps(spec["tools"]))
    assert r.exit_code == 0, r.output
    assert r.stdout == expected


def test_template_from_stdin_without_generation_prompt(smollm2_path):
    spec = TMPL_REF["conversations"]["system_multi_turn"]
    expected = TMPL_REF["transformers"]["smollm2"]["renders"]["system_multi_turn/0"]
    r = run("template", "-m", str(smollm2_path), "--messages", "-", "--no-generation-prompt",
            input=json.dumps(spec["messages"]))
    assert r.exit_code == 0, r.output
    assert r.stdout == expected


def test_template_fallback_is_announced(gemma3_path):
    r = run("template", "-m", str(gemma3_path), "--messages", '[{"role": "user", "content": "Hello!"}]')
    assert r.exit_code == 0
    assert r.stdout == TMPL_REF["llama_cpp_chatml"]["simple/1"]
    assert "no chat template" in r.stderr


def test_template_show_source(smollm2_path):
    r = run("template", "-m", str(smollm2_path), "--messages", "[]", "--show-source")
    assert "<|im_start|>" in r.stdout


@pytest.mark.parametrize(
    "messages, match",
    [
        ('[{"role": "user"', "not valid JSON"),
        ('"hello"', "list"),
        ("@/no/such/file.json", "cannot read"),
    ],
)
def test_template_errors(smollm2_path, messages, match):
    r = run("template", "-m", str(smollm2_path), "--messages", messages)
    assert isinstance(r.exception, CeraError), r.output
    assert match in str(r.exception)


def test_template_unknown_name(smollm2_path):
    r = run("template", "-m", str(smollm2_path), "--messages", "[]", "--name", "rag")
    assert isinstance(r.exception, TemplateError) and "no chat template named 'rag'" in str(r.exception)
