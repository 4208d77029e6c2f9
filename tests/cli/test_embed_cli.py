"""`cera embed` on the real nomic-embed-text v1.5 file: its vectors are the API's, which
tests/models/test_embeddings.py checks against llama.cpp's."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import cera
from cera_cli.main import cli


@pytest.fixture(scope="module")
def nomic_path():
    from cera.sources import bundles

    return str(bundles.fetch_file("nomic-embed-text-v1.5-f16", quiet=True))


@pytest.fixture(scope="module")
def want(nomic_path):
    with cera.load(nomic_path, device="cpu", threads=2, quiet=True) as loaded:
        return loaded.embed(["hello world", "two lines here"])


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=True)


def test_arguments_give_one_line_of_values_per_text(nomic_path, want):
    result = run("embed", "-m", nomic_path, "--device", "cpu", "-t", "2", "hello world", "two lines here")
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if line]
    got = np.array([[float(v) for v in line.split()] for line in rows])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_stdin_lines_and_json(nomic_path, want):
    result = run(
        "embed", "-m", nomic_path, "--device", "cpu", "-t", "2", "--json", input="hello world\n\ntwo lines here\n"
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert [o["text"] for o in out] == ["hello world", "two lines here"]
    assert out[0]["n_tokens"] == 4
    np.testing.assert_allclose(np.array([o["embedding"] for o in out]), want, rtol=0, atol=1e-6)


def test_no_text_is_a_usage_error(nomic_path):
    result = run("embed", "-m", nomic_path, input="\n")
    assert result.exit_code == 2 and "no text" in result.output
