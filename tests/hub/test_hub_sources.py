"""Models from a Hugging Face Hub: sources, quants, revisions, split files, tokens, the
huggingface_hub cache, resumable verified downloads and every failure, all against the
local Hub server (``HF_ENDPOINT``); nothing reaches the real Hub.

Independent checks: the cache is read back with huggingface_hub's own functions
(`try_to_load_from_cache`, `hf_hub_download(local_files_only=True)`), file contents by
their SHA-256, what went over the wire by the server's request log."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cera.sources import hub as H
from cera.sources import resolve
from cera.errors import CeraError, DownloadError, ModelNotFound

pytest.importorskip("huggingface_hub")

TOKEN = "hf_cera_test_secret_0123456789"


def local_path(source, **kw):
    """The GGUF file a source resolves to."""
    return resolve(source, **kw).path


def blob(n: int, seed: int) -> bytes:
    import random

    return random.Random(seed).randbytes(n)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cache_leftovers(root: Path) -> list[str]:
    """Files in the hub cache that are not complete blobs or snapshot links."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and
                  (p.name.endswith((".cera-partial", ".tmp", ".incomplete")) or p.name.startswith(".")))  # fmt: skip


# -- parsing and choosing ------------------------------------------------------------


@pytest.mark.parametrize(
    "source, want",
    [
        ("org/repo", ("org/repo", None, None)),
        ("org/repo:Q4_K_M", ("org/repo", None, "Q4_K_M")),
        ("hf://org/re.po-x:q8_0", ("org/re.po-x", None, "q8_0")),
        ("org/repo@v1.0", ("org/repo", "v1.0", None)),
        ("org/repo@v1.0:Q4_0", ("org/repo", "v1.0", "Q4_0")),
        ("org/repo:Q4_0@0123456789abcdef0123456789abcdef01234567", ("org/repo", "0123456789abcdef0123456789abcdef01234567", "Q4_0")),
    ],
)
def test_parse_source(source, want):
    hs = H.parse_source(source)
    assert (hs.repo, hs.revision, hs.quant) == want
    assert H.parse_source(str(hs)) == hs


@pytest.mark.parametrize("source", ["model.gguf", "dir/model.gguf", "nosuchthing", "org/repo@a@b"])
def test_not_hub_sources(source):
    assert H.parse_source(source) is None


@pytest.mark.parametrize(
    "name, label",
    [
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"),
        ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "Q4_K_M"),
        ("Llama-3-8B-IQ2_XXS.gguf", "IQ2_XXS"),
        ("model-f16.gguf", "F16"),
        ("model.fp16.gguf", "F16"),
        ("big-Q6_K-00002-of-00004.gguf", "Q6_K"),
        ("gemma-3-4b-it-UD-Q4_K_XL.gguf", "Q4_K_XL"),
        ("model-BF16.gguf", "BF16"),
        ("model.gguf", None),
    ],
)
def test_quant_label(name, label):
    assert H.quant_label(name) == label


def test_choose():
    files = ["m-Q4_0.gguf", "m-Q8_0.gguf", "mmproj-m-f16.gguf", "big-Q6_K-00001-of-00002.gguf", "big-Q6_K-00002-of-00002.gguf"]
    assert H.choose("o/r", files, "q8_0") == ["m-Q8_0.gguf"]
    assert H.choose("o/r", files, "Q6_K") == ["big-Q6_K-00001-of-00002.gguf", "big-Q6_K-00002-of-00002.gguf"]
    with pytest.raises(ModelNotFound) as e:
        H.choose("o/r", files, None)  # ambiguous: the choices are listed (the projector is not one)
    assert "Q4_0 (m-Q4_0.gguf)" in str(e.value) and "Q6_K" in str(e.value) and "mmproj" not in str(e.value)
    with pytest.raises(ModelNotFound) as e:
        H.choose("o/r", files, "Q5_K_M")
    assert "no Q5_K_M" in str(e.value) and "Q8_0 (m-Q8_0.gguf)" in str(e.value)
    # llama.cpp's default when several: Q4_K_M
    assert H.choose("o/r", ["a-Q8_0.gguf", "a-Q4_K_M.gguf"], None) == ["a-Q4_K_M.gguf"]
    assert H.choose("o/r", ["only.gguf"], None) == ["only.gguf"]
    with pytest.raises(ModelNotFound, match="lacks part"):
        H.choose("o/r", ["x-Q4_0-00001-of-00003.gguf", "x-Q4_0-00003-of-00003.gguf"], "Q4_0")


