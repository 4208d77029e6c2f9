"""A local HTTP server speaking the parts of the Hugging Face Hub's API that clients use.

Tests point ``HF_ENDPOINT`` at it; nothing here talks to the real Hub. It serves what
`huggingface_hub` (and cera's own downloader) ask of the Hub:

- ``GET /api/models/{repo}[/revision/{rev}]``: repository info at a revision: the commit
  (``sha``), ``private``, and ``siblings`` with their sizes, git blob ids and, for LFS
  files, the LFS SHA-256;
- ``GET /api/models/{repo}/tree/{rev}[/{path}]``: the file listing (``list_repo_files``);
- ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: small files directly with their git ETag;
  LFS files by a redirect to ``/cdn/{sha256}`` carrying ``X-Repo-Commit``,
  ``X-Linked-Etag`` and ``X-Linked-Size``; the CDN answers range requests (206);
- errors as the Hub gives them: 401 for a private repository without the right token,
  404 with ``X-Error-Code`` ``RepoNotFound``, ``RevisionNotFound`` or ``EntryNotFound``.

Revisions are branches and tags naming commits; each commit is an immutable set of files.
Faults can be injected per file (a connection cut after N bytes, bytes that do not match
the advertised checksum), and every request is logged for the tests to inspect.

Run it alone with ``python tests/hub/hub_server.py DIR`` to serve each ``DIR/org/name/``
folder as a repository (its files on branch ``main``).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import attrs

# Files at least this large (or named like model files) are stored "in LFS", as the Hub does.
LFS_SUFFIXES = (".gguf", ".safetensors", ".bin", ".onnx")
LFS_MIN_SIZE = 10 * 1024 * 1024


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a file's contents (the Hub's ETag for non-LFS files)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@attrs.define
class Fault:
    """Misbehaviour for one file: ``cut_after`` ends the body after that many bytes (for
    the first ``times`` requests; -1: always); ``corrupt`` serves bytes other than the
    advertised ones (same size); ``redirect`` answers the file's URL with a 302 to that
    Location (any scheme); ``overrun`` sends that many bytes past the advertised
    Content-Length (-1: without end, until the client goes away)."""

    cut_after: int | None = None
    times: int = -1
    corrupt: bool = False
    redirect: str | None = None
    overrun: int = 0


@attrs.define
class _File:
    data: bytes
    sha256: str
    blob_id: str
    lfs: bool


@attrs.define
class _Repo:
    commits: dict[str, dict[str, _File]] = attrs.Factory(dict)
    refs: dict[str, str] = attrs.Factory(dict)  # branch or tag -> commit
    private: bool = False
    token: str | None = None


class HubServer:
    """The server; ``with HubServer() as hub:`` runs it on a free loopback port."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.repos: dict[str, _Repo] = {}
        self.faults: dict[tuple[str, str], Fault] = {}  # (repo, path) -> fault
        self.log: list[dict] = []
        self.overrun_sent = 0  # bytes sent past advertised lengths (Fault.overrun)
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), _handler_for(self))
        # The "CDN" that LFS downloads are redirected to listens on a port of its own: a
        # client treats a redirect to another origin as the Hub's redirect to its storage.
        self._cdn = ThreadingHTTPServer((host, 0), _handler_for(self))
        for h in (self._httpd, self._cdn):
            h.daemon_threads = True

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def cdn_url(self) -> str:
        host, port = self._cdn.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> HubServer:
        for h in (self._httpd, self._cdn):
            threading.Thread(target=h.serve_forever, name="hub-server", daemon=True).start()
        return self

    def stop(self) -> None:
        for h in (self._httpd, self._cdn):
            h.shutdown()
            h.server_close()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- content ---------------------------------------------------------------

    def add_commit(self, repo_id: str, files: dict, branch: str = "main", tags=(), private: bool = False,
                   token: str | None = None, parent: bool = False) -> str:  # fmt: skip
        """Commit ``files`` ({path: bytes or a Path}) to ``repo_id`` on ``branch``; returns
        the commit id. With ``parent`` the files are added to the branch's current ones."""
        repo = self.repos.setdefault(repo_id, _Repo())
        repo.private = private or repo.private
        repo.token = token or repo.token
        tree = dict(repo.commits[repo.refs[branch]]) if parent and branch in repo.refs else {}
        for path, content in files.items():
            data = Path(content).read_bytes() if isinstance(content, (str, Path)) else bytes(content)
            lfs = path.endswith(LFS_SUFFIXES) or len(data) >= LFS_MIN_SIZE
            tree[path] = _File(data, hashlib.sha256(data).hexdigest(), git_blob_sha1(data), lfs)
        h = hashlib.sha1(repo_id.encode() + str(len(repo.commits)).encode())
        for path in sorted(tree):
            h.update(path.encode() + b"\0" + tree[path].sha256.encode())
        commit = h.hexdigest()
        repo.commits[commit] = tree
        repo.refs[branch] = commit
        for tag in tags:
            repo.refs[tag] = commit
        return commit

    def fault(self, repo_id: str, path: str, **kwargs) -> Fault:
        f = Fault(**kwargs)
        self.faults[(repo_id, path)] = f
        return f

    def requests(self, kind: str | None = None) -> list[dict]:
        with self._lock:
            return [r for r in self.log if kind is None or r["kind"] == kind]

    # -- lookups used by the handler ---------------------------------------------

    def _tree(self, repo: _Repo, rev: str) -> tuple[str, dict[str, _File]] | None:
        commit = repo.refs.get(rev, rev)
        tree = repo.commits.get(commit)
        return (commit, tree) if tree is not None else None

    def _blob(self, sha256: str) -> tuple[str, str, _File] | None:
        for repo_id, repo in self.repos.items():
            for tree in repo.commits.values():
                for path, f in tree.items():
                    if f.sha256 == sha256:
                        return repo_id, path, f
        return None


