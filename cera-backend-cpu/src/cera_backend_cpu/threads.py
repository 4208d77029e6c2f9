"""How many threads the CPU backend uses by default: the physical cores we may run on.

Hyper-threads share a core's execution units; the kernels are limited by memory
bandwidth and SIMD throughput, so a second thread per core adds contention, not speed
(llama.cpp makes the same choice). Only CPUs in this process's affinity mask count.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _allowed_cpus() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def physical_cores() -> int:
    """Physical cores available to this process (at least 1)."""
    allowed = _allowed_cpus()
    if sys.platform.startswith("linux"):
        cores = set()
        for cpu in sorted(allowed) if allowed is not None else range(os.cpu_count() or 1):
            topo = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
            try:
                package = (topo / "physical_package_id").read_text().strip()
                core = (topo / "core_id").read_text().strip()
            except OSError:
                cores = set()
                break
            cores.add((package, core))
        if cores:
            return len(cores)
    elif sys.platform == "darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "hw.perflevel0.physicalcpu"], capture_output=True, text=True, timeout=5
            )
            if out.returncode != 0 or not out.stdout.strip():
                out = subprocess.run(["sysctl", "-n", "hw.physicalcpu"], capture_output=True, text=True, timeout=5)
            n = int(out.stdout.strip())
            if n > 0:
                return n
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
    n = len(allowed) if allowed else (os.cpu_count() or 1)
    return max(1, n)
