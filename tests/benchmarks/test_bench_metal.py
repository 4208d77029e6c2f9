"""benchmarks/bench_metal.py without a Mac: its help runs, its arguments parse, and it
refuses clearly where there is no Apple GPU unless CERA_METAL_DEVICE=cpu asks for MLX's CPU
device. No speed is asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_metal.py"


def _run(*args, env_device=None):
    env = {k: v for k, v in os.environ.items() if k != "CERA_METAL_DEVICE"}
    if env_device:
        env["CERA_METAL_DEVICE"] = env_device
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=120)


def test_help_runs():
    r = _run("--help")
    assert r.returncode == 0 and "mlx-lm" in r.stdout and "--mlx-model" in r.stdout


@pytest.mark.skipif(sys.platform == "darwin", reason="a Mac runs it")
def test_it_refuses_without_an_apple_gpu():
    r = _run("--tests", "tg2")
    assert r.returncode == 2
    assert "measures Apple GPUs" in r.stderr and "CERA_METAL_DEVICE=cpu" in r.stderr


def test_arguments(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    import bench_metal

    args = bench_metal.parse_args(["--model", "a.gguf", "--mlx-model", "a.gguf=org/a-4bit", "--tests", "pp8,tg4",
                                   "--engines", "cera,mlx-lm"])  # fmt: skip
    assert args.models == ["a.gguf"] and args.mlx_pairs["a.gguf"] == "org/a-4bit"
    assert [t.name for t in args.tests] == ["pp8", "tg4"] and args.engines == ["cera", "mlx-lm"]
    with pytest.raises(SystemExit):
        bench_metal.parse_args(["--engines", "cuda"])
    with pytest.raises(SystemExit):
        bench_metal.parse_args(["--mlx-model", "no-equals-sign"])
