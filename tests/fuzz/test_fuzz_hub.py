"""Hostile Hub answers (tests/hub/hub_server.py as a rogue HF_ENDPOINT): generated file
names, commit ids and checksums in the repository info, redirects to any scheme,
bodies longer than listed. Whatever the Hub says, `cera.sources.resolve` ends in a file inside
the cache or a `CeraError`, and nothing is created, changed or linked outside the cache."""

from __future__ import annotations

import os
import sys
import shutil
import tempfile
from pathlib import Path

import pytest
from hostile import long, names, quick
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("huggingface_hub")

from cera.sources import hub as H  # noqa: E402
from cera.errors import CeraError  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub"))
from hub_server import HubServer  # noqa: E402
from hub_server import resolve_path as resolve  # noqa: E402


DATA = b"GGUF" + bytes(2000)

answers = st.fixed_dictionaries({
    "name": st.one_of(names, st.sampled_from(["m-Q4_0.gguf", "sub/m-Q4_0.gguf", "/ABS/x-Q4_0.gguf",
                                              "../../../../victim/x-Q4_0.gguf"])),
    "commit": st.none() | st.text(max_size=50) | st.sampled_from(["../../x", "/etc", "a" * 40, "0" * 64]),
    "sha256": st.none() | st.text(max_size=70) | st.sampled_from(["../../../x", "0" * 64, "/tmp/x"]),
    "redirect": st.none() | st.sampled_from(["file:///etc/passwd", "file:///dev/zero", "ftp://127.0.0.1/x", "data:,x",
                                            "http://127.0.0.1:9/x", "gopher://x", "//127.0.0.1:9/x", "/cdn/" + "0" * 64]),
    "overrun": st.sampled_from([0, 0, 1, 100_000, -1]),
})  # fmt: skip


@pytest.fixture(scope="module")
def server():
    with HubServer() as s:
        yield s


@pytest.fixture
def env(monkeypatch):
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "CERA_BUNDLES_REPO"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setattr(H, "RESUME_ATTEMPTS", 1)  # a refused connection is retried once, not thrice with pauses
    return monkeypatch


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.is_symlink(), p.stat().st_size if p.is_file() and not p.is_symlink() else 0)
            for p in root.rglob("*")}  # fmt: skip


def check(server: HubServer, monkeypatch, answer: dict) -> None:
    root = Path(tempfile.mkdtemp(prefix="cera-fuzz-hub-"))
    try:
        cache = root / "deep" / "er" / "hf-cache"
        (root / "victim").mkdir()
        (root / "victim" / "x.gguf").write_bytes(b"own")
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(cache))
        monkeypatch.setenv("HF_HOME", str(root / "hf-home"))
        server.repos.clear()
        server.faults.clear()
        name = answer["name"].replace("/ABS", str(root / "victim"))
        sha = server.add_commit("org/fuzz", {name: DATA})
        repo = server.repos["org/fuzz"]
        tree = repo.commits[sha]
        if answer["commit"] is not None:
            repo.commits[answer["commit"]] = repo.commits.pop(sha)
            repo.refs["main"] = answer["commit"]
        f = tree[name]
        if answer["sha256"] is not None:
            f.sha256 = answer["sha256"]
        server.fault("org/fuzz", name, redirect=answer["redirect"], overrun=answer["overrun"])
        before = _snapshot(root / "victim")
        try:
            path = resolve("org/fuzz" + (":Q4_0" if name.endswith(".gguf") else ""), quiet=True)
        except CeraError:
            path = None
        assert _snapshot(root / "victim") == before and (root / "victim" / "x.gguf").read_bytes() == b"own"
        outside = [p for p in root.rglob("*") if not str(p).startswith(str(cache)) and p.name != "hf-home"
                   and not str(p).startswith(str(root / "victim")) and p not in (root / "deep", root / "deep" / "er")]
        assert outside == [], outside
        if path is not None:
            real = os.path.realpath(path)
            assert real.startswith(os.path.realpath(cache) + os.sep) and Path(real).read_bytes() == DATA
    finally:
        shutil.rmtree(root, ignore_errors=True)


@quick(examples=40)
@given(answer=answers)
def test_hostile_hub_answers(server, env, answer):
    check(server, env, answer)


@pytest.mark.slow
@long(examples=1500)
@given(answer=answers)
def test_hostile_hub_answers_long(server, env, answer):
    check(server, env, answer)
