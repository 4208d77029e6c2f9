"""TurboQuant KV rows on the CPU: the kernels take the rotation of each row length from
cera.kv_turboquant (one source of the format), registered once."""

from __future__ import annotations

from cera import kv_turboquant
from cera.errors import UnsupportedOperation
from cera.kv_types import TURBOQUANT_BITS

from ._native import ffi, lib

_registered: set[int] = set()


def register_dim(dim: int) -> None:
    if dim in _registered:
        return
    rot = kv_turboquant.rotation(dim)  # cached for the process: the kernels keep the pointer
    rc = lib.cera_tq_register(dim, ffi.from_buffer("float[]", rot))
    if rc != 0:
        raise UnsupportedOperation(
            f"the CPU kernels cannot take TurboQuant rows of {dim} numbers (at most 16 row lengths of up to 4096, "
            f"multiples of 8); use kv_type q8_0 or f16"
        )
    _registered.add(dim)


def register_state(state) -> None:
    """Make the rotations of every attention layer of ``state`` known to the kernels."""
    if getattr(state, "kv_type", None) not in TURBOQUANT_BITS:
        return
    for d in state.decls:
        if d.kind == "kv":
            register_dim(d.k_dim)
            register_dim(d.v_dim)
