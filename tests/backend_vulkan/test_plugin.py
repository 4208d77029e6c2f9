"""The vulkan plugin: registered with what it serves, cheap to list (wgpu is imported only
when the backend is built), and admission naming what it lacks."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

from .conftest import WHY_NOT, needs_vulkan


def test_entry_point_and_registration():
    from cera.plugins.manager import PluginManager

    eps = [ep for ep in metadata.distribution("cera-backend-vulkan").entry_points if ep.group == "cera"]
    assert [(ep.name, ep.value) for ep in eps] == [("vulkan", "cera_backend_vulkan.plugin")]
    import cera_backend_vulkan.plugin as plugin
    from cera_backend_vulkan.capabilities import OPS, TENSOR_TYPES

    m = PluginManager(allow=set())
    record = m.register_plugin(plugin, "vulkan", "cera-backend-vulkan")
    assert (record.status, record.backends) == ("ok", ["vulkan"])
    spec = m.backend_spec("vulkan")
    assert set(spec.tensor_types) == set(TENSOR_TYPES) and set(spec.ops) == set(OPS)
    assert not spec.placeholder


def test_every_declared_op_is_in_the_op_table():
    from cera.graph.ops import names
    from cera_backend_vulkan.capabilities import OPS

    assert set(OPS) <= set(names())


def test_listing_it_does_not_import_wgpu():
    code = "import sys, cera_backend_vulkan.plugin; sys.exit(1 if 'wgpu' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@needs_vulkan
def test_probe_names_the_adapter_and_its_kind(vulkan):
    info = vulkan.probe()
    assert info.usable and "Vulkan" in info.device
    assert info.software == vulkan.ctx.software


@needs_vulkan
def test_inspect_probe_says_auto_passes_over_a_software_adapter(vulkan, smollm2_path):
    """`cera inspect --probe` with the real plugins: on a software adapter (lavapipe) it
    says --device auto passes over vulkan and picks the CPU, as `cera run` does; on a GPU,
    that auto picks vulkan."""
    import json

    from click.testing import CliRunner

    from cera_cli.main import cli

    result = CliRunner().invoke(cli, ["inspect", "-m", str(smollm2_path), "--json", "--probe"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    r = json.loads(result.output)
    probe = {b["name"]: b.get("probe") for b in r["backends"]}
    assert probe["vulkan"]["software"] is vulkan.ctx.software and "Vulkan" in probe["vulkan"]["device"]
    assert r["auto"] == ("cpu" if vulkan.ctx.software else "vulkan")
    if vulkan.ctx.software:
        text = CliRunner().invoke(cli, ["inspect", "-m", str(smollm2_path), "--probe"]).output
        assert "software-emulated: --device auto passes over it (--device vulkan uses it)" in text


def test_a_missing_tensor_type_is_refused_by_name(tmp_path):
    """--device vulkan on a file with a type it has no kernel for: refused, the tensor named."""
    if WHY_NOT:
        pytest.skip(WHY_NOT)
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter

    from cera.errors import UnsupportedTensorType
    from cera.formats.gguf import GGUFFile
    from cera_backend_vulkan.backend import VulkanBackend
    from cera_backend_vulkan.capabilities import TENSOR_TYPES

    assert "IQ4_XS" not in TENSOR_TYPES  # if it gains a kernel, pick another type here
    path = tmp_path / "iq4xs.gguf"
    w = GGUFWriter(str(path), "cera-conformance")
    blocks = np.zeros((4, 136), np.uint8)  # 4 rows of one 256-value IQ4_XS block (all zero: valid)
    w.add_tensor("blk.0.ffn_down.weight", blocks, raw_shape=blocks.shape, raw_dtype=GGMLQuantizationType.IQ4_XS)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with GGUFFile(path) as g, pytest.raises(UnsupportedTensorType, match="blk.0.ffn_down.weight.*IQ4_XS"):
        VulkanBackend().upload(g, "blk.0.ffn_down.weight")


@needs_vulkan
def test_two_sessions_on_one_model(smollm2_path):
    """Two sessions of one loaded model interleave and each gets its own tokens alone."""
    import cera

    m = cera.load(str(smollm2_path), device="vulkan", quiet=True)
    try:
        alone = []
        for prompt in ("The sky is", "Water is"):
            s = m.new_session(n_ctx=64)
            s.append_text(prompt)
            alone.append(s.generate(max_tokens=3, temperature=0).text)
        a, b = m.new_session(n_ctx=64), m.new_session(n_ctx=64)
        a.append_text("The sky is")
        b.append_text("Water is")
        ta = a.generate(max_tokens=2, temperature=0).text
        tb = b.generate(max_tokens=2, temperature=0).text
        ta += a.generate(max_tokens=1, temperature=0).text
        tb += b.generate(max_tokens=1, temperature=0).text
        assert [ta, tb] == alone
    finally:
        m.close()
