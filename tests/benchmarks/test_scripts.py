"""Every maintained benchmark script answers `--help` quickly and has its entry in
benchmarks/README.md; every experiment is listed there too. No benchmark is run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
README = (BENCH / "README.md").read_text()
HELP_SECONDS = 30  # generous for a shared 2-core machine; an answer takes 1-3 s when quiet


def _is_script(path: Path) -> bool:
    return path.suffix == ".sh" or "__main__" in path.read_text()


MAINTAINED = sorted(p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh") and _is_script(p))
MODULES = sorted(p.name for p in BENCH.glob("*.py") if not _is_script(p))
EXPERIMENTS = sorted(p.name for p in (BENCH / "experiments").iterdir() if p.suffix in (".py", ".sh"))


def test_the_folder_is_as_the_readme_says():
    assert "bench_models.py" in MAINTAINED and "gpu_vulkan.sh" in MAINTAINED
    assert set(MODULES) == {"bench_models_cli.py", "bench_models_engines.py", "bench_models_memory.py", "bench_models_overhead.py"}
    assert not [n for n in MAINTAINED if n.startswith("vulkan_") and "sweep" in n]  # studies live in experiments/


@pytest.mark.parametrize("name", MAINTAINED)
def test_maintained_script_has_a_readme_entry(name):
    # its own heading (what it measures, how to run it) and its line in the table of scripts
    assert re.search(rf"^### .*`?{re.escape(name)}`?", README, re.M), f"no '### {name}' section in benchmarks/README.md"
    assert re.search(rf"^\| \[`{re.escape(name)}`\]", README, re.M), f"{name} missing from the table of scripts"


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_is_listed(name):
    assert f"`experiments/{name}`" in README


@pytest.mark.parametrize("name", MAINTAINED)
def test_maintained_script_answers_help(name):
    path = BENCH / name
    cmd = ["bash", str(path), "--help"] if path.suffix == ".sh" else [sys.executable, str(path), "--help"]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=BENCH.parent, capture_output=True, text=True, timeout=HELP_SECONDS * 2, env=env)
    took = time.monotonic() - t0
    assert r.returncode == 0, f"{name} --help exited {r.returncode}:\n{r.stderr[-2000:]}"
    assert len(r.stdout.strip().splitlines()) >= 3, f"{name} --help printed almost nothing: {r.stdout!r}"
    if path.suffix == ".py":
        assert r.stdout.lstrip().lower().startswith("usage:"), r.stdout[:200]
    assert took < HELP_SECONDS, f"{name} --help took {took:.1f} s"
