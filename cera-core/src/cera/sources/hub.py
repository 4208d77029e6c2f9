"""The Hugging Face Hub: a repository's files at a revision, fetched into the Hub cache.

A Hub source is ``org/repo[@REVISION][:QUANT]`` (``hf://`` may precede it; `parse_source`).
``QUANT`` is a quantization label (``Q4_K_M``, ``Q8_0``, ...) matched against the labels
in the repository's ``.gguf`` file names (`choose`); without one, a repository with a single
model file gives that file and one with ``Q4_K_M`` gives that (as llama.cpp does), anything
else lists the choices. ``REVISION`` is a branch, tag or commit. Split files
(``name-00001-of-00003.gguf``) are fetched together. Which file a source means, and the
conversion of a repository with SafeTensors weights only, are `cera.sources.resolve`'s.

Hub files go to the Hugging Face cache (``HF_HUB_CACHE``, laid out as `huggingface_hub`
lays it out, so its tools and cera share files): each file is downloaded to a partial
file next to its blob, resumed from there if interrupted (in this run or a later one),
checked against the SHA-256 the Hub records for it (git's blob id for small files), and
only then renamed into place. A private repository needs a token: ``HF_TOKEN`` or
``hf auth login``; it is sent to the Hub only, and never printed. With ``HF_HUB_OFFLINE=1``
nothing is fetched and sources resolve from the cache alone.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import attrs

from ..errors import DownloadError, ModelNotFound

DEFAULT_ENDPOINT = "https://huggingface.co"
# The Hub's API answers in well under a second; an endpoint that has not answered in this
# long is treated as unreachable (connection refused fails at once).
API_TIMEOUT_S = float(os.environ.get("CERA_HUB_TIMEOUT", "5"))
READ_TIMEOUT_S = 60.0
RESUME_ATTEMPTS = 3  # in one run, after a connection cut mid-file
CHUNK = 1 << 20
OFFLINE_HINT = "use a local .gguf file, a bundle (`cera bundles list`), or HF_HUB_OFFLINE=1 to use files already in the cache"

_SOURCE = re.compile(
    r"^(?:hf://)?(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+?)(?:@(?P<rev>[^:@\s]+))?(?::(?P<quant>[^:@\s]+))?"
    r"(?:@(?P<rev2>[^:@\s]+))?$"
)
# Quantization labels as they appear in GGUF file names (case-insensitive).
_QUANT = re.compile(
    r"(?<![A-Z0-9])(IQ[1-4]_(?:XXS|XS|NL|S|M)|TQ[12]_0|Q[2-8]_K(?:_(?:XL|S|M|L))?|Q[4-8]_[01]|MXFP4|BF16|F16|FP16|F32)"
    r"(?![A-Z0-9])"
)
_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<n>\d{5})\.gguf$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
# What the Hub sends that becomes a path in the cache, checked against the Hub's own grammar
# before it is joined to anything (a hostile HF_ENDPOINT, or anything on a plain-HTTP path,
# must not name a file outside the cache): blob names are git ids (40 hex digits) or LFS
# SHA-256 digests (64); a repository file is a relative POSIX path of at most 1,000 bytes
# (git's own limit is 4,096; the Hub's names are far shorter).
_ETAG = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
MAX_FILE_NAME = 1000
MAX_REDIRECTS = 10
# The API's JSON answer (repository info, every file with its metadata) is read up to this
# many bytes; the largest public repositories list a few MiB.
MAX_API_BYTES = 64 * 2**20


@attrs.frozen
class HubSource:
    repo: str
    revision: str | None = None
    quant: str | None = None

    def __str__(self) -> str:
        return self.repo + (f"@{self.revision}" if self.revision else "") + (f":{self.quant}" if self.quant else "")


def parse_source(source: str) -> HubSource | None:
    """``org/repo[@REV][:QUANT]`` (or ``org/repo:QUANT@REV``), else None."""
    m = _SOURCE.match(source)
    if not m or source.endswith(".gguf"):
        return None
    if m["rev"] and m["rev2"]:
        return None
    return HubSource(m["repo"], m["rev"] or m["rev2"], m["quant"])


def quant_label(filename: str) -> str | None:
    """The quantization label in a GGUF file name (``Q4_K_M``, ``F16``...), or None."""
    stem = os.path.basename(filename)
    m = _SPLIT.match(stem)
    stem = m["stem"] if m else stem.removesuffix(".gguf")
    found = _QUANT.findall(stem.upper())
    if not found:
        return None
    label = found[-1]
    return "F16" if label == "FP16" else label


# -- where things are ------------------------------------------------------------


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")


def offline() -> bool:
    """HF_HUB_OFFLINE (read now, not when huggingface_hub was imported)."""
    return _env_true("HF_HUB_OFFLINE") or _env_true("TRANSFORMERS_OFFLINE")


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, as huggingface_hub finds it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def repo_cache_dir(repo: str) -> Path:
    return hub_cache_dir() / ("models--" + repo.replace("/", "--"))


def check_file_name(name, where: str) -> str:
    """``name`` if it is a repository file name as the Hub allows one: a relative POSIX
    path of plain parts (no ``..``, ``.``, empty part, backslash, control character or
    leading ``/``); else `DownloadError` naming it."""
    ok = isinstance(name, str) and 0 < len(name.encode("utf-8", "surrogatepass")) <= MAX_FILE_NAME
    if ok:
        parts = name.split("/")
        ok = all(p not in ("", ".", "..") for p in parts) and "\\" not in name and not any(
            ord(c) < 32 or ord(c) == 127 for c in name
        )
    if not ok:
        raise DownloadError(
            f"{where} lists a file named {str(name)[:200]!r}, which is not a repository path (it could name a place "
            f"outside the cache); nothing was written. Check HF_ENDPOINT ({endpoint()}): it should be the Hugging Face Hub"
        )
    return name


def check_revision(revision: str, where: str = "the revision") -> str:
    """A branch, tag or commit name usable as a file name under ``refs/`` (git's rules for
    ref names: no ``..``, no part starting with ``.``, no control characters or ``\\``)."""
    ok = isinstance(revision, str) and 0 < len(revision) <= 255
    if ok:
        parts = revision.split("/")
        ok = all(p and not p.startswith(".") and not p.endswith(".lock") for p in parts) and ".." not in revision
        ok = ok and not any(ord(c) < 32 or ord(c) == 127 or c in "\\~^:?*[" for c in revision)
    if not ok:
        raise ModelNotFound(f"{where} {str(revision)[:200]!r} is not a valid branch, tag or commit name")
    return revision


def _inside(root: Path, path: Path, what: str) -> Path:
    """``path`` if its folder stays under ``root`` once ``..`` and links are resolved (the
    file itself may be a link: snapshots link to blobs), else a DownloadError."""
    real_root = os.path.realpath(root)
    real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    if os.path.commonpath([real_root, real]) != real_root:
        raise DownloadError(f"{what} would be written outside the Hugging Face cache ({root}); nothing was written")
    return path


def _token() -> str | None:
    """The user's Hugging Face token (HF_TOKEN or `hf auth login`), if any. Never printed."""
    tok = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if tok:
        return tok.strip()
    try:
        from huggingface_hub import get_token
    except ImportError:
        return None
    try:
        return get_token()
    except Exception:  # a broken token file must not stop public downloads
        return None


