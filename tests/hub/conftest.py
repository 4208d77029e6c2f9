"""Fixtures of the hub tests: a local Hub server (hub_server.py, beside this file) that
``HF_ENDPOINT`` points at, an empty Hugging Face cache per test, and no token."""

from __future__ import annotations

import pytest

from hub_server import HubServer


@pytest.fixture
def hub(tmp_path, monkeypatch):
    with HubServer() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        monkeypatch.setenv("CERA_CACHE_DIR", str(tmp_path / "cera-cache"))
        for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                    "HF_HUB_DISABLE_PROGRESS_BARS", "CERA_BUNDLES_REPO"):  # fmt: skip
            monkeypatch.delenv(var, raising=False)
        # a token file from a real `hf auth login` on this machine must not leak in
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        yield server
