"""The cera plugin module of cera-backend-hexagon: registers the backend `hexagon` and the
``cera hexagon-compile`` command.

Imported by `cera plugins`, `cera --help` and backend selection, so it imports nothing
heavy (not onnxruntime): the availability check only looks for the packages, the machine
and the target, here (`target.py` adds the SoC table).
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
import platform
from pathlib import Path

import cera
from cera.errors import InvalidOptions

from .capabilities import OPS, TENSOR_TYPES

CERA_PLUGIN_API = ">=2,<3"
TARGETS = ("device", "simulator")
SIMULATOR_HINT = (
    "to run the same context binaries on QNN's x86-64 HTP simulator, set CERA_HEXAGON_TARGET=simulator "
    "(Linux x86-64 with onnxruntime-qnn installed)"
)


def target() -> str:
    raw = os.environ.get("CERA_HEXAGON_TARGET", "").strip().lower() or "device"
    if raw not in TARGETS:
        raise InvalidOptions(
            f"CERA_HEXAGON_TARGET={raw!r}: use 'device' (the NPU) or 'simulator' (QNN's x86-64 HTP simulator)"
        )
    return raw


def qnn_package_dir() -> Path | None:
    spec = importlib.util.find_spec("onnxruntime_qnn")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _has_fastrpc() -> bool:
    if ctypes.util.find_library("cdsprpc"):
        return True
    return any(
        Path(d, "libcdsprpc.so").exists()
        for d in ("/vendor/lib64", "/usr/lib", "/usr/lib/aarch64-linux-gnu", "/system/lib64")
    )


def unavailable_reason() -> str | None:
    """None where graphs can run (the NPU, or the simulator when asked for), else one line
    saying why not and what to do."""
    try:
        where = target()
    except InvalidOptions as e:
        return str(e)
    pkg = qnn_package_dir()
    if pkg is None or importlib.util.find_spec("onnx") is None:
        return "onnxruntime-qnn and onnx are not installed: pip install 'onnxruntime-qnn==2.7.0' 'onnx>=1.16'"
    machine = platform.machine().lower()
    if where == "simulator":
        if machine not in ("x86_64", "amd64") or platform.system() != "Linux":
            return f"QNN's HTP simulator ships for Linux x86-64 only, this is {platform.system()} {machine}; unset CERA_HEXAGON_TARGET"
        if not (pkg / "libQnnHtp.so").exists():
            return f"libQnnHtp.so is missing from {pkg}: reinstall onnxruntime-qnn"
        return None
    if platform.system() == "Windows" and machine == "arm64" and (pkg / "QnnHtp.dll").exists():
        return None  # Windows on Snapdragon: the wheel's QnnHtp.dll reaches the NPU through the system's driver
    if machine not in ("aarch64", "arm64") or not _has_fastrpc():
        return f"no Hexagon NPU here (this is a {machine} machine without Qualcomm's FastRPC runtime); {SIMULATOR_HINT}"
    return None


def _available() -> str | None:
    return unavailable_reason()


@cera.hookimpl
def cera_register_backends(register):
    register(
        cera.BackendSpec(
            name="hexagon",
            factory="cera_backend_hexagon.backend:HexagonBackend",
            tensor_types=TENSOR_TYPES,
            ops=OPS,
            priority=20,  # above the GPU and the CPU: on a Snapdragon the NPU wins under --device auto
            description="Qualcomm Hexagon NPUs (HTP) through QNN: float16 graphs compiled to cached context binaries",
            available=_available,
        )
    )


@cera.hookimpl
def cera_register_commands(register):
    import click

    @click.command("hexagon-compile")
    @click.option("-m", "--model", "model", required=True, help="a GGUF file (or anything `cera run -m` takes)")
    @click.option(
        "--soc", default=None, help="SM8650 (8 Gen 3, the default), SM8550, SM8750, ... or a QNN soc_model number"
    )
    @click.option(
        "--ctx", "n_ctx", type=int, default=512, show_default=True, help="context cells the graphs are built for"
    )
    @click.option(
        "--prompt-tokens", default="", help="prompt lengths to build prompt graphs for, comma-separated (e.g. 16,64)"
    )
    @click.option("--json", "as_json", is_flag=True, help="print what was built as JSON")
    def hexagon_compile(**options):
        """Compile a model's Hexagon (QNN HTP) context binaries for a SoC, ahead of time."""
        from .commands import hexagon_compile as run

        run(**options)

    register(hexagon_compile)
