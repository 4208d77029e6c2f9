"""Which kernel variants the CPU tests check (a module of its own: test files import it by
name, which `from conftest import` cannot do reliably when several test folders are collected)."""

from __future__ import annotations

import os


def simd_variants() -> list[str]:
    """The SIMD variants to check against scalar: all this CPU runs, or the forced one."""
    from cera_backend_cpu._native import usable_variants

    forced = os.environ.get("CERA_CPU_VARIANT", "").strip()
    names = [forced] if forced and forced != "auto" else usable_variants()
    return [v for v in names if v != "scalar"]
