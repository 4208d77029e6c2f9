"""`cera run`, `cera chat` and `cera bench` on SmolLM2, checked against llama.cpp's stored
greedy outputs (tests/models/reference/data) where there is text to compare."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REF = Path(__file__).parents[1] / "models" / "reference" / "data" / "smollm2-135m-instruct-q4_1.json"


def cera(*args, stdin: str | None = None, timeout: int = 600):
    return subprocess.run(
        [sys.executable, "-m", "cera_cli.main", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def reference():
    if not REF.exists():
        pytest.skip(f"llama.cpp reference data missing: {REF}")
    return {c["id"]: c for c in json.loads(REF.read_text())["cases"]}


def test_run_raw_streams_llama_cpps_greedy_continuation(smollm2_path, reference):
    case = reference["code_py_sort"]  # llama.cpp is confident for 25 steps
    n = case["first_step_margin_below_0_5"]
    # The text llama.cpp produced for the confident steps, as cera detokenizes those ids.
    import cera as cera_lib

    with cera_lib.load(smollm2_path, device="cpu", quiet=True) as m:
        expected_prefix = m.detokenize(case["generated_tokens"][:n])
    r = cera("run", "-m", str(smollm2_path), "--raw", "--temp", "0", "-n", str(n), "-p", case["text"])
    assert r.returncode == 0, r.stderr
    assert r.stdout == expected_prefix + "\n"
    assert "tok/s" in r.stderr and "stop: length" in r.stderr


def test_run_chat_uses_the_template_and_stops_at_end_of_turn(smollm2_path, reference):
    case = reference["chat_capital"]  # ends on <|im_end|>, every step confident
    system, user = case["messages"][0]["content"], case["messages"][1]["content"]
    r = cera("run", "-m", str(smollm2_path), "--chat", "--system", system, "--temp", "0", "-n", "64", "-p", user)
    assert r.returncode == 0, r.stderr
    import cera as cera_lib

    with cera_lib.load(smollm2_path, device="cpu", quiet=True) as m:
        expected = m.detokenize(case["generated_tokens"][:-1])  # without the end-of-turn token
    assert r.stdout == expected + "\n"
    assert "stop: stop" in r.stderr


def test_chat_reads_turns_from_stdin(smollm2_path):
    r = cera("chat", "-m", str(smollm2_path), "--temp", "0", "-n", "12", stdin="Hello!\n/reset\nWhat is 2+2?\n")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("generated at") == 2
    assert "conversation reset" in r.stderr


def test_bench_reports_each_test_with_all_repetitions(smollm2_path):
    r = cera("bench", "-m", str(smollm2_path), "-p", "16", "-n", "4", "-r", "2", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [t["test"] for t in out["results"]] == ["pp16", "tg4"]
    for t in out["results"]:
        assert len(t["samples"]) == 2 and all(s > 0 for s in t["samples"])


def test_bench_parallel_reports_the_aggregate_of_sequences_decoding_together(smollm2_path):
    r = cera("bench", "-m", str(smollm2_path), "-t", "2", "-p", "0", "-n", "4", "-r", "1", "--parallel", "3", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["parallel"] == 3
    assert [t["test"] for t in out["results"]] == ["tg4x3"]
    assert out["results"][0]["median_tok_s"] > 0


def test_generation_flags_come_from_the_options_type():
    """`cera run --help` lists every flagged field of cera.generation.options.GenerateOptions, with
    its help: one definition for the API and the CLI."""
    import attrs

    from cera.generation.options import GenerateOptions

    r = cera("run", "--help")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    for f in attrs.fields(GenerateOptions):
        flag = f.metadata.get("flag")
        if flag:
            assert flag.split("/")[-1] in text, flag
            assert " ".join(f.metadata["help"].split())[:30] in text, f.name


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "-m", "/nonexistent/model.gguf", "-p", "x"], "is not a file"),
        (["run", "-p", "x", "--top-p", "0"], "--top-p"),
        (["run", "-p", "x", "--device", "nosuch"], "no backend named 'nosuch'"),
    ],
)
def test_bad_input_gives_a_clear_error(args, message):
    r = cera(*args)
    assert r.returncode != 0
    assert message in r.stderr


def test_run_refuses_a_file_that_is_not_gguf(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"NOTGGUF" + b"\0" * 64)
    r = cera("run", "-m", str(bad), "-p", "x")
    assert r.returncode == 1
    assert "bad magic" in r.stderr and str(bad) in r.stderr


@pytest.mark.slow
def test_a_long_generation_runs_past_its_context_with_context_shift(smollm2_path):
    r = cera("run", "-m", str(smollm2_path), "-t", "2", "--raw", "-p", "Once upon a time", "-n", "2000", "-c", "512",
             "--temp", "0.8", "--seed", "3", "--ignore-eos", "--context-shift", "--n-keep", "4")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "generated 2000 tokens" in r.stderr and "stop: length" in r.stderr


def test_run_with_a_prompt_cache_directory_hits_on_the_second_run(smollm2_path, tmp_path):
    prompt = "You are a careful assistant. " * 20 + "Say hi."
    args = ("run", "-m", str(smollm2_path), "-t", "2", "--raw", "-p", prompt, "-n", "6", "--temp", "0",
            "--prompt-cache", str(tmp_path / "pc"))  # fmt: skip
    first, second = cera(*args), cera(*args)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert "prompt cache: miss" in first.stderr and "prompt cache: hit" in second.stderr
    assert first.stdout == second.stdout
