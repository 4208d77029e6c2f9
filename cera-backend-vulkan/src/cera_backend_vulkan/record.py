"""Recording a list of dispatches into a compute pass, cheaply.

wgpu-py's `set_pipeline` / `set_bind_group` / `dispatch_workgroups` cost several
microseconds each from Python (argument checks, a cffi array per bind group, an error
check after every call): a decode step of a few hundred dispatches spent 1-2 ms there.
Here the pass is recorded with wgpu-native's own C functions, through the cffi library
wgpu-py loaded (the same handles wgpu-py's objects hold in ``._internal``):

- ``"c"``: one call per pass into `cera_backend_vulkan._record` (a small C helper that
  loops over arrays of handles and calls wgpu-native's functions through their pointers);
  there when the package was built with a C compiler (`_build.py`);
- ``"raw"``: the same calls made one by one from Python through cffi (no compiler needed);
- ``"wgpu"``: wgpu-py's methods (the reference).

``CERA_VULKAN_RECORD=c|raw|wgpu`` (the tuning's ``record``) picks one (default: the best
available). The handles
stay valid because the `Plan` keeps the wgpu-py objects they come from (pipelines, bind
groups) alive; the pass itself is begun, ended and finished through wgpu-py as before, so
its validation (at ``end``/``finish``) and error reporting are unchanged.
"""

from __future__ import annotations

import numpy as np

try:  # the optional C helper (see _build.py)
    from ._record import ffi as _cffi
    from ._record import lib as _clib
except ImportError:  # pragma: no cover - no compiler when the package was built
    _cffi = _clib = None

MODES = ("c", "raw", "wgpu")


def _native():
    from wgpu.backends.wgpu_native import ffi, lib

    return ffi, lib


def default_mode(want: str | None = None) -> str:
    """The recording mode: ``want`` (the tuning's ``record``, `MODES`), else the C helper
    where the package was built with it, else "raw"."""
    if want is None:
        return "c" if _clib is not None else "raw"
    if want == "c" and _clib is None:
        from .tuning import BadSwitch

        raise BadSwitch(
            "backend 'vulkan': CERA_VULKAN_RECORD='c': this install has no C recorder (the package was built "
            "without a C compiler); use raw or wgpu, or reinstall it with a compiler"
        )
    return want


class Plan:
    """The raw handles of a fixed list of (pipeline, bind group, (x, y) workgroups)
    dispatches, made once (per state: the bind groups name its buffers)."""

    def __init__(self, pipes, bgs, groups):
        ffi, lib = _native()
        self.keep = (list(pipes), list(bgs))  # keeps the handles below valid
        n = len(self.keep[1])
        self.n = n
        self.pipes = list(pipes)
        self.bgs = list(bgs)
        self.groups = [(int(x), int(y)) for x, y in groups]
        # raw: (pipeline handle or None when unchanged, bind group handle, x, y)
        raw, last = [], None
        for p, b, (x, y) in zip(self.pipes, self.bgs, self.groups, strict=True):
            raw.append((p._internal if p is not last else None, b._internal, x, y))
            last = p
        self.raw = raw
        if _clib is not None:

            def addr(h):
                return int(ffi.cast("uintptr_t", h))

            self._p = np.array([addr(r[0]) if r[0] is not None else 0 for r in raw], np.uint64)
            self._b = np.array([addr(r[1]) for r in raw], np.uint64)
            self._g = np.array([(r[2], r[3]) for r in raw], np.uint32).reshape(-1)
            self._cp = _cffi.cast("const uintptr_t *", _cffi.from_buffer(self._p))
            self._cb = _cffi.cast("const uintptr_t *", _cffi.from_buffer(self._b))
            self._cg = _cffi.cast("const uint32_t *", _cffi.from_buffer(self._g))
            fns = (
                "wgpuComputePassEncoderSetPipeline",
                "wgpuComputePassEncoderSetBindGroup",
                "wgpuComputePassEncoderDispatchWorkgroups",
            )
            self._fns = tuple(int(ffi.cast("uintptr_t", ffi.addressof(lib, f))) for f in fns)

    def record(self, cp, mode: str) -> None:
        """Record every dispatch into the (begun, not yet ended) wgpu-py compute pass cp."""
        if mode == "c" and _clib is not None:
            ffi, _ = _native()
            h = int(ffi.cast("uintptr_t", cp._internal))
            sp, sb, d = self._fns
            _clib.cera_record_pass(h, sp, sb, d, self.n, self._cp, self._cb, self._cg)
        elif mode == "wgpu":
            last = None
            for p, b, (x, y) in zip(self.pipes, self.bgs, self.groups, strict=True):
                if p is not last:
                    cp.set_pipeline(p)
                    last = p
                cp.set_bind_group(0, b)
                cp.dispatch_workgroups(x, y, 1)
        else:
            ffi, lib = _native()
            setp = lib.wgpuComputePassEncoderSetPipeline
            setb = lib.wgpuComputePassEncoderSetBindGroup
            disp = lib.wgpuComputePassEncoderDispatchWorkgroups
            null = ffi.NULL
            h = cp._internal
            for p, b, x, y in self.raw:
                if p is not None:
                    setp(h, p)
                setb(h, 0, b, 0, null)
                disp(h, x, y, 1)


__all__ = ["MODES", "Plan", "default_mode"]
