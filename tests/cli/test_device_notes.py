"""What `-v` and `-ngl` say about the backend `--device auto` chose, where the only GPU is
emulated on the CPU (lavapipe, as in CI): `-v` names the Vulkan backend passed over and why,
and the `-ngl` note agrees with `cera plugins` (which reports Vulkan usable)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def cera(*args):
    env = dict(os.environ)
    env.pop("CERA_PLUGINS", None)
    return subprocess.run([sys.executable, "-m", "cera_cli.main", *map(str, args)], capture_output=True, text=True,
                          timeout=600, env=env)  # fmt: skip


def software_vulkan() -> bool:
    r = cera("inspect", "-m", "smollm2-135m-instruct-q4_1", "--probe", "--json")
    if r.returncode != 0:
        return False
    for b in json.loads(r.stdout).get("backends", []):
        p = b.get("probe") or {}
        if b.get("name") == "vulkan" and p.get("usable") and p.get("software"):
            return True
    return False


@pytest.fixture(scope="module")
def lavapipe():
    if not software_vulkan():
        pytest.skip("no software-emulated Vulkan device here (apt-get install mesa-vulkan-drivers)")


def test_verbose_and_ngl_name_the_emulated_gpu_passed_over(lavapipe, smollm2_path):
    r = cera("run", "-m", smollm2_path, "-v", "-ngl", "99", "-n", "1", "--temp", "0", "Hi")
    assert r.returncode == 0, r.stderr
    assert "--device auto passed over vulkan:" in r.stderr and "software emulation" in r.stderr, r.stderr
    assert "no GPU backend" not in r.stderr
    assert "-ngl 99 has no effect" in r.stderr and "--device vulkan" in r.stderr
    plugins = cera("plugins")
    assert any(line.split()[:2] == ["vulkan", "usable"] for line in plugins.stdout.splitlines()), plugins.stdout
