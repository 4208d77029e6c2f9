"""Model housekeeping: `cera models --disk` lists what the fetched models take on disk (a
cache made here: a bundle, a converted file, Hugging Face repos with and without a GGUF
file, whose snapshot links to its blob), `cera rm NAME` removes one and says what it freed,
and a name that is not there is an error that lists those that are."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.fixture
def caches(tmp_path):
    cera_cache, hub = tmp_path / "cera", tmp_path / "hub"
    bundle = cera_cache / "bundles" / "tiny-bundle"
    bundle.mkdir(parents=True)
    (bundle / "model.gguf").write_bytes(b"GGUF" + b"x" * 996)
    (bundle / ".verified.json").write_text("{}")
    converted = cera_cache / "converted"
    converted.mkdir()
    (converted / "org-model-q4_k_m.gguf").write_bytes(b"GGUF" + b"y" * 2996)
    (converted / "org-model-q4_k_m.gguf.json").write_text("{}")
    repo = hub / "models--org--repo"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc123").write_bytes(b"GGUF" + b"z" * 4996)
    snap = repo / "snapshots" / "0123"
    snap.mkdir(parents=True)
    (snap / "model-Q4_K_M.gguf").symlink_to("../../blobs/abc123")
    other = hub / "models--org--not-gguf" / "blobs"
    other.mkdir(parents=True)
    (other / "weights").write_bytes(b"s" * 100)  # another tool's repo: not listed, never removed
    env = {**os.environ, "CERA_CACHE_DIR": str(cera_cache), "HF_HUB_CACHE": str(hub)}
    env.pop("CERA_PLUGINS", None)
    return env, bundle, converted, repo, other


def cera(env, *args):
    return subprocess.run([sys.executable, "-m", "cera_cli.main", *args], capture_output=True, text=True, env=env)


def test_models_disk_lists_sizes_and_rm_removes(caches):
    env, bundle, converted, repo, other = caches
    r = cera(env, "models", "--disk", "--json")
    assert r.returncode == 0, r.stderr
    got = {e["name"]: (e["kind"], e["size"]) for e in json.loads(r.stdout)}
    assert got == {"tiny-bundle": ("bundle", 1002), "org-model-q4_k_m": ("converted", 3000), "org/repo": ("hub", 5000)}
    table = cera(env, "models", "--disk").stdout
    assert "3 models, 9.0 kB in all" in table and "org/repo" in table
    r = cera(env, "rm", "tiny-bundle", "org/repo", "org-model-q4_k_m")
    assert r.returncode == 0, r.stderr
    assert "removed tiny-bundle (bundle, 1.0 kB)" in r.stdout and "removed org/repo (hub, 5.0 kB)" in r.stdout
    assert not bundle.exists() and not repo.exists() and not list(converted.iterdir())
    assert other.exists()
    assert json.loads(cera(env, "models", "--disk", "--json").stdout) == []


def test_rm_of_a_name_not_on_disk_lists_those_that_are(caches):
    env, bundle, *_ = caches
    r = cera(env, "rm", "nope")
    assert r.returncode == 1
    assert "no model named 'nope' is on disk" in r.stderr and "tiny-bundle" in r.stderr and "org/repo" in r.stderr
    assert bundle.exists()
    r = cera(env, "models", "--disk", "--kind", "llm")
    assert r.returncode == 2 and "give one of them" in r.stderr
