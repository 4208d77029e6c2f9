"""cffi build script (API mode) for `cera_backend_vulkan._record`: one C function that
records a whole list of dispatches into a compute pass (the loop of `record.py`), so a
token's pass costs one call from Python instead of two or three per dispatch.

The helper links nothing: it calls wgpu-native's own functions through the pointers the
caller passes (taken from the library wgpu-py loaded), so it needs no wgpu header or
library at build time. It is optional: setup.py builds it when a C compiler is there,
and without it the backend records with raw cffi calls from Python (record.py).

Run ``python -m cera_backend_vulkan._build`` to compile in place (development).
"""

from __future__ import annotations

import sys
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent

CDEF = """
void cera_record_pass(uintptr_t pass, uintptr_t set_pipeline, uintptr_t set_bind_group, uintptr_t dispatch,
                      size_t n, const uintptr_t *pipelines, const uintptr_t *bind_groups, const uint32_t *groups);
"""

SOURCE = r"""
#include <stddef.h>
#include <stdint.h>

typedef void (*set_pipeline_fn)(void *pass, void *pipeline);
typedef void (*set_bind_group_fn)(void *pass, uint32_t index, void *group, size_t n_offsets, const uint32_t *offsets);
typedef void (*dispatch_fn)(void *pass, uint32_t x, uint32_t y, uint32_t z);

/* pipelines[i] == 0: dispatch i keeps the previous dispatch's pipeline;
   groups: x, y per dispatch */
void cera_record_pass(uintptr_t pass, uintptr_t set_pipeline, uintptr_t set_bind_group, uintptr_t dispatch,
                      size_t n, const uintptr_t *pipelines, const uintptr_t *bind_groups, const uint32_t *groups)
{
    set_pipeline_fn sp = (set_pipeline_fn)set_pipeline;
    set_bind_group_fn sb = (set_bind_group_fn)set_bind_group;
    dispatch_fn d = (dispatch_fn)dispatch;
    void *p = (void *)pass;
    for (size_t i = 0; i < n; i++) {
        if (pipelines[i])
            sp(p, (void *)pipelines[i]);
        sb(p, 0, (void *)bind_groups[i], 0, NULL);
        d(p, groups[2 * i], groups[2 * i + 1], 1);
    }
}
"""

ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source(
    "cera_backend_vulkan._record",
    SOURCE,
    extra_compile_args=["/O2"] if sys.platform == "win32" else ["-O2"],
)

if __name__ == "__main__":
    # Development rebuild without pip: compile in a scratch folder, then put the module
    # next to this file (where an editable install looks for it).
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(prefix="cera-vulkan-build-") as tmp:
        built = Path(ffibuilder.compile(tmpdir=tmp, verbose="-v" in sys.argv))
        for old in HERE.glob("_record.*.so"):
            old.unlink()
        shutil.copy2(built, HERE / built.name)
        print(f"built {HERE / built.name}")
