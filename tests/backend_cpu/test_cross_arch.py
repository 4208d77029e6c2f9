"""The C kernels as a plain C program (c/variants_vs_scalar.c): every usable SIMD variant
against the scalar path, built natively and, where a cross compiler and qemu-user are
installed, for ARM64 (NEON with dotprod) run under emulation, with and without the
dot-product extension (without it, run-time dispatch must fall back to scalar).

Install the cross tools on Debian/Ubuntu with: apt-get install gcc-aarch64-linux-gnu qemu-user
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "c" / "variants_vs_scalar.c"


def _csrc() -> Path:
    import cera_backend_cpu

    src = Path(cera_backend_cpu.__file__).resolve().parent / "csrc"
    if not src.is_dir():
        pytest.skip("the C sources are not installed with this copy of cera-backend-cpu (use a source checkout)")
    return src


def _build(cc: str, out: Path) -> None:
    from cera_backend_cpu._build import SOURCES

    src = _csrc()
    cmd = [cc, "-O2", "-std=gnu11", "-ffp-contract=off", f"-I{src}", "-o", str(out), str(HARNESS)]
    cmd += [str(src / s) for s in SOURCES] + ["-lm", "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.mark.slow  # compiles every variant (15-20 s); the Python tests cover the gcc build already
@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_native_variants_in_c(tmp_path, compiler):
    """Both compilers a wheel may be built with: the target pragmas differ between them."""
    cc = shutil.which(compiler)
    if cc is None:
        pytest.skip(f"{compiler} is not installed")
    exe = tmp_path / "vvs"
    _build(cc, exe)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "\nok" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.skipif(
    not (shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64")),
    reason="needs gcc-aarch64-linux-gnu and qemu-user (apt-get install gcc-aarch64-linux-gnu qemu-user)",
)
def test_arm64_neon_under_qemu(tmp_path):
    exe = tmp_path / "vvs_arm64"
    _build("aarch64-linux-gnu-gcc", exe)
    sysroot = "/usr/aarch64-linux-gnu"
    run = ["qemu-aarch64", "-L", sysroot]
    proc = subprocess.run([*run, "-cpu", "max", str(exe)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "best: neon" in proc.stdout and proc.stdout.strip().endswith("ok neon"), proc.stdout
    # a core without the dot-product extension (Cortex-A53): dispatch must choose scalar
    proc = subprocess.run([*run, "-cpu", "cortex-a53", str(exe)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "neon_dotprod=0" in proc.stdout and "best: scalar" in proc.stdout, proc.stdout
