"""MiniCPM5 on its tiny file (reference/make_tiny_gguf.py): the llama graph (GQA 8:1, untied)
with the "minicpm5" pre-tokenizer over a byte-level BPE vocabulary that has pieces only
MiniCPM5's rules reach (digit runs of at most three, whole pieces without merges).

test_fidelity.py compares the greedy steps and logits with llama.cpp's stored data
(data/tiny-minicpm5.json); here the tokenizer against llama.cpp's recorded corpus
(tokenizer/tiny-minicpm5.json, make_tiny_tokenizer_reference.py), live where llama-cpp-python
is installed, and the Vulkan backend against the CPU on the same steps.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from fidelity import MARGIN, load_reference

import cera
from cera.formats.gguf import GGUFFile
from cera.text.tokenizer import Tokenizer

HERE = Path(__file__).parent
TINY = HERE / "reference" / "tiny" / "tiny-minicpm5.gguf"
RECORD = HERE / "reference" / "tokenizer" / "tiny-minicpm5.json"
pytestmark = pytest.mark.skipif(not TINY.exists(), reason="tiny-minicpm5.gguf is made by reference/make_tiny_gguf.py")

sys.path.insert(0, str(HERE.parent / "core" / "data" / "tokenizer"))
from reference_check import check_against_record  # noqa: E402

sys.path.insert(0, str(HERE.parent / "audio"))
from gguf_edit import rewrite  # noqa: E402


def _record() -> dict:
    return json.loads(RECORD.read_text())


def _tokenizer(path: Path) -> Tokenizer:
    with GGUFFile(path) as g:
        return Tokenizer.from_gguf(g)


def test_tokenizer_equals_llama_cpp_on_the_recorded_corpus():
    rec = _record()
    with GGUFFile(TINY) as g:
        assert g.metadata["tokenizer.ggml.pre"] == "minicpm5" and g.architecture == "llama"
    check_against_record(_tokenizer(TINY), rec, rec["corpus"])


@pytest.mark.parametrize("pre", ["qwen2", "gpt-2"])
def test_another_pre_tokenizer_on_the_same_vocabulary_disagrees(tmp_path, pre):
    """The corpus tells the rules apart: digit runs split in threes ("1234567890", "1990")
    and " quick", a token no merge makes, come out otherwise under Qwen2's or GPT-2's."""
    rec = _record()
    tok = _tokenizer(rewrite(TINY, tmp_path / "m.gguf", kv={"tokenizer.ggml.pre": pre}))
    differ = [
        text for text, row in zip(rec["corpus"], rec["tokenize"]["00"], strict=True)
        if tok.encode(text, add_special=False, parse_special=False) != row["ids"]
    ]  # fmt: skip
    assert any("1234567890" in t for t in differ) and any("quick" in t for t in differ), differ


def test_live_llama_cpp_tokenizes_as_recorded():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install llama-cpp-python==0.3.36)")
    from make_llama_reference import record

    rec = _record()
    live = record(TINY, [(False, False), (True, True)], long_text=False)
    assert live["tokenize"] == rec["tokenize"] and live["special"] == rec["special"] and live["eog"] == rec["eog"]


def _steps(device: str, case: dict) -> np.ndarray:
    """Logits after the prompt and after each of llama.cpp's tokens (teacher forced)."""
    with cera.load(TINY, device=device, quiet=True) as loaded:
        session = loaded.new_session(n_ctx=len(case["prompt_tokens"]) + len(case["steps"]) + 8)
        session.append_tokens(case["prompt_tokens"])
        rows = [session.evaluate()]
        for step in case["steps"][:-1]:
            session.append_tokens([step["token"]])
            rows.append(session.evaluate())
    return np.array(rows, dtype=np.float64)


@pytest.mark.skipif(importlib.util.find_spec("cera_backend_vulkan") is None, reason="cera-backend-vulkan is not installed")
def test_vulkan_follows_the_cpu_and_llama_cpp():
    """Vulkan (lavapipe in CI) against the CPU on the teacher-forced steps of two prompts:
    logits within 0.05 (the CPU follows llama.cpp's f16 cache and f16 attention sums, the
    GPU sums otherwise: 0.026 seen; llama.cpp itself moves by 0.039 on this file with flash
    attention off, data/tiny-minicpm5.json), and the arg-max equal to llama.cpp's wherever
    its margin is over 0.5."""
    pytest.importorskip("wgpu", reason="wgpu is not installed")
    from cera_backend_vulkan import device

    if not device.adapters():
        pytest.skip("no Vulkan adapter here (Debian: apt-get install mesa-vulkan-drivers gives lavapipe)")
    record = load_reference("tiny-minicpm5")
    for case in record["cases"][:2]:
        cpu, gpu = _steps("cpu", case), _steps("vulkan", case)
        assert np.abs(gpu - cpu).max() <= 0.05, case["id"]
        for i, step in enumerate(case["steps"]):
            if step["margin"] > MARGIN:
                assert int(np.argmax(gpu[i])) == step["token"], (case["id"], i)
