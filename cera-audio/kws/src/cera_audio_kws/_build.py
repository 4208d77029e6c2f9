"""cffi build script (API mode) for the C kernels: `cera_audio_kws._kws`.

setup.py names this file in ``cffi_modules``, so the extension is compiled when the
package is built or installed; the interface is declared once, in csrc/kws_api.h (the
cdef and the C header). One portable build, no -march. Run ``python -m
cera_audio_kws._build`` to compile in place (development).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
CSRC = HERE / "csrc"


def _relative(path: Path) -> str:
    if __name__ == "__main__":
        return str(path)
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


ffibuilder = FFI()
ffibuilder.cdef((CSRC / "kws_api.h").read_text())
ffibuilder.set_source(
    "cera_audio_kws._kws",
    '#include "kws_api.h"',
    sources=[_relative(CSRC / "kws.c")],
    include_dirs=[_relative(CSRC)],
    extra_compile_args=["/O2"] if sys.platform == "win32" else ["-O3", "-std=gnu11", "-Wall", "-ffp-contract=off"],
    libraries=[] if sys.platform == "win32" else ["m"],
)

if __name__ == "__main__":
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        built = Path(ffibuilder.compile(tmpdir=tmp, verbose=False))
        shutil.copy(built, HERE / built.name)
        print(HERE / built.name)
