"""Choosing the Metal backend, and what it says about itself.

- Without Metal (Linux), ``--device auto`` never picks it: without CERA_METAL_DEVICE it
  is passed over with the reason (no Metal device, and how to use MLX's CPU device); with
  CERA_METAL_DEVICE=cpu it is passed over as a device that computes on the CPU.
- ``--device metal`` uses MLX's CPU device where CERA_METAL_DEVICE=cpu, and refuses with
  the reason otherwise; a file with a type it lacks is refused naming the tensor.
- `cera plugins --json` and `cera inspect --probe` report the device, its memory and
  which types run how; listing plugins imports no MLX.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata

import numpy as np
import pytest

from .conftest import needs_mlx

ON_MAC = sys.platform == "darwin"


def _env(**changes):
    env = dict(os.environ)
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def test_entry_point_and_registration():
    from cera.plugins.manager import PluginManager

    eps = [ep for ep in metadata.distribution("cera-backend-metal").entry_points if ep.group == "cera"]
    assert [(ep.name, ep.value) for ep in eps] == [("metal", "cera_backend_metal.plugin")]
    import cera_backend_metal.plugin as plugin
    from cera_backend_metal.capabilities import OPS, TENSOR_TYPES

    m = PluginManager(allow=set())
    record = m.register_plugin(plugin, "metal", "cera-backend-metal")
    assert (record.status, record.backends) == ("ok", ["metal"])
    spec = m.backend_spec("metal")
    assert set(spec.tensor_types) == set(TENSOR_TYPES) and set(spec.ops) == set(OPS)
    assert not spec.placeholder


def test_listing_it_does_not_import_mlx():
    code = (
        "import sys, cera_backend_metal.plugin as p; p.cera_register_backends(lambda s: (s.available(), s.details())); "
        "sys.exit(1 if any(m == 'mlx' or m.startswith('mlx.') for m in sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


AUTO = """
import json, sys, cera
loaded = cera.load(sys.argv[1], quiet=True)
print(json.dumps({"backend": loaded.backend.name, "notes": loaded.backend_notes}))
"""


@needs_mlx
@pytest.mark.skipif(ON_MAC, reason="a Mac may have Metal")
@pytest.mark.parametrize("device_env", [None, "cpu"], ids=["unset", "cpu"])
def test_auto_never_picks_it_without_metal(smollm2_path, device_env):
    r = subprocess.run([sys.executable, "-c", AUTO, str(smollm2_path)], capture_output=True, text=True,
                       env=_env(CERA_METAL_DEVICE=device_env))  # fmt: skip
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["backend"] != "metal"
    metal_notes = [n for n in got["notes"] if n.startswith("metal:")]
    if device_env is None:  # passed over, saying why and what to do
        assert metal_notes and "no Metal device" in metal_notes[0] and "CERA_METAL_DEVICE=cpu" in metal_notes[0]
    else:  # MLX's CPU device: passed over as a device that computes on the CPU, silently
        assert not metal_notes


@needs_mlx
@pytest.mark.skipif(ON_MAC, reason="a Mac may have Metal")
def test_asked_for_by_name_without_metal_it_refuses_with_the_way_out(smollm2_path):
    code = "import sys, cera; cera.load(sys.argv[1], device='metal', quiet=True)"
    r = subprocess.run([sys.executable, "-c", code, str(smollm2_path)], capture_output=True, text=True,
                       env=_env(CERA_METAL_DEVICE=None))  # fmt: skip
    assert r.returncode != 0
    assert "BackendUnavailable" in r.stderr and "CERA_METAL_DEVICE=cpu" in r.stderr


@needs_mlx
def test_a_device_name_it_does_not_know_is_refused(smollm2_path):
    code = "import sys, cera; cera.load(sys.argv[1], device='metal', quiet=True)"
    r = subprocess.run([sys.executable, "-c", code, str(smollm2_path)], capture_output=True, text=True,
                       env=_env(CERA_METAL_DEVICE="tpu"))  # fmt: skip
    assert r.returncode != 0 and "CERA_METAL_DEVICE='tpu' is not a device" in r.stderr


def _iq_file(tmp_path):
    from gguf import GGMLQuantizationType, GGUFWriter

    path = tmp_path / "iq.gguf"
    w = GGUFWriter(str(path), "llama")
    data = np.zeros((2, 66), np.uint8)  # IQ2_XXS: 66 bytes a block of 256
    w.add_tensor("blk.0.ffn_up.weight", data, raw_shape=data.shape, raw_dtype=GGMLQuantizationType.IQ2_XXS)
    w.add_tensor("output_norm.weight", np.ones(256, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@needs_mlx
def test_a_type_it_lacks_is_refused_by_name_and_passed_over_under_auto(tmp_path):
    from cera.engine import choose_backend
    from cera.errors import BackendUnavailable
    from cera.formats.gguf import GGUFFile
    from cera.plugins.manager import get_manager

    with GGUFFile(_iq_file(tmp_path)) as g:
        with pytest.raises(BackendUnavailable, match=r"metal.*blk\.0\.ffn_up\.weight.*IQ2_XXS"):
            choose_backend(g, "metal", get_manager())
        backend, notes = choose_backend(g, "auto", get_manager())
        try:
            assert backend.name != "metal"
        finally:
            backend.close()


@needs_mlx
def test_plugins_json_reports_device_memory_and_types():
    from click.testing import CliRunner

    from cera_cli.main import cli

    r = CliRunner().invoke(cli, ["plugins", "--json"], catch_exceptions=False)
    entry = next(e for e in json.loads(r.output) if e["name"] == "metal")
    status = entry["backend_status"][0]
    details = status["details"]
    assert details["memory_bytes"] > 0
    assert details["types"]["Q4_K"]["values"] == "exact" and "affine 4-bit" in details["types"]["Q4_K"]["how"]
    assert "dequantized to float32" in details["types"]["Q6_K"]["how"]
    if not ON_MAC:
        assert status["usable"] and details["device"] == "MLX CPU device (CERA_METAL_DEVICE=cpu)"


@needs_mlx
def test_inspect_probe_reports_the_device_and_auto_passes_over_the_cpu_device(smollm2_path):
    from click.testing import CliRunner

    from cera_cli.main import cli

    r = CliRunner().invoke(cli, ["inspect", "-m", str(smollm2_path), "--json", "--probe"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    probe = {b["name"]: b.get("probe") for b in rep["backends"]}["metal"]
    assert "MLX" in probe["device"] and "affine quantized layout" in probe["device"] and probe["memory_bytes"] > 0
    if not ON_MAC:
        assert probe["software"] is True and rep["auto"] != "metal"


@needs_mlx
def test_cera_run_on_metal_generates_the_answer(smollm2_path):
    """`cera run --device metal` on MLX's CPU device, greedy, on the real SmolLM2 file."""
    r = subprocess.run(
        ["cera", "run", "-m", str(smollm2_path), "--device", "metal", "--temp", "0", "-n", "8", "-p",
         "What is the capital of France?"],
        capture_output=True, text=True, env=_env(CERA_METAL_DEVICE=None if ON_MAC else "cpu"), timeout=240,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "The capital of France is Paris.", r.stdout
    assert "backend metal" in r.stderr
