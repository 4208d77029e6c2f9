"""Skipping what only holds under llama.cpp's AVX-512 arithmetic (a module of its own, not in
conftest.py: test files import it by name)."""

from __future__ import annotations

import pytest


def skip_unless_llama_cpp_arithmetic(loaded, what: str) -> None:
    """Skip a test whose expected text or figures are SmolLM2's under llama.cpp's x86 AVX-512
    arithmetic, which cera's CPU backend reproduces bit for bit only in its AVX-512 variants
    (another variant's logits differ by up to ~0.1, enough to change a reply)."""
    variant = getattr(loaded.backend, "variant", "unknown")
    if variant not in ("avx512", "avx512vnni"):
        pytest.skip(f"{what} expects llama.cpp's AVX-512 arithmetic; this CPU backend runs {variant!r}")