_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/(?P<what>revision|tree)/(?P<rest>.+))?$")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
_CDN = re.compile(r"^/cdn/(?P<sha>[0-9a-f]{64})$")


def _handler_for(server: HubServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet: the tests read server.log instead
            pass

        def _record(self, kind: str, **extra) -> None:
            auth = self.headers.get("Authorization")
            with server._lock:
                server.log.append({
                    "kind": kind, "method": self.command, "path": self.path,
                    "range": self.headers.get("Range"), "authorization": auth, **extra,
                })  # fmt: skip

        def _send(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _error(self, status: int, code: str | None, message: str) -> None:
            headers = {"Content-Type": "application/json"}
            if code:
                headers["X-Error-Code"] = code
            headers["X-Error-Message"] = message
            self._send(status, json.dumps({"error": message}).encode(), headers)

        def _repo(self, repo_id: str) -> _Repo | None:
            repo = server.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", "Repository not found")
                return None
            if repo.private:
                auth = self.headers.get("Authorization", "")
                if auth != f"Bearer {repo.token}":
                    # The Hub answers 401 for a private repository without a valid token.
                    self._error(401, "RepoNotFound", "Invalid username or password.")
                    return None
            return repo

        def do_HEAD(self):
            self.do_GET()

        def do_GET(self):
            url = urlsplit(self.path)
            path = unquote(url.path)
            query = parse_qs(url.query)
            if m := _API.match(url.path):
                self._record("api")
                return self._api(unquote(m["repo"]), m["what"], unquote(m["rest"] or ""), query)
            if m := _RESOLVE.match(url.path):
                self._record("resolve")
                return self._resolve(unquote(m["repo"]), unquote(m["rev"]), unquote(m["path"]))
            if m := _CDN.match(path):
                self._record("cdn")
                return self._cdn(m["sha"])
            self._record("other")
            self._error(404, None, "Not found")

        def _api(self, repo_id, what, rest, query):
            repo = self._repo(repo_id)
            if repo is None:
                return
            if what == "tree":
                rev, _, sub = rest.partition("/")
                found = server._tree(repo, rev)
                if found is None:
                    return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
                _, tree = found
                recursive = query.get("recursive", ["false"])[0].lower() == "true"
                entries, dirs = [], set()
                prefix = sub.rstrip("/") + "/" if sub else ""
                for p in sorted(tree):
                    if not p.startswith(prefix):
                        continue
                    rel = p[len(prefix):]
                    if "/" in rel and not recursive:
                        dirs.add(prefix + rel.split("/", 1)[0])
                        continue
                    if recursive:
                        parts = rel.split("/")[:-1]
                        for i in range(1, len(parts) + 1):
                            dirs.add(prefix + "/".join(parts[:i]))
                    f = tree[p]
                    e = {"type": "file", "oid": f.blob_id, "size": len(f.data), "path": p}
                    if f.lfs:
                        e["lfs"] = {"oid": f.sha256, "size": len(f.data), "pointerSize": 134}
                    entries.append(e)
                entries = [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d} for d in sorted(dirs)] + entries
                return self._send(200, json.dumps(entries).encode(), {"Content-Type": "application/json"})
            rev = rest or "main"
            found = server._tree(repo, rev)
            if found is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            commit, tree = found
            siblings = []
            for p in sorted(tree):
                f = tree[p]
                s = {"rfilename": p}
                if "blobs" in query:
                    s.update({"size": len(f.data), "blobId": f.blob_id})
                    if f.lfs:
                        s["lfs"] = {"sha256": f.sha256, "size": len(f.data), "pointerSize": 134}
                siblings.append(s)
            info = {
                "_id": commit[:24], "id": repo_id, "modelId": repo_id, "sha": commit, "private": repo.private,
                "disabled": False, "gated": False, "downloads": 0, "likes": 0, "tags": ["gguf"],
                "lastModified": "2026-01-01T00:00:00.000Z", "createdAt": "2026-01-01T00:00:00.000Z",
                "siblings": siblings,
            }  # fmt: skip
            self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"})

        def _resolve(self, repo_id, rev, path):
            repo = self._repo(repo_id)
            if repo is None:
                return
            found = server._tree(repo, rev)
            if found is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            commit, tree = found
            f = tree.get(path)
            if f is None:
                return self._error(404, "EntryNotFound", f"{path} does not exist on {rev}")
            headers = {"X-Repo-Commit": commit, "Accept-Ranges": "bytes"}
            fault = server.faults.get((repo_id, path))
            if fault is not None and fault.redirect is not None:
                return self._send(302, b"", {**headers, "Location": fault.redirect})
            if f.lfs:
                headers.update({
                    "Location": f"{server.cdn_url}/cdn/{f.sha256}", "ETag": f'"{f.blob_id}"',
                    "X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(len(f.data)),
                })  # fmt: skip
                return self._send(302, b"", headers)
            headers["ETag"] = f'"{f.blob_id}"'
            self._body(f.data, headers, (repo_id, path))

        def _cdn(self, sha):
            found = server._blob(sha)
            if found is None:
                return self._error(404, None, "No such object")
            repo_id, path, f = found
            self._body(f.data, {"ETag": f'"{sha}"', "Accept-Ranges": "bytes"}, (repo_id, path))

        def _body(self, data: bytes, headers: dict, key) -> None:
            fault = server.faults.get(key)
            if fault is not None and fault.corrupt:
                data = bytes(b ^ 0x5A for b in data[:64]) + data[64:]
            start, end = 0, len(data)
            rng = self.headers.get("Range")
            status = 200
            if rng and (m := re.match(r"bytes=(\d+)-(\d*)$", rng)):
                start = int(m[1])
                end = int(m[2]) + 1 if m[2] else len(data)
                if start >= len(data):
                    return self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"})
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
            body = data[start:end]
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            overrun = fault.overrun if fault is not None else 0
            if overrun >= 0:  # an endless overrun sends no length: the body ends when the connection does
                self.send_header("Content-Length", str(len(body) + overrun))
            self.end_headers()
            if self.command == "HEAD":
                return
            cut = None
            if fault is not None and fault.cut_after is not None and fault.times != 0:
                cut = max(fault.cut_after - start, 0)
                if fault.times > 0:
                    fault.times -= 1
            if cut is not None and cut < len(body):
                self.wfile.write(body[:cut])
                self.wfile.flush()
                self.close_connection = True  # the client sees a short body
                return
            self.wfile.write(body)
            if fault is not None and fault.overrun:
                self.close_connection = True
                left, block = fault.overrun, b"\0" * 65536
                try:
                    while left:
                        n = len(block) if left < 0 else min(left, len(block))
                        self.wfile.write(block[:n])
                        with server._lock:
                            server.overrun_sent += n
                        left = left - n if left > 0 else -1
                except OSError:  # the client stopped reading
                    pass

    return Handler


def serve_folder(root: Path, server: HubServer) -> None:
    """Each ``root/org/name/`` folder becomes a repository with its files on ``main``."""
    for org in sorted(p for p in root.iterdir() if p.is_dir()):
        for repo in sorted(p for p in org.iterdir() if p.is_dir()):
            files = {str(f.relative_to(repo)): f for f in sorted(repo.rglob("*")) if f.is_file()}
            server.add_commit(f"{org.name}/{repo.name}", files)


def main(argv=None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="folder of org/name/ repositories")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    server = HubServer(port=args.port)
    serve_folder(args.root, server)
    print(f"HF_ENDPOINT={server.url}", flush=True)
    server.start()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()


def resolve_path(source, **kw) -> Path:
    """The GGUF path `cera.sources.resolve` gives for ``source`` (the tests of this server
    mostly check where a download lands)."""
    from cera.sources import resolve

    return resolve(source, **kw).path