# -- downloads into the huggingface_hub cache ------------------------------------------------


def test_download_shares_the_huggingface_hub_cache(hub, capfd):
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    data = blob(3 << 20, 1)
    commit = hub.add_commit("org/tiny-GGUF", {"tiny-Q4_0.gguf": data, "tiny-Q8_0.gguf": blob(1000, 2), "README.md": b"# tiny\n"})
    path = local_path("org/tiny-GGUF:Q4_0")
    assert sha(path.read_bytes()) == sha(data)
    cache = os.environ["HF_HUB_CACHE"]
    # huggingface_hub finds the file where we put it, by revision and by commit, without network
    assert try_to_load_from_cache("org/tiny-GGUF", "tiny-Q4_0.gguf", cache_dir=cache) == str(path)
    assert hf_hub_download("org/tiny-GGUF", "tiny-Q4_0.gguf", revision=commit, cache_dir=cache, local_files_only=True) == str(path)
    assert Path(path).resolve().name == sha(data)  # the blob is named by its LFS SHA-256, as huggingface_hub names it
    # a progress bar went to stderr, with the file's name, and nothing to stdout
    out, err = capfd.readouterr()
    assert "tiny-Q4_0.gguf" in err and "100%" in err and out == ""
    # a second resolve asks the API once and downloads nothing
    n_cdn = len(hub.requests("cdn"))
    assert local_path("org/tiny-GGUF:Q4_0") == path
    assert len(hub.requests("cdn")) == n_cdn
    assert cache_leftovers(Path(cache)) == []


def test_quiet_has_no_progress_bar(hub, capfd):
    hub.add_commit("org/q", {"q-Q4_0.gguf": blob(2000, 3)})
    local_path("org/q", quiet=True)
    assert capfd.readouterr().err == ""


def test_files_downloaded_by_huggingface_hub_are_used(hub):
    from huggingface_hub import hf_hub_download

    data = blob(5000, 4)
    hub.add_commit("org/pre", {"pre-Q8_0.gguf": data})
    theirs = hf_hub_download("org/pre", "pre-Q8_0.gguf", cache_dir=os.environ["HF_HUB_CACHE"], endpoint=hub.url)
    n_cdn = len(hub.requests("cdn"))
    assert str(local_path("org/pre:Q8_0")) == theirs
    assert len(hub.requests("cdn")) == n_cdn  # no second copy, no second download


def test_revisions_branches_tags_commits(hub):
    v1, v2 = blob(4000, 5), blob(4000, 6)
    c1 = hub.add_commit("org/rev", {"rev-Q4_0.gguf": v1}, tags=["v1"])
    c2 = hub.add_commit("org/rev", {"rev-Q4_0.gguf": v2}, branch="main")
    hub.add_commit("org/rev", {"rev-Q4_0.gguf": v1, "rev-Q8_0.gguf": v2}, branch="dev")
    assert local_path("org/rev").read_bytes() == v2
    assert local_path("org/rev@v1").read_bytes() == v1
    assert local_path(f"org/rev@{c1}").read_bytes() == v1
    assert local_path("org/rev@dev:Q8_0").read_bytes() == v2
    assert local_path("org/rev", revision="v1").read_bytes() == v1
    refs = H.repo_cache_dir("org/rev") / "refs"
    assert (refs / "main").read_text() == c2 and (refs / "v1").read_text() == c1
    with pytest.raises(ModelNotFound, match="no revision 'nope'"):
        local_path("org/rev@nope")


