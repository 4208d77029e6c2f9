"""How long `cera --help` takes with a plugin installed that sleeps at import (a
plugin taking 5 s to import must not make the help take 5 s).

A throwaway distribution whose plugin module sleeps ``--sleep`` seconds before it
registers a command is put on PYTHONPATH; `cera --help` (the installed console script)
runs ``--runs`` times with it and without it, and the whole process's wall time is
reported (what someone at a terminal waits for, interpreter start and exit included).

    python benchmarks/bench_help_slow_plugin.py --runs 15 --sleep 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

PLUGIN = """\
import time
time.sleep({sleep})

import click
import cera

CERA_PLUGIN_API = ">=2,<3"


@click.command()
def hello():
    "Say hello (a plugin that is slow to import)."


@cera.hookimpl
def cera_register_commands(register):
    register(hello)
"""


def make_site(root: Path, sleep: float) -> Path:
    site = root / "site"
    site.mkdir()
    (site / "bench_sleepy_plugin.py").write_text(PLUGIN.format(sleep=sleep))
    info = site / "bench_sleepy_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bench-sleepy-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[cera]\nsleepy = bench_sleepy_plugin\n")
    return site


def time_help(cera_exe: str, site: Path | None, runs: int) -> tuple[list[float], str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CERA_PLUGINS", "CERA_PLUGIN_OVERRIDES")}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
    times, out = [], ""
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run([cera_exe, "--help"], capture_output=True, text=True, env=env, timeout=120)
        times.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            sys.exit(f"cera --help failed: {proc.stderr}")
        out = proc.stdout
    return times, out


def describe(label: str, times: list[float]) -> str:
    return (
        f"{label}: median {statistics.median(times):.3f} s, min {min(times):.3f} s, max {max(times):.3f} s "
        f"({len(times)} runs)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--sleep", type=float, default=5.0, help="seconds the plugin sleeps at import")
    args = ap.parse_args()
    cera_exe = shutil.which("cera")
    if cera_exe is None:
        sys.exit("the `cera` command is not on PATH: activate the environment cera is installed in")
    with tempfile.TemporaryDirectory() as tmp:
        site = make_site(Path(tmp), args.sleep)
        time_help(cera_exe, None, 2)  # warm the file cache
        base, _ = time_help(cera_exe, None, args.runs)
        slow, out = time_help(cera_exe, site, args.runs)
    print(describe("cera --help, no extra plugin", base))
    print(describe(f"cera --help, a plugin sleeping {args.sleep:g} s at import", slow))
    note = " ".join(line.strip() for line in out.splitlines() if "Not listed" in line or "still importing" in line)
    print(textwrap.fill(f"help's note: {note or '(none: the plugin was listed)'}", 100))


if __name__ == "__main__":
    main()
