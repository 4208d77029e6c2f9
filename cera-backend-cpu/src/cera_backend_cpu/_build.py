"""cffi build script (API mode) for the C kernels: `cera_backend_cpu._cpu`.

setup.py names this file in ``cffi_modules``, so the extension is compiled when the
package is built or installed. The interface is declared once, in csrc/cera_cpu_api.h,
which is both the cdef and part of the C headers.

Flags: one portable build. No -march/-mcpu: each SIMD variant carries its own target
attributes and is chosen at run time (csrc/dispatch.c), so a wheel built on one machine
runs on another. -ffp-contract=off keeps the compiler from fusing multiply-adds where
we did not ask for them, which dequantization needs to stay bit-exact with the gguf
package's numpy code.

Run ``python -m cera_backend_cpu._build`` to compile in place (development).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
CSRC = HERE / "csrc"
SOURCES = [
    "quants.c",
    "kernels_scalar.c",
    "kernels_x86.c",
    "kernels_neon.c",
    "dispatch.c",
    "pool.c",
    "matmul.c",
    "gemm.c",
    "ops.c",
    "attention.c",
    "kvcache.c",
    "recurrent.c",
    "delta_net.c",
    "moe.c",
    "encoder.c",
    "plan.c",
    "bench.c",
]


def _compile_args() -> list[str]:
    if sys.platform == "win32":
        return ["/O2", "/fp:precise"]
    args = ["-O3", "-std=gnu11", "-ffp-contract=off", "-fno-math-errno", "-Wall", "-Wno-unused-function"]
    extra = os.environ.get("CERA_CPU_CFLAGS")  # e.g. "-g -fsanitize=address" while debugging
    if extra:
        args += extra.split()
    return args


def _relative(path: Path) -> str:
    # setuptools wants source paths relative to setup.py (the working directory of a
    # build); an in-place build (__main__ below) runs the compiler elsewhere and needs
    # absolute ones.
    if __name__ == "__main__":
        return str(path)
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


ffibuilder = FFI()
ffibuilder.cdef((CSRC / "cera_cpu_api.h").read_text())
ffibuilder.set_source(
    "cera_backend_cpu._cpu",
    '#include "cera_cpu.h"',
    sources=[_relative(CSRC / s) for s in SOURCES],
    include_dirs=[_relative(CSRC)],
    extra_compile_args=_compile_args(),
    libraries=[] if sys.platform == "win32" else ["m", "pthread"],
)

if __name__ == "__main__":
    # Development rebuild without pip: compile in a scratch folder, then put the module
    # next to this file (where an editable install looks for it).
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(prefix="cera-cpu-build-") as tmp:
        built = Path(ffibuilder.compile(tmpdir=tmp, verbose="-v" in sys.argv))
        for old in HERE.glob("_cpu.*.so"):
            old.unlink()
        shutil.copy2(built, HERE / built.name)
        print(f"built {HERE / built.name}")
