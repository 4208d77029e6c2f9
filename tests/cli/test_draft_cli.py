"""`cera run -md DRAFT`: the greedy text of plain decoding, the acceptance in the summary,
and a draft of another vocabulary refused naming both models."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "integration"))
from draft_files import truncated_smollm2  # noqa: E402


def cera(*args):
    return subprocess.run([sys.executable, "-m", "cera_cli.main", *args], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def draft_path(smollm2_path):
    return truncated_smollm2(smollm2_path, 26)


def test_run_with_a_draft_prints_plain_decodings_text(smollm2_path, draft_path):
    args = ["run", "-m", str(smollm2_path), "--raw", "--temp", "0", "-n", "40", "-p", "def fibonacci(n):"]
    plain = cera(*args)
    assert plain.returncode == 0, plain.stderr
    spec = cera(*args, "-md", str(draft_path), "--draft-p-min", "0", "-v")
    assert spec.returncode == 0, spec.stderr
    assert spec.stdout == plain.stdout and spec.stdout.strip()
    assert "drafted tokens accepted" in spec.stderr and "draft model" in spec.stderr
    assert "drafted tokens accepted" not in plain.stderr


def test_a_draft_of_another_vocabulary_is_a_clear_error(smollm2_path, qwen05_path):
    r = cera("run", "-m", str(smollm2_path), "-md", str(qwen05_path), "--temp", "0", "-n", "4", "-p", "Hi")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    # e.g. "the draft model 'Qwen2.5 Coder 0.5B Instruct' and the target 'SmolLM2 135M Instruct' have ..."
    assert "the draft model '" in r.stderr and "and the target '" in r.stderr, r.stderr
    assert "same tokenizer" in r.stderr


def test_device_draft_needs_a_draft(smollm2_path):
    r = cera("run", "-m", str(smollm2_path), "--device-draft", "cpu", "--temp", "0", "-n", "2", "-p", "Hi")
    assert r.returncode == 2 and "--device-draft needs a draft model" in r.stderr