def test_split_gguf_downloads_every_part_and_loads(hub, tmp_path, smollm2_path):
    from split_gguf import write_split

    from cera.formats.gguf import GGUFFile

    parts = write_split(smollm2_path, tmp_path / "split" / "SmolLM2-135M-Instruct-Q4_1", 100)
    assert len(parts) == 3
    hub.add_commit("org/split-GGUF", {p.name: p for p in parts})
    first = local_path("org/split-GGUF:Q4_1", quiet=True)
    assert first.name == parts[0].name
    for p in parts:
        assert sha((first.parent / p.name).read_bytes()) == sha(p.read_bytes())
    with GGUFFile(first) as split, GGUFFile(smollm2_path) as whole:
        assert set(split.tensors) == set(whole.tensors)
        assert {split.tensors[n].part for n in split.tensors} == {0, 1, 2}
        for name in ("token_embd.weight", "output_norm.weight", "blk.29.ffn_down.weight"):
            assert bytes(split.tensor_data(name)) == bytes(whole.tensor_data(name))


# -- tokens ----------------------------------------------------------------------------


def test_private_repo_needs_the_token_and_never_shows_it(hub, monkeypatch, capfd):
    data = blob(6000, 7)
    hub.add_commit("org/private-GGUF", {"p-Q4_0.gguf": data}, private=True, token=TOKEN)
    with pytest.raises(ModelNotFound) as e:
        local_path("org/private-GGUF")
    assert "hf auth login" in str(e.value) and "HF_TOKEN" in str(e.value)
    monkeypatch.setenv("HF_TOKEN", "hf_wrong_" + TOKEN[::-1])
    with pytest.raises(ModelNotFound) as e:
        local_path("org/private-GGUF")
    assert "token" in str(e.value) and TOKEN[::-1] not in str(e.value)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert local_path("org/private-GGUF").read_bytes() == data
    # the token went to the Hub's API and resolve URLs, never to the storage host
    log = hub.requests()
    assert any(r["authorization"] == f"Bearer {TOKEN}" for r in log if r["kind"] == "resolve")
    assert all(r["authorization"] is None for r in log if r["kind"] == "cdn")
    out, err = capfd.readouterr()
    assert TOKEN not in out + err


