"""`cera --help` and `cera plugins` import no backend or model code.

Discovering plugins imports each plugin's registration module (``<package>.plugin``) and
the light modules it needs to declare things (plain-data capability tables, click command
definitions), and nothing else. The rules, checked on `sys.modules` afterwards:

- no module named by a registered factory string (``cera_backend_cpu.backend``, a family's
  model module, an audio component's implementation) is imported;
- no compiled extension module of a plugin package (the CPU kernels), no ``_cera*`` module;
- no model family module other than the family package and its ``.plugin`` module;
- no numerics, device or audio libraries (numpy, gguf, cffi, onnxruntime, soundfile, ...)
  and none of the core modules only a loaded model needs.

Each command runs in a fresh interpreter through a small wrapper that calls
`cera_cli.main.main`, then writes the sorted `sys.modules` (with each module's file) and the
factory modules of everything registered, as JSON.

Besides the plugins installed in the environment, the example family plugin is put on the
path (as an installed distribution), so the rule is exercised even where no backend or
family distribution is installed. A negative control shows the check catches a plugin
that imports its implementation at registration time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_SRC = REPO / "examples" / "cera-model-example" / "src"

WRAPPER = """
import json, sys
out = sys.argv.pop(1)
from cera_cli.main import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
files = {name: getattr(m, "__file__", None) for name, m in sorted(sys.modules.items())}
# Taken after the snapshot: which modules the registered factory strings name.
from cera.plugins.manager import get_manager
m = get_manager()
decls = [*m.backends.values(), *m.families.values(), *m.audio.values()]
factories = sorted({d.factory.partition(":")[0] for d in decls})
with open(out, "w") as f:
    json.dump({"code": code, "modules": files, "factories": factories}, f)
"""

PLUGIN_PACKAGES = ("cera_backend_", "cera_model_", "cera_audio_")
# Heavy third-party modules: numerics, device runtimes, audio and template libraries.
HEAVY = {
    "numpy",
    "gguf",
    "cffi",
    "_cffi_backend",
    "onnxruntime",
    "soundfile",
    "soxr",
    "wgpu",
    "mlx",
    "torch",
    "jinja2",
    "llama_cpp",
}
# Core modules that only loading or running a model needs.
HEAVY_CORE = {
    "cera.formats.gguf",
    "cera.backend",
    "cera.model",
    "cera.blocks.layers",
    "cera.engine",
    "cera.generation.session",
    "cera.text.tokenizer",
}


def violations(snapshot: dict, allow_numpy: bool = False) -> list[str]:
    """Modules that discovering plugins must not import, with the rule each one breaks."""
    bad = []
    factories = set(snapshot["factories"])
    for name, file in snapshot["modules"].items():
        top = name.split(".")[0]
        if name in factories:
            bad.append(f"{name} (a factory module)")
        elif top.startswith(PLUGIN_PACKAGES) and file and file.endswith(tuple(EXTENSION_SUFFIXES)):
            bad.append(f"{name} (a compiled module)")
        elif top.startswith("_cera"):
            bad.append(f"{name} (a compiled kernel module)")
        elif top.startswith("cera_model_") and name not in (top, f"{top}.plugin"):
            bad.append(f"{name} (a model family module)")
        elif not allow_numpy and (top in HEAVY or name in HEAVY_CORE):
            bad.append(f"{name} (heavy)")
    return bad


def write_dist(site: Path, dist: str, version: str, entry_points: dict[str, str]) -> None:
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    eps = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[cera]\n{eps}")


@pytest.fixture(scope="module")
def example_site(tmp_path_factory) -> list[Path]:
    """The example plugin, visible as an installed distribution."""
    site = tmp_path_factory.mktemp("site")
    write_dist(site, "cera-model-example", "0.1.0", {"example": "cera_model_example.plugin"})
    return [site, EXAMPLE_SRC]


def modules_after(args: list[str], paths: list[Path], tmp_path: Path, **env) -> tuple[int, dict]:
    out = tmp_path / "modules.json"
    full_env = {k: v for k, v in os.environ.items() if k != "CERA_PLUGINS"}
    full_env.update(env)
    full_env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(out), *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=300,
    )
    assert out.exists(), proc.stderr
    result = json.loads(out.read_text())
    return result["code"], result


@pytest.mark.parametrize("args", [["--help"], ["plugins", "--json"], ["plugins"], ["--version"]])
def test_discovery_imports_no_backend_or_model_code(args, example_site, tmp_path):
    code, snapshot = modules_after(args, example_site, tmp_path)
    assert code in (0, None)
    # The plugins were really discovered: the example's registration module was imported ...
    if args != ["--version"]:
        assert "cera_model_example.plugin" in snapshot["modules"]
        assert "cera_model_example.model" in snapshot["factories"]
    # ... and nothing that only using them needs.
    assert violations(snapshot) == []


def test_inspect_imports_the_family_but_no_backend_code(example_site, tmp_path):
    """inspect answers with the loader's admission check, which needs the ops of the
    model's graphs: it imports the family (and builds its graphs symbolically), never a
    backend's implementation."""
    sys.path.insert(0, str(EXAMPLE_SRC))
    try:
        from cera_model_example.tiny import write_tiny_gguf
    finally:
        sys.path.remove(str(EXAMPLE_SRC))
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    code, snapshot = modules_after(["inspect", "-m", str(model), "--json"], example_site, tmp_path)
    assert code in (0, None)
    assert "cera.formats.gguf" in snapshot["modules"]
    assert "cera_model_example.model" in snapshot["modules"]  # the family, for its graph's ops
    family = {"cera_model_example.model"}
    bad = [v for v in violations(snapshot, allow_numpy=True) if v.split(" ")[0] not in family]
    bad = [v for v in bad if not v.startswith(tuple(f"{m} " for m in HEAVY_CORE))]
    assert bad == []
    # no backend implementation: no compiled kernels, no backend module
    assert not [n for n in snapshot["modules"] if n.startswith("cera_backend_") and not n.endswith((".plugin", ".capabilities")) and "." in n]


def test_the_check_catches_a_plugin_that_imports_its_implementation(tmp_path):
    """Negative control: a registration module that imports its kernels is caught."""
    site = tmp_path / "site"
    pkg = site / "cera_backend_tpheavy"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "kernels.py").write_text("import numpy\n")
    (pkg / "plugin.py").write_text(
        textwrap.dedent(
            """
            import cera
            from cera_backend_tpheavy import kernels  # wrong: belongs in the factory's module
            CERA_PLUGIN_API = ">=2,<3"

            @cera.hookimpl
            def cera_register_backends(register):
                register(cera.BackendSpec(name="tpheavy", factory="cera_backend_tpheavy.kernels:B"))
            """
        )
    )
    write_dist(site, "cera-backend-tpheavy", "0.1", {"tpheavy": "cera_backend_tpheavy.plugin"})
    code, snapshot = modules_after(["plugins", "--json"], [site], tmp_path, CERA_PLUGINS="tpheavy")
    assert code in (0, None)
    found = violations(snapshot)
    assert "cera_backend_tpheavy.kernels (a factory module)" in found
    assert "numpy (heavy)" in found
