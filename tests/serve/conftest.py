"""Shared by the serve tests: SmolLM2 loaded once per test module."""

from __future__ import annotations

import pytest

import cera


@pytest.fixture(scope="module")
def loaded(smollm2_path):
    m = cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    yield m
    m.close()