def test_token_from_hf_login_file(hub, monkeypatch):
    from huggingface_hub import constants

    home = Path(os.environ["HF_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "token").write_text(TOKEN)  # what `hf auth login` writes
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    hub.add_commit("org/p2", {"p2-Q4_0.gguf": blob(100, 8)}, private=True, token=TOKEN)
    assert local_path("org/p2").exists()


# -- failures ----------------------------------------------------------------------------


def test_unknown_repo_and_file(hub):
    with pytest.raises(ModelNotFound, match=r"'org/none' was not found .*HTTP 404"):
        local_path("org/none")
    hub.add_commit("org/readme-only", {"README.md": b"nothing here"})
    with pytest.raises(ModelNotFound, match="no .gguf file and no SafeTensors"):
        local_path("org/readme-only")


def free_port() -> int:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_hub_fails_fast_with_a_hint(monkeypatch, tmp_path):
    port = free_port()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    t0 = time.monotonic()
    with pytest.raises(DownloadError) as e:
        local_path("org/anything:Q4_0")
    assert time.monotonic() - t0 < 5
    msg = str(e.value)
    assert "cannot reach the Hugging Face Hub" in msg and "HF_HUB_OFFLINE=1" in msg and "local .gguf file" in msg


def test_a_hub_that_never_answers_fails_within_seconds(tmp_path):
    """An endpoint that accepts connections and never answers (a hung proxy, a black hole
    behind a load balancer): one API request, one timeout (CERA_HUB_TIMEOUT), no retries,
    then the hint. (huggingface_hub first tries its own agent-registry fetch, 3 s timeout,
    on a fresh HF_HOME.)"""
    import threading

    seen, held = [], []

    def serve(sink):
        while True:
            try:
                conn, _ = sink.accept()
            except OSError:
                return
            held.append(conn)  # kept open, never answered
            seen.append(conn.recv(4096).split(b"\r\n", 1)[0].decode())

    with socket.socket() as sink:
        sink.bind(("127.0.0.1", 0))
        sink.listen(8)
        threading.Thread(target=serve, args=(sink,), daemon=True).start()
        env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{sink.getsockname()[1]}", "CERA_HUB_TIMEOUT": "1",
               "HF_HUB_CACHE": str(tmp_path / "hf-cache"), "HF_HOME": str(tmp_path / "hf-home")}  # fmt: skip
        env.pop("HF_HUB_OFFLINE", None)
        script = "from cera.sources import resolve\ntry:\n    resolve('org/anything:Q4_0')\nexcept Exception as e:\n    print(type(e).__name__, e)"
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
        for conn in held:
            conn.close()
    assert proc.stdout.startswith("DownloadError cannot reach the Hugging Face Hub"), proc.stdout + proc.stderr
    assert "timed out" in proc.stdout and "HF_HUB_OFFLINE=1" in proc.stdout and "local .gguf file" in proc.stdout
    assert [r for r in seen if r.startswith("GET /api/models/")] == ["GET /api/models/org/anything/revision/main?blobs=true HTTP/1.1"]


def test_offline_uses_the_cache_only(hub, monkeypatch):
    data = blob(7000, 9)
    hub.add_commit("org/off-GGUF", {"off-Q4_0.gguf": data, "off-Q8_0.gguf": blob(10, 1)})
    online = local_path("org/off-GGUF:Q4_0")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    n = len(hub.requests())
    assert local_path("org/off-GGUF:Q4_0") == online
    assert len(hub.requests()) == n  # not one request
    with pytest.raises(ModelNotFound, match=r"no Q8_0 model file; it has: Q4_0 .*HF_HUB_OFFLINE is set: only files in the cache"):
        local_path("org/off-GGUF:Q8_0")  # never fetched, so unknown offline
    with pytest.raises(ModelNotFound, match="not in the Hugging Face cache"):
        local_path("org/never-fetched")
    # the unreachable-hub error says when the cache has the repo
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(DownloadError, match="the cache has org/off-GGUF@main: HF_HUB_OFFLINE=1 uses it"):
        local_path("org/off-GGUF:Q4_0")


def test_offline_resolution_does_not_import_huggingface_hub(hub):
    """Offline, the cache is all there is: nothing imports huggingface_hub (half a second)
    or looks up a token."""
    hub.add_commit("org/imp-GGUF", {"imp-Q4_0.gguf": blob(3000, 15)})
    online = local_path("org/imp-GGUF:Q4_0", quiet=True)
    script = "import sys; from cera.sources import resolve; print(resolve('org/imp-GGUF:Q4_0').path); print('huggingface_hub' in sys.modules)"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == [str(online), "False"]


def test_a_cached_commit_asks_the_hub_nothing(hub):
    """A commit never changes: once its file is cached, org/repo@COMMIT:QUANT resolves
    without a request; a quant it lacks in the cache, or a branch, still asks the Hub."""
    q4, q8 = blob(4000, 16), blob(4000, 17)
    commit = hub.add_commit("org/pin-GGUF", {"pin-Q4_0.gguf": q4, "pin-Q8_0.gguf": q8})
    path = local_path(f"org/pin-GGUF@{commit}:Q4_0", quiet=True)
    n = len(hub.requests())
    assert local_path(f"org/pin-GGUF@{commit}:Q4_0", quiet=True) == path
    assert local_path("org/pin-GGUF:Q4_0", quiet=True, revision=commit) == path
    assert len(hub.requests()) == n
    assert local_path(f"org/pin-GGUF@{commit}:Q8_0", quiet=True).read_bytes() == q8  # not cached yet: fetched
    assert len(hub.requests()) > n
    n = len(hub.requests())
    assert local_path("org/pin-GGUF:Q4_0", quiet=True) == path  # a branch can move: asked
    assert len(hub.requests()) > n
    # a blob deleted from under the snapshot is fetched again, not returned broken
    path.resolve().unlink()
    assert local_path(f"org/pin-GGUF@{commit}:Q4_0", quiet=True).read_bytes() == q4


def test_cut_connection_resumes_in_the_same_run(hub):
    data = blob(2_500_000, 10)
    hub.add_commit("org/cut", {"cut-Q4_0.gguf": data})
    hub.fault("org/cut", "cut-Q4_0.gguf", cut_after=1_000_000, times=1)
    path = local_path("org/cut", quiet=True)
    assert sha(path.read_bytes()) == sha(data)
    assert [r["range"] for r in hub.requests("cdn")] == [None, "bytes=1000000-"]


def test_truncated_download_keeps_the_partial_file_and_the_next_run_resumes(hub):
    data = blob(2_000_000, 11)
    hub.add_commit("org/trunc", {"trunc-Q4_0.gguf": data})
    hub.fault("org/trunc", "trunc-Q4_0.gguf", cut_after=700_000)  # every time
    with pytest.raises(DownloadError) as e:
        local_path("org/trunc", quiet=True)
    msg = str(e.value)
    assert "org/trunc/trunc-Q4_0.gguf" in msg and "cut off" in msg and "resumes" in msg
    storage = H.repo_cache_dir("org/trunc")
    partial = storage / "blobs" / (sha(data) + ".cera-partial")
    assert partial.stat().st_size == 700_000
    assert not (storage / "blobs" / sha(data)).exists() and not (storage / "snapshots").exists()
    del hub.faults[("org/trunc", "trunc-Q4_0.gguf")]
    path = local_path("org/trunc", quiet=True)
    assert sha(path.read_bytes()) == sha(data)
    assert hub.requests("cdn")[-1]["range"] == "bytes=700000-"
    assert not partial.exists()


def test_wrong_checksum_deletes_the_file(hub):
    data = blob(300_000, 12)
    hub.add_commit("org/bad", {"bad-Q4_0.gguf": data, "config.json": b"{}"})
    hub.fault("org/bad", "bad-Q4_0.gguf", corrupt=True)
    with pytest.raises(DownloadError) as e:
        local_path("org/bad", quiet=True)
    msg = str(e.value)
    assert f"does not match the Hub's {sha(data)}" in msg and "deleted" in msg and "bad-Q4_0.gguf" in msg
    root = Path(os.environ["HF_HUB_CACHE"])
    assert [p for p in root.rglob("*") if p.is_file() and "bad-Q4" in p.name or p.name.startswith(sha(data))] == []
    assert cache_leftovers(root) == []


def test_not_enough_disk_space_is_said_before_downloading(hub, monkeypatch):
    import shutil
    from collections import namedtuple

    hub.add_commit("org/big", {"big-Q4_0.gguf": blob(50_000, 13)})
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(DownloadError, match=r"big-Q4_0.gguf needs 48.8 KiB more, but .* has only 1000 B free"):
        local_path("org/big", quiet=True)
    assert hub.requests("cdn") == []


def test_disk_filling_up_mid_download(hub, tmp_path):
    """A real write failure: the file-size limit (RLIMIT_FSIZE) stops writes as a full disk would."""
    hub.add_commit("org/full", {"full-Q4_0.gguf": blob(3_000_000, 14)})
    script = textwrap.dedent(
        """
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_500_000, 1_500_000))
        from cera.sources import resolve
        from cera.errors import DownloadError
        try:
            resolve("org/full", quiet=True)
        except DownloadError as e:
            print(e)
            sys.exit(3)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=os.environ.copy(), timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert "disk filled up while downloading org/full/full-Q4_0.gguf" in proc.stdout
    assert "partial file was deleted" in proc.stdout
    root = Path(os.environ["HF_HUB_CACHE"])
    assert [p for p in root.rglob("*") if p.is_file()] == []


def test_errors_are_cera_errors(hub):
    for source in ("org/none", "org/none@v9:Q4_0"):
        with pytest.raises(CeraError):
            local_path(source)
