"""A hostile Hub (a rogue HF_ENDPOINT, anything on a plain-HTTP path) against `cera pull`:
names that climb out of the cache, commit ids that are paths, redirects to ``file:`` URLs,
bodies longer than the size listed. Each is refused with a `DownloadError` before
anything is written outside the cache, and nothing is read past the listed size.
The answers come from the local Hub server (hub_server.py, beside this file)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from cera.sources import hub as H
from cera.errors import CeraError, DownloadError, ModelNotFound
from hub_server import resolve_path as resolve


pytest.importorskip("huggingface_hub")

GGUF = b"GGUF" + bytes(range(256)) * 8


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


def outside_files(tmp_path: Path) -> set[str]:
    """Everything under the test's folder that is not in the Hub cache or the cera cache."""
    return {p for p in tree(tmp_path) if not p.startswith(("hf-cache", "cera-cache", "hf-home"))}


@pytest.mark.parametrize("name", ["../../../../x.gguf", "a/../../../../x.gguf", "/ABS/x.gguf", "./x.gguf",
                                  "a//x.gguf", "a\\..\\x.gguf", "x\x00.gguf", "x\n.gguf"])  # fmt: skip
def test_a_file_name_that_leaves_the_cache_is_refused(hub, tmp_path, name):
    name = name.replace("/ABS", str(tmp_path / "victim"))
    victim = tmp_path / "victim" / "x.gguf"
    victim.parent.mkdir()
    victim.write_bytes(b"the user's own file")
    hub.add_commit("org/evil", {name: GGUF})
    before = outside_files(tmp_path)
    with pytest.raises(DownloadError, match="not a repository path"):
        resolve("org/evil", quiet=True)
    assert outside_files(tmp_path) == before
    assert victim.read_bytes() == b"the user's own file" and not victim.is_symlink()


@pytest.mark.parametrize("commit", ["../../../../x", "/tmp/x", "main", "0" * 39 + "/", "A" * 40])
def test_a_commit_id_that_is_not_one_is_refused(hub, tmp_path, commit):
    sha = hub.add_commit("org/evil", {"m-Q4_0.gguf": GGUF})
    repo = hub.repos["org/evil"]
    repo.commits[commit] = repo.commits.pop(sha)
    repo.refs["main"] = commit
    before = outside_files(tmp_path)
    with pytest.raises(DownloadError, match="not a commit id"):
        resolve("org/evil", quiet=True)
    assert outside_files(tmp_path) == before
    assert not (tmp_path / "hf-cache").exists() or not any((tmp_path / "hf-cache").rglob("*.gguf"))


def test_a_checksum_that_is_a_path_is_refused(hub, tmp_path, monkeypatch):
    hub.add_commit("org/evil", {"m-Q4_0.gguf": GGUF})
    real = H._checked_state

    def lying(repo, revision, info, where):
        for s in info.siblings:
            object.__setattr__(s, "lfs", {"sha256": "../../../../x"})
        return real(repo, revision, info, where)

    monkeypatch.setattr(H, "_checked_state", lying)
    with pytest.raises(DownloadError, match="not a git id or a SHA-256"):
        resolve("org/evil", quiet=True)
    assert outside_files(tmp_path) == set()


@pytest.mark.parametrize("revision", ["../../../x", "a/../../b", ".hidden", "x\n"])
def test_a_revision_that_is_a_path_is_refused(hub, revision):
    hub.add_commit("org/m", {"m-Q4_0.gguf": GGUF})
    with pytest.raises(ModelNotFound, match="not a valid branch, tag or commit name"):
        H.Hub(quiet=True).state("org/m", revision)


@pytest.mark.parametrize("target", ["file:///etc/passwd", "file:///dev/zero", "ftp://127.0.0.1/x", "data:,GGUF"])
def test_a_redirect_to_another_scheme_is_not_followed(hub, tmp_path, target):
    hub.add_commit("org/redir", {"m-Q4_0.gguf": GGUF})
    hub.fault("org/redir", "m-Q4_0.gguf", redirect=target)
    with pytest.raises(DownloadError, match="only http and https redirects are followed"):
        resolve("org/redir", quiet=True)
    cache = tmp_path / "hf-cache"
    assert sum(p.stat().st_size for p in cache.rglob("*") if p.is_file()) == 0


def test_redirects_are_bounded(hub):
    hub.add_commit("org/loop", {"m-Q4_0.gguf": GGUF})
    hub.fault("org/loop", "m-Q4_0.gguf", redirect=f"{hub.url}/org/loop/resolve/main/m-Q4_0.gguf")
    with pytest.raises(DownloadError, match="too many redirects"):
        resolve("org/loop", quiet=True)
    assert len(hub.requests("resolve")) == H.MAX_REDIRECTS + 1


@pytest.mark.parametrize("overrun", [1, 5_000_000, -1])
def test_a_body_past_the_listed_size_is_cut_there(hub, tmp_path, overrun):
    """A Content-Length larger than the listed size, or none and an endless body: the
    download stops one piece past the listed size, and nothing is kept."""
    data = bytes(737_000)
    hub.add_commit("org/long", {"m-Q4_0.gguf": data})
    hub.fault("org/long", "m-Q4_0.gguf", overrun=overrun)
    with pytest.raises(DownloadError, match="more than the 737000 bytes the Hub lists"):
        resolve("org/long", quiet=True)
    assert not [p for p in (tmp_path / "hf-cache").rglob("*") if p.is_file()]
    time.sleep(0.2)  # the server's writer notices the closed connection
    # what the server got out before the client hung up: socket buffers, not the endless body
    assert hub.overrun_sent < 16 * 2**20


def test_an_api_answer_past_its_bound_is_refused(hub, monkeypatch):
    hub.add_commit("org/m", {"m-Q4_0.gguf": GGUF})
    monkeypatch.setattr(H, "MAX_API_BYTES", 100)
    with pytest.raises(DownloadError, match="larger than 100 B"):
        resolve("org/m", quiet=True)


def test_an_honest_hub_still_works(hub):
    hub.add_commit("org/ok", {"sub/m-Q4_0.gguf": GGUF})
    path = resolve("org/ok", quiet=True)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == hashlib.sha256(GGUF).hexdigest()
    assert os.path.realpath(path).startswith(os.path.realpath(H.hub_cache_dir()))


def test_every_hostile_answer_is_a_cera_error(hub):
    """What the fuzz test generates covers these; this one pins the error class."""
    hub.add_commit("org/evil", {"../x.gguf": GGUF})
    with pytest.raises(CeraError):
        resolve("org/evil", quiet=True)
