"""onnxruntime's QNN execution provider (the ``onnxruntime-qnn`` plugin) on the HTP.

`compile_context` compiles an ONNX graph for one SoC with CPU fallback off and writes the
result as an HTP context binary (an EPContext ONNX file that names a ``*_qnn.bin``);
`load_context` opens such a pair. On x86-64 the same ``libQnnHtp.so`` runs the graphs on
QNN's HTP simulator; on a Snapdragon it runs them on the NPU.

When QNN refuses a node, onnxruntime logs ``Unsupported nodes in QNN EP: { name: ..., type:
... }`` on stderr and then fails with a message that names nothing, so compiling watches
stderr and turns the node names back into cera ops (`cera_backend_hexagon.lower.cera_op_of`).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import threading
import time
from pathlib import Path

from cera.errors import BackendUnavailable, UnsupportedOperation

from .lower import cera_op_of
from .target import Soc

_lock = threading.Lock()
_registered = False
EP = "QNNExecutionProvider"


def _ort():
    global _registered
    import onnxruntime as ort
    import onnxruntime_qnn

    with _lock:
        if not _registered:
            with tempfile.TemporaryDirectory(prefix="cera-hexagon-log-") as tmp:
                log = Path(tmp) / "load.log"
                try:
                    with _stderr_to(log):
                        ort.register_execution_provider_library(EP, onnxruntime_qnn.get_library_path())
                except Exception as e:  # noqa: BLE001 - registered already by another user of the process
                    if "already" not in str(e).lower():
                        raise BackendUnavailable(
                            f"backend 'hexagon': onnxruntime could not load the QNN execution provider: {e}"
                        ) from None
                _pass_on(log)
            _registered = True
    return ort, onnxruntime_qnn


def _pass_on(log: Path) -> None:
    """Copy what a library printed while loading to stderr, less QNN's note that its
    thread-local configuration file is absent (printed on every load, meaning nothing)."""
    import sys

    text = log.read_text(errors="replace") if log.exists() else ""
    kept = [ln for ln in text.splitlines() if ln.strip() and "LIBNATIVE" not in ln]
    if kept:
        print("\n".join(kept), file=sys.stderr)


def provider_options(soc: Soc, profile: Path | None = None) -> dict[str, str]:
    _, oq = _ort()
    opts = {
        "backend_path": oq.get_qnn_htp_path(),
        "soc_model": str(soc.soc_model),
        "htp_arch": str(soc.htp_arch),
        "enable_htp_fp16_precision": "1",
        "htp_performance_mode": "burst",
    }
    if profile is not None:  # QNN's per-run events, with the HTP's cycle count, as CSV
        opts.update(profiling_level="detailed", profiling_file_path=str(profile))
    return opts


def cycles(profile: Path) -> list[int]:
    """The HTP cycles of each run QNN's profile recorded (its "Accelerator (execute) time
    (cycles)" events; on the simulator, the simulator's count)."""
    out = []
    try:
        text = profile.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) >= 7 and parts[3] == "CYCLES" and parts[6].startswith("Accelerator (execute) time"):
            out.append(int(parts[2]))
    return out


def _session_options(soc: Soc, extra: dict[str, str] | None = None, profile: Path | None = None):
    ort, _ = _ort()
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.log_severity_level = 2  # errors and warnings reach stderr, where compile_context reads them
    for k, v in (extra or {}).items():
        so.add_session_config_entry(k, v)
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP]
    if not devices:
        raise BackendUnavailable("backend 'hexagon': the QNN execution provider lists no device")
    so.add_provider_for_devices([devices[0]], provider_options(soc, profile))
    return so


@contextlib.contextmanager
def _stderr_to(path: Path):
    """Point file descriptor 2 at ``path`` (onnxruntime's C++ logger writes there) and
    descriptor 1 at a file beside it: QNN's HTP library prints a note on stdout when it loads
    ("LIBNATIVE: No alternate configuration ..."), which must not mix with generated text.
    What else reaches stdout is passed on."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    out_path = path.with_suffix(".stdout")
    saved = {1: os.dup(1), 2: os.dup(2)}
    for fd_no, target_path in ((1, out_path), (2, path)):
        fd = os.open(target_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, fd_no)
        os.close(fd)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd_no, fd in saved.items():
            os.dup2(fd, fd_no)
            os.close(fd)
        text = out_path.read_text(errors="replace") if out_path.exists() else ""
        kept = [ln for ln in text.splitlines() if ln.strip() and "LIBNATIVE" not in ln]
        if kept:
            print("\n".join(kept), flush=True)


_UNSUPPORTED = re.compile(r"name:\s*([^,}]*?)\s*,\s*type:\s*([A-Za-z0-9_]+)")


def refused_ops(log: str) -> list[str]:
    """The cera ops behind the nodes QNN listed as unsupported in onnxruntime's log."""
    found = []
    for line in log.splitlines():
        if "Unsupported nodes in QNN EP" in line:
            for name, op_type in _UNSUPPORTED.findall(line):
                item = f"{cera_op_of(name)} as ONNX {op_type}" if name else f"ONNX {op_type}"
                if item not in found:
                    found.append(item)
    return found


def _open(model, soc: Soc, extra: dict[str, str] | None, what: str, profile: Path | None = None):
    ort, _ = _ort()
    so = _session_options(soc, extra, profile)
    with tempfile.TemporaryDirectory(prefix="cera-hexagon-log-") as tmp:
        log_path = Path(tmp) / "ort.log"
        try:
            with _stderr_to(log_path):
                return ort.InferenceSession(model, so)
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
            log = log_path.read_text(errors="replace") if log_path.exists() else ""
            ops = refused_ops(log)
            if ops:
                raise UnsupportedOperation(
                    f"backend 'hexagon': QNN's HTP ({soc.name}, v{soc.htp_arch}) cannot compile {what}: it refuses "
                    f"{'; '.join(ops)} (CPU fallback is off); run this model on another backend"
                ) from None
            last = [ln for ln in log.splitlines() if "[E:" in ln][-1:] or [str(e)]
            raise UnsupportedOperation(
                f"backend 'hexagon': QNN's HTP ({soc.name}, v{soc.htp_arch}) failed to compile {what}: {last[0][-400:]}"
            ) from None


def compile_context(model, out_dir: Path, soc: Soc, what: str, profile: Path | None = None) -> tuple[object, float]:
    """Compile for ``soc`` and write ``graph_ctx.onnx`` + its ``*_qnn.bin`` in ``out_dir``;
    returns the (usable) session and the seconds compiling took."""
    out_dir.mkdir(parents=True, exist_ok=True)
    extra = {
        "ep.context_enable": "1",
        "ep.context_file_path": str(out_dir / "graph_ctx.onnx"),
        "ep.context_embed_mode": "0",
    }
    t0 = time.perf_counter()
    session = _open(model, soc, extra, what, profile)
    return session, time.perf_counter() - t0


def load_context(ctx_path: Path, soc: Soc, what: str, profile: Path | None = None):
    return _open(str(ctx_path), soc, None, what, profile)