# -- the repository at a revision --------------------------------------------------


@attrs.frozen
class RemoteFile:
    path: str
    size: int
    sha256: str | None  # LFS files
    blob_id: str  # git object id

    @property
    def etag(self) -> str:
        """The blob name in the cache (huggingface_hub's: the LFS SHA-256, else the git id)."""
        return self.sha256 or self.blob_id


@attrs.frozen
class RepoState:
    repo: str
    revision: str  # as asked ("main" by default)
    commit: str
    files: dict  # path -> RemoteFile (None values offline: size and checksum unknown)
    offline: bool = False


class Hub:
    """Talks to the Hub (HF_ENDPOINT) and writes its cache."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.endpoint = endpoint()
        self._token: str | None | bool = False  # False: not looked up yet

    @property
    def token(self) -> str | None:
        """Looked up on first use: finding `hf auth login`'s token imports huggingface_hub
        (half a second), which a run from the cache never needs."""
        if self._token is False:
            self._token = _token()
        return self._token

    def log(self, msg: str) -> None:
        if not self.quiet:
            print(f"cera: {msg}", file=sys.stderr, flush=True)

    # -- state ---------------------------------------------------------------------

    def state(self, repo: str, revision: str | None) -> RepoState:
        revision = check_revision(revision or "main")
        if offline():
            return self.cached_state(repo, revision, why="HF_HUB_OFFLINE is set")
        try:
            info = self._api_info(repo, revision)
        except _ApiError as e:
            status, code = e.status, e.code
            if code == "GatedRepo":
                raise ModelNotFound(
                    f"Hugging Face repo {repo!r} is gated: accept its terms on the Hub, then log in "
                    f"(`hf auth login` or HF_TOKEN)"
                ) from None
            if code == "RevisionNotFound":
                raise ModelNotFound(
                    f"Hugging Face repo {repo!r} has no revision {revision!r} (a branch, tag or commit); "
                    f"check the name after '@'"
                ) from None
            if code == "RepoNotFound" or status in (401, 404):
                how = "log in with `hf auth login` or set HF_TOKEN" if not self.token else "check that your token (HF_TOKEN or `hf auth login`) can read it"
                raise ModelNotFound(
                    f"Hugging Face repo {repo!r} was not found at {self.endpoint} (HTTP {status}): check the name; "
                    f"if it is private or gated, {how}"
                ) from None
            raise DownloadError(
                f"the Hugging Face Hub at {self.endpoint} answered HTTP {status} for {repo!r}; try again later, or {OFFLINE_HINT}"
            ) from None
        except DownloadError:
            raise
        except Exception as e:  # connection refused, DNS, timeout, TLS, proxy
            cached = ""
            try:
                self.cached_state(repo, revision, why="")
                cached = f" (the cache has {repo}@{revision}: HF_HUB_OFFLINE=1 uses it)"
            except ModelNotFound:
                pass
            raise DownloadError(
                f"cannot reach the Hugging Face Hub at {self.endpoint} for {repo!r} "
                f"({type(e).__name__}: {_short(e)}){cached}; {OFFLINE_HINT}"
            ) from None
        return _checked_state(repo, revision, info, self.endpoint)

    def _api_info(self, repo: str, revision: str):
        """The repository's info at a revision with every file's size and checksums (the
        API huggingface_hub's ``model_info(files_metadata=True)`` calls), read through the
        same http(s)-only opener as downloads, at most MAX_API_BYTES and API_TIMEOUT_S per
        read, within four times that in all."""
        q = urllib.parse.quote
        url = f"{self.endpoint}/api/models/{repo}/revision/{q(revision, safe='')}?blobs=true"
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise DownloadError(f"HF_ENDPOINT {self.endpoint!r} is not an http or https URL")
        headers = {"User-Agent": "cera", "Accept": "application/json", "Accept-Encoding": "identity"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(url, headers=headers)
        try:
            resp = _OPENER.open(req, timeout=API_TIMEOUT_S)
        except urllib.error.HTTPError as e:
            code = e.headers.get("X-Error-Code") if e.headers else None
            e.close()
            raise _ApiError(e.code, code) from None
        with resp:
            if resp.status != 200:
                raise _ApiError(resp.status, None)
            body = read_bounded(resp, MAX_API_BYTES, f"the Hub's answer about {repo}", deadline=time.monotonic() + 4 * API_TIMEOUT_S)
        try:
            data = json.loads(body)
        except ValueError:
            raise DownloadError(f"the Hub at {self.endpoint} answered about {repo!r} with something that is not JSON") from None
        return _Info.of(data, self.endpoint, repo)

    def cached_state(self, repo: str, revision: str, why: str) -> RepoState:
        """The repository as the cache has it (offline)."""
        check_revision(revision)
        storage = repo_cache_dir(repo)
        commit = revision if _COMMIT.match(revision) else None
        ref = storage / "refs" / revision
        if commit is None and ref.is_file():
            try:
                with open(ref, "rb") as f:
                    text = f.read(256).decode("ascii", "replace").strip()
            except OSError:
                text = ""
            commit = text if _COMMIT.match(text) else None
        snap = storage / "snapshots" / (commit or "-")
        if commit is None or not snap.is_dir():
            raise ModelNotFound(
                f"{why}, and {repo}@{revision} is not in the Hugging Face cache ({hub_cache_dir()}); "
                f"fetch it once with network access, or use a local file or a bundle"
            )
        files = {str(p.relative_to(snap)): None for p in sorted(snap.rglob("*")) if p.is_file()}
        return RepoState(repo, revision, commit, files, offline=True)

    # -- fetching -------------------------------------------------------------------

    def fetch(self, state: RepoState, names: list[str]) -> list[Path]:
        """Local paths of files of a repository at a revision, downloading what the cache lacks."""
        storage = repo_cache_dir(state.repo)
        if not _COMMIT.match(state.commit):
            raise DownloadError(f"the Hub named commit {state.commit[:100]!r} for {state.repo}, which is not a commit id")
        snap = storage / "snapshots" / state.commit
        out = []
        for name in names:
            pointer = _inside(snap, snap / check_file_name(name, f"{state.repo}@{state.commit[:12]}"),
                              f"{state.repo}/{name}")  # fmt: skip
            if state.offline:
                if name not in state.files or not pointer.exists():
                    raise ModelNotFound(f"HF_HUB_OFFLINE is set and {state.repo}/{name} is not in the cache ({storage})")
                out.append(pointer)
                continue
            rf = state.files.get(name)
            if rf is None:
                raise ModelNotFound(f"Hugging Face repo {state.repo}@{state.revision} has no file {name!r}")
            if not _ETAG.match(rf.etag):
                raise DownloadError(f"the Hub gave {state.repo}/{name} the checksum {rf.etag[:100]!r}, which is not one")
            blob = storage / "blobs" / rf.etag
            if not (pointer.exists() and blob.exists()):
                if not blob.exists():
                    self._download(state, rf, blob)
                _link(blob, pointer)
            out.append(pointer)
        if state.revision != state.commit:
            check_revision(state.revision)
            _write_atomic(_inside(storage / "refs", storage / "refs" / state.revision, f"ref {state.revision}"),
                          state.commit.encode())  # fmt: skip
        return out

    def _url(self, state: RepoState, name: str) -> str:
        q = urllib.parse.quote
        return f"{self.endpoint}/{state.repo}/resolve/{q(state.commit, safe='')}/{q(name)}"

    def _download(self, state: RepoState, rf: RemoteFile, blob: Path) -> None:
        """Download one file into ``blob``: resumable, verified, renamed into place last."""
        blob.parent.mkdir(parents=True, exist_ok=True)
        partial = blob.with_name(blob.name + ".cera-partial")
        have = partial.stat().st_size if partial.exists() else 0
        if have > rf.size:
            partial.unlink()
            have = 0
        need = rf.size - have
        free = shutil.disk_usage(blob.parent).free
        if need > free:
            raise DownloadError(
                f"{state.repo}/{rf.path} needs {_size(need)} more, but {blob.parent} has only {_size(free)} free; "
                f"free some space or point HF_HUB_CACHE at a larger disk"
            )
        digest = hashlib.sha256() if rf.sha256 else hashlib.sha1(b"blob %d\0" % rf.size)
        if have:
            with open(partial, "rb") as f:
                for chunk in iter(lambda: f.read(CHUNK), b""):
                    digest.update(chunk)
            self.log(f"resuming {rf.path} from {_size(have)} of {_size(rf.size)}")
        bar = _progress(rf.path, rf.size, have, self.quiet)
        try:
            attempts = 0
            while have < rf.size:
                try:
                    have = self._get(state, rf, partial, have, digest, bar)
                except _Restart:
                    partial.unlink(missing_ok=True)
                    have = 0
                    digest = hashlib.sha256() if rf.sha256 else hashlib.sha1(b"blob %d\0" % rf.size)
                    if bar is not None:
                        bar.reset(total=rf.size)
                    attempts += 1
                except _Cut as cut:
                    have = cut.have
                    attempts += 1
                    if attempts > RESUME_ATTEMPTS:
                        raise DownloadError(
                            f"downloading {state.repo}/{rf.path} was cut off {attempts} times, last at "
                            f"{_size(have)} of {_size(rf.size)} ({cut.reason}); the partial file stays in "
                            f"{partial.parent} and the next run resumes from it"
                        ) from None
                    time.sleep(min(0.2 * attempts, 1.0))
        finally:
            if bar is not None:
                bar.close()
        got = digest.hexdigest()
        want = rf.sha256 or rf.blob_id
        if got != want:
            partial.unlink(missing_ok=True)
            kind = "SHA-256" if rf.sha256 else "git blob id"
            raise DownloadError(
                f"{state.repo}/{rf.path}: downloaded {kind} {got} does not match the Hub's {want}; the file was "
                f"deleted, nothing was cached. Try again; if it persists, the file on the Hub or a proxy on the way "
                f"is damaging it"
            )
        os.replace(partial, blob)

    def _get(self, state: RepoState, rf: RemoteFile, partial: Path, have: int, digest, bar) -> int:
        """One GET from byte ``have`` on, appended to ``partial``. Returns the new size;
        raises _Cut when the connection ends early (the bytes received are kept)."""
        headers = {"User-Agent": "cera", "Accept-Encoding": "identity"}
        if have:
            headers["Range"] = f"bytes={have}-"
        try:
            resp = self._open(self._url(state, rf.path), headers)
        except _Cut as cut:
            raise _Cut(have, cut.reason) from None
        with resp:
            if have and resp.status == 200:  # the server ignored the range: start over
                raise _Restart()
            mode = "ab" if have else "wb"
            try:
                with open(partial, mode) as out:
                    while True:
                        try:
                            # never more than the listed size (plus one byte to tell a body
                            # that runs over): a lying or endless body stops here
                            chunk = resp.read(min(CHUNK, rf.size - have + 1))
                        except (OSError, _http_errors()) as e:
                            raise _Cut(have, _short(e)) from None
                        if not chunk:
                            break
                        if have + len(chunk) > rf.size:
                            partial.unlink(missing_ok=True)
                            raise DownloadError(
                                f"{state.repo}/{rf.path}: the server sent more than the {rf.size} bytes the Hub "
                                f"lists; the download was stopped there and deleted, nothing was cached"
                            )
                        out.write(chunk)
                        digest.update(chunk)
                        have += len(chunk)
                        if bar is not None:
                            bar.update(len(chunk))
            except OSError as e:
                if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                    partial.unlink(missing_ok=True)
                    raise DownloadError(
                        f"the disk filled up while downloading {state.repo}/{rf.path} into {partial.parent} "
                        f"({e.strerror}); the partial file was deleted. Free some space (it needs {_size(rf.size)}) "
                        f"or point HF_HUB_CACHE at a larger disk"
                    ) from None
                raise
        if have < rf.size:
            raise _Cut(have, "the connection closed early")
        return have

    def _open(self, url: str, headers: dict):
        """GET ``url``, following redirects by hand: the token goes to the Hub's own origin
        only, never to the storage host a file is redirected to."""
        origin = _origin(self.endpoint)
        for _ in range(MAX_REDIRECTS + 1):
            if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
                raise DownloadError(
                    f"the Hub redirected a download to {_strip_query(url)[:200]!r}; only http and https redirects are "
                    f"followed, nothing was read"
                )
            h = dict(headers)
            if self.token and _origin(url) == origin:
                h["Authorization"] = f"Bearer {self.token}"
            req = urllib.request.Request(url, headers=h)
            try:
                resp = _OPENER.open(req, timeout=READ_TIMEOUT_S)
            except urllib.error.HTTPError as e:
                if e.code in (301, 302, 303, 307, 308) and e.headers.get("Location"):
                    url = urllib.parse.urljoin(url, e.headers["Location"])
                    e.close()
                    continue
                e.close()
                if e.code in (401, 403, 404):
                    raise ModelNotFound(
                        f"the Hub answered HTTP {e.code} for {_strip_query(url)}: "
                        + ("log in (`hf auth login` or HF_TOKEN) if the repo is private or gated" if e.code != 404 else "no such file")
                    ) from None
                raise _Cut(0, f"HTTP {e.code}") from None
            except (urllib.error.URLError, OSError, _http_errors()) as e:
                raise _Cut(0, _short(e)) from None
            return resp
        raise DownloadError(f"too many redirects fetching {_strip_query(url)}")


def _checked_state(repo: str, revision: str, info, where: str) -> RepoState:
    """The repository state of an API answer, every name in it checked (file names, the
    commit, checksums, sizes) before any becomes a path."""
    commit = getattr(info, "sha", None)
    if not isinstance(commit, str) or not _COMMIT.match(commit):
        raise DownloadError(
            f"the Hub at {where} named commit {str(commit)[:100]!r} for {repo}@{revision}, which is not a commit id "
            f"(40 hexadecimal digits); nothing was written. Check HF_ENDPOINT"
        )
    files = {}
    for s in info.siblings or []:
        name = check_file_name(s.rfilename, f"the Hub at {where} for {repo}")
        lfs = s.lfs
        sha = (lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)) if lfs else None
        size = s.size or 0
        if not isinstance(size, int) or size < 0 or size > 1 << 50:
            raise DownloadError(f"the Hub at {where} lists {repo}/{name} with size {str(size)[:40]!r}; nothing was written")
        blob_id = s.blob_id or ""
        for value in (sha, blob_id):
            if value and not (isinstance(value, str) and _ETAG.match(value)):
                raise DownloadError(
                    f"the Hub at {where} gives {repo}/{name} the checksum {str(value)[:100]!r}, which is not a git id "
                    f"or a SHA-256; nothing was written"
                )
        files[name] = RemoteFile(name, size, sha, blob_id)
    return RepoState(repo, revision, commit, files)


class _ApiError(Exception):
    def __init__(self, status: int, code: str | None):
        super().__init__(status)
        self.status, self.code = status, code


@attrs.frozen
class _Sibling:
    rfilename: object
    size: object
    blob_id: object
    lfs: object


@attrs.frozen
class _Info:
    sha: object
    siblings: list

    @classmethod
    def of(cls, data, where: str, repo: str) -> _Info:
        if not isinstance(data, dict) or not isinstance(data.get("siblings", []), list):
            raise DownloadError(f"the Hub at {where} answered about {repo!r} with JSON of another shape")
        siblings = []
        for s in data.get("siblings") or []:
            if not isinstance(s, dict):
                raise DownloadError(f"the Hub at {where} lists a file of {repo!r} that is not an object")
            lfs = s.get("lfs")
            siblings.append(_Sibling(s.get("rfilename"), s.get("size"), s.get("blobId"), lfs if isinstance(lfs, dict) else None))
        return cls(data.get("sha"), siblings)


def read_bounded(resp, limit: int, what: str, deadline: float | None = None) -> bytes:
    """A response's body, refused (DownloadError) once it passes ``limit`` bytes or the
    ``deadline`` (time.monotonic) passes: a hostile server cannot fill memory or hold on."""
    parts, n = [], 0
    while True:
        chunk = resp.read(min(CHUNK, limit - n + 1))
        if not chunk:
            return b"".join(parts)
        n += len(chunk)
        if n > limit:
            raise DownloadError(f"{what} is larger than {_size(limit)}; it was not read further")
        if deadline is not None and time.monotonic() > deadline:
            raise DownloadError(f"{what} took too long to arrive; it was not read further")
        parts.append(chunk)


class _Cut(Exception):
    def __init__(self, have: int, reason: str):
        super().__init__(reason)
        self.have = have
        self.reason = reason


class _Restart(Exception):
    pass


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


# http(s) only: urllib's default opener also reads file: and ftp: URLs, and a redirect (or
# an endpoint) must never name a local file.
_OPENER = urllib.request.OpenerDirector()
for _handler in (urllib.request.ProxyHandler(), urllib.request.HTTPHandler(), urllib.request.HTTPSHandler(),
                 urllib.request.HTTPDefaultErrorHandler(), urllib.request.HTTPErrorProcessor(), _NoRedirect()):  # fmt: skip
    _OPENER.add_handler(_handler)


def _http_errors():
    import http.client

    return http.client.HTTPException


def _origin(url: str) -> tuple:
    u = urllib.parse.urlsplit(url)
    return (u.scheme, u.hostname, u.port)


def _strip_query(url: str) -> str:
    return url.split("?", 1)[0]


def _short(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return text if len(text) < 200 else text[:200] + "..."


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _progress(name: str, total: int, initial: int, quiet: bool):
    """A progress bar on stderr (tqdm, which huggingface_hub brings), or None."""
    if quiet or _env_true("HF_HUB_DISABLE_PROGRESS_BARS"):
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1000, desc=name,  # MB, as `cera pull` and `cera models` say sizes
                file=sys.stderr, leave=True, dynamic_ncols=True, mininterval=0.25)  # fmt: skip


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _link(blob: Path, pointer: Path) -> None:
    """snapshots/<commit>/<name> -> ../../blobs/<etag>, as huggingface_hub links them (a
    copy where symlinks are not allowed)."""
    pointer.parent.mkdir(parents=True, exist_ok=True)
    tmp = pointer.with_name(f".{pointer.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.symlink(os.path.relpath(blob, pointer.parent), tmp)
    except OSError:
        shutil.copyfile(blob, tmp)
    os.replace(tmp, pointer)


# -- choosing the file of a quant -------------------------------------------------------


def _models(ggufs: list[str]) -> dict[str, list[str]]:
    """Model files keyed by their first file; split parts grouped in order."""
    out: dict[str, list[str]] = {}
    for name in sorted(ggufs):
        if "mmproj" in os.path.basename(name).lower():
            continue  # vision projectors are companions, not models
        m = _SPLIT.match(name)
        if m:
            first = f"{m['stem']}-00001-of-{m['n']}.gguf"
            out.setdefault(first, []).append(name)
        else:
            out[name] = [name]
    return out


def choose(repo: str, ggufs: list[str], quant: str | None) -> list[str]:
    """The file (or split parts, in order) of the model to fetch."""
    models = _models(ggufs)
    by_quant: dict[str | None, list[str]] = {}
    for first in models:
        by_quant.setdefault(quant_label(first), []).append(first)
    labels = sorted(q for q in by_quant if q)

    def listing() -> str:
        items = [f"{q} ({', '.join(by_quant[q])})" for q in labels]
        items += [f"unlabelled: {f}" for f in by_quant.get(None, [])]
        return "; ".join(items) or "none"

    if quant:
        q = quant.upper()
        q = "F16" if q == "FP16" else q
        firsts = by_quant.get(q)
        if not firsts:
            # a file-name pattern, as `org/repo:PATTERN` meant before quant labels
            firsts = [f for f in models if quant.lower() in f.lower()]
        if not firsts:
            raise ModelNotFound(
                f"Hugging Face repo {repo!r} has no {quant} model file; it has: {listing()}. "
                f"Pick one with {repo}:QUANT"
            )
    else:
        if len(models) == 1:
            firsts = list(models)
        elif "Q4_K_M" in by_quant:
            firsts = by_quant["Q4_K_M"]
        else:
            raise ModelNotFound(
                f"Hugging Face repo {repo!r} has {len(models)} model files; pick a quant with {repo}:QUANT "
                f"(or --quant): {listing()}"
            )
    if len(firsts) > 1:
        raise ModelNotFound(f"Hugging Face repo {repo!r} has several {quant or ''} model files ({', '.join(firsts)}); "
                            f"name one with {repo}:PATTERN")  # fmt: skip
    parts = models[firsts[0]]
    m = _SPLIT.match(firsts[0])
    if m:
        n = int(m["n"])
        want = [f"{m['stem']}-{i:05d}-of-{m['n']}.gguf" for i in range(1, n + 1)]
        missing = sorted(set(want) - set(parts))
        if missing:
            raise ModelNotFound(f"Hugging Face repo {repo!r} lacks part(s) {', '.join(missing)} of a split model")
        parts = want
    return parts


def read_json(hub: Hub, state: RepoState, name: str) -> dict:
    path = hub.fetch(state, [name])[0]
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelNotFound(f"{state.repo}/{name}: not valid JSON ({e})") from None
