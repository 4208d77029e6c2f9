"""`cera perplexity`: llama.cpp's stored perplexity of the reference text (SmolLM2, chunks of
128), its JSON, the progress bar on stderr, and llama.cpp's -ctk/-ctv spellings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PPL = Path(__file__).parents[1] / "models" / "reference" / "perplexity"


def cera(*args, timeout: int = 600):
    return subprocess.run([sys.executable, "-m", "cera_cli.main", *args], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def _want(kv_type: str) -> dict:
    record = json.loads((PPL / "smollm2-135m-instruct-q4_1.json").read_text())
    return next(r for r in record["runs"] if r["n_ctx"] == 128 and r["type_k"] == kv_type)


def test_perplexity_json_is_llama_cpps_figure(smollm2_path):
    r = cera("perplexity", "-m", str(smollm2_path), "-f", str(PPL / "text.txt"), "-c", "128", "-ctk", "q8_0",
             "-ctv", "q8_0", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    want = _want("q8_0")
    assert got["ppl"] == pytest.approx(want["ppl"], rel=6e-3)
    assert (got["chunks"], got["tokens"], got["kv_type"]) == (want["chunks"], want["tokens"], "q8_0")
    assert {"ppl", "chunks", "tokens", "kv_bytes", "seconds"} <= set(got)
    assert "perplexity" in r.stderr  # the progress bar


def test_perplexity_text_output(smollm2_path):
    r = cera("perplexity", "-m", str(smollm2_path), "-f", str(PPL / "text.txt"), "-c", "128", "--chunks", "2", "-q")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("[1]") and lines[0].count("[") == 2
    assert lines[1].startswith("Final estimate: PPL = ") and "f16 cache" in lines[1]
    assert r.stderr == ""


@pytest.mark.parametrize(
    "flags,why",
    [
        (["-ctk", "q8_0"], "keys q8_0 and values f16"),
        (["--kv-type", "q4_0", "-ctv", "q8_0"], "keys q4_0 and values q8_0"),
    ],
)
def test_key_and_value_types_must_agree(flags, why):
    r = cera("perplexity", "-f", str(PPL / "text.txt"), *flags)
    assert r.returncode == 2 and why in r.stderr and "one cache type" in r.stderr


def test_a_short_text_is_refused_with_what_it_needs(smollm2_path, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("Only a few words here.")
    r = cera("perplexity", "-m", str(smollm2_path), "-f", str(short), "-c", "128")
    assert r.returncode != 0 and "needs at least 256" in r.stderr and "Traceback" not in r.stderr


def test_the_cli_names_every_cache_type():
    from cera_cli.options import KV_TYPE_CHOICES

    from cera.kv_types import KV_TYPE_NAMES

    assert KV_TYPE_CHOICES == KV_TYPE_NAMES
