"""The compiled kernels (cffi module `cera_audio_kws._kws`), and how the rest uses them.

The C kernels compute the same integers as the numpy code (tests/audio_kws compare them),
faster: a network step is a few dozen tiny layers, where numpy's per-call cost dominates
(measured on a loaded 2-core machine: an okay_nabu step 259 us per-layer C calls against
2979 us numpy; the front end 2-4 ms per second of audio against 12-23 ms). When the extension is not built (an install without a C compiler), the
numpy code runs instead, with one warning saying so and how to build it.
"""

from __future__ import annotations

import os
import warnings

import numpy as np

try:
    from ._kws import ffi, lib
except ImportError as e:  # pragma: no cover - depends on the install
    ffi = lib = None
    _why = str(e)
else:
    _why = ""

_warned = False


def available(prefer: bool | None = None) -> bool:
    """Whether to use the C kernels: ``prefer`` None means when built (CERA_KWS_NUMPY=1 forces numpy)."""
    global _warned
    if prefer is False or os.environ.get("CERA_KWS_NUMPY") == "1":
        return False
    if lib is None:
        if prefer:
            from cera.errors import CeraError

            raise CeraError(f"cera-audio-kws's C kernels are not built ({_why}); reinstall it with a C compiler present")
        if not _warned:
            warnings.warn(
                f"cera-audio-kws runs its numpy code, about 10x slower: the C kernels are not built ({_why}); "
                f"reinstall cera-audio-kws with a C compiler present",
                RuntimeWarning,
                stacklevel=3,
            )
            _warned = True
        return False
    return True


def ptr(ctype: str, arr: np.ndarray):
    """A C pointer to a contiguous array's data (the caller keeps the array alive)."""
    if not arr.flags.c_contiguous:
        raise ValueError("the C kernels need contiguous arrays")
    return ffi.cast(ctype, arr.ctypes.data)
