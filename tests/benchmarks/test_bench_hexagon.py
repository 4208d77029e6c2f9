"""benchmarks/bench_hexagon.py: its help, its one-line refusal off a Snapdragon, and its
reading of llama-bench's JSON. No speed is asserted."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_hexagon.py"


def test_help_works():
    r = subprocess.run([sys.executable, str(BENCH), "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--simulator" in r.stdout and "--llama-bench" in r.stdout


def test_off_device_it_refuses_in_one_line(monkeypatch):
    if platform.machine().lower() in ("aarch64", "arm64"):
        pytest.skip("an ARM64 machine may have a Hexagon NPU")
    env = {k: v for k, v in os.environ.items() if k != "CERA_HEXAGON_TARGET"}
    r = subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("bench_hexagon: cannot run here:") and "--simulator" in lines[0]


def test_llama_bench_json_is_read(monkeypatch):
    sys.path.insert(0, str(BENCH.parent))
    try:
        import bench_hexagon
    finally:
        sys.path.remove(str(BENCH.parent))
    rows = [{"n_prompt": 128, "n_gen": 0, "avg_ts": 410.5}, {"n_prompt": 0, "n_gen": 64, "avg_ts": 51.5}]

    class Done:
        stdout = json.dumps(rows)

    monkeypatch.setattr(bench_hexagon.subprocess, "run", lambda *a, **k: Done())
    args = bench_hexagon._args(["-m", "m.gguf", "--llama-bench", "llama-bench"])
    assert bench_hexagon._llama(args) == {"prompt_tok_s": 410.5, "gen_tok_s": 51.5}
