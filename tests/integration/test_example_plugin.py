"""The third-party plugin template (examples/cera-model-example), installed for real.

The example is installed with pip into a throwaway folder (``pip install --no-deps
--target``), beside deliberately broken plugins: one that raises on import, one that
targets another plugin-API version, and one that claims the example's architecture. Run
with that folder on PYTHONPATH, `cera plugins` must list the example, report each broken
one with its reason, and keep every installed plugin working; `cera inspect` must name the
example family for its tiny model file.

The example model itself is checked against a direct numpy computation of the same
network from the file's tensors (dequantized by the `gguf` package), run on the CPU
backend when it is installed.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader
from gguf.quants import dequantize

from cera.plugins.manager import PluginManager, get_manager
from cera.plugins.registry import load_factory

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "cera-model-example"

BROKEN = {
    # plugin name: (module, source)
    "tp-raises": ("tp_raises", "raise ImportError('tp-raises needs a library that is not installed')\n"),
    "tp-future-api": ("tp_future_api", "import cera\nCERA_PLUGIN_API = '>=7'\n"),
    "tp-squatter": (
        "tp_squatter",
        textwrap.dedent(
            """
            import cera
            CERA_PLUGIN_API = ">=2,<3"

            @cera.hookimpl
            def cera_register_models(register):
                register(cera.ModelFamily(name="squatter", architectures=("cera-example",), factory="tp_squatter:M"))
            """
        ),
    ),
}


def write_dist(site: Path, dist: str, version: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
    """Make `dist` look installed in folder `site`: modules plus a minimal .dist-info."""
    site.mkdir(parents=True, exist_ok=True)
    for mod, source in modules.items():
        (site / f"{mod}.py").write_text(source)
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    eps = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[cera]\n{eps}")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The example, installed by pip (not editable) into a fresh folder."""
    target = tmp_path_factory.mktemp("example-install")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check", "--target", str(target), str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"pip could not install the example:\n{proc.stderr}"
    assert (target / "cera_model_example" / "plugin.py").exists()
    return target


@pytest.fixture(scope="module")
def paths(installed, tmp_path_factory) -> list[Path]:
    """PYTHONPATH: the installed example first, then the broken plugins (loaded after it)."""
    broken = tmp_path_factory.mktemp("broken")
    for name, (mod, source) in BROKEN.items():
        write_dist(broken, name, "0.0.1", {name: mod}, {mod: source})
    return [installed, broken]


def cera(args, paths, **env) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "CERA_PLUGINS"}
    full_env.update(env, PYTHONPATH=os.pathsep.join(str(p) for p in paths))
    proc = subprocess.run(
        [sys.executable, "-c", "from cera_cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=300,
        cwd=paths[0],  # not the repository, so nothing is imported from the source tree by accident
    )
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def tiny_model(installed, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "tiny.gguf"
    proc = subprocess.run(
        [sys.executable, "-m", "cera_model_example.tiny", str(path)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(installed)),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return path


def test_plugins_lists_the_example_and_reports_the_broken_ones(paths):
    report = {e["name"]: e for e in json.loads(cera(["plugins", "--json"], paths).stdout)}
    example = report["example"]
    assert (example["distribution"], example["version"], example["status"], example["error"]) == (
        "cera-model-example",
        "0.2.0",
        "ok",
        None,
    )
    assert example["registered"] == {"backends": [], "architectures": ["cera-example"], "audio": [], "commands": []}

    assert report["tp-raises"]["error"] == (
        "import of 'tp_raises' failed: ImportError: tp-raises needs a library that is not installed"
    )
    assert report["tp-future-api"]["error"].startswith("targets plugin API '>=7' but this cera-core provides API 2")
    assert report["tp-squatter"]["error"] == "registers architecture 'cera-example', which plugin 'example' already registered"
    for name in BROKEN:
        assert report[name]["status"] == "error" and report[name]["registered"]["architectures"] == []

    # Every plugin installed in the environment keeps working beside them.
    installed_here = {ep.name for ep in metadata.entry_points(group="cera")}
    for name in installed_here:
        assert report[name]["status"] == "ok", report[name]

    text = cera(["plugins"], paths).stdout
    assert any(line.split()[:4] == ["example", "cera-model-example", "0.2.0", "ok"] for line in text.splitlines())
    assert "  tp-squatter (tp-squatter 0.0.1): registers architecture 'cera-example'" in text


def test_inspect_names_the_example_family(paths, tiny_model):
    r = json.loads(cera(["inspect", "-m", str(tiny_model), "--json"], paths).stdout)
    assert r["architecture"] == "cera-example"
    assert r["family"] == {"name": "example", "plugin": "example", "distribution": "cera-model-example", "version": "0.2.0"}
    reader = GGUFReader(tiny_model)
    assert r["tensor_count"] == len(reader.tensors) == 24
    counts = {}
    for t in reader.tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    assert {k: v["count"] for k, v in r["tensor_types"].items()} == counts == {"Q8_0": 12, "F32": 11, "F16": 1}


def test_allowlist_can_isolate_the_example(paths):
    report = json.loads(cera(["plugins", "--json"], paths, CERA_PLUGINS="cera-model-example").stdout)
    assert [(e["name"], e["status"]) for e in report] == [("example", "ok")]


# -- the example model ---------------------------------------------------------------------


@pytest.fixture
def example_modules(installed):
    sys.path.insert(0, str(installed))
    try:
        import cera_model_example.model
        import cera_model_example.plugin
        import cera_model_example.tiny

        yield cera_model_example
    finally:
        sys.path.remove(str(installed))
        for name in [n for n in sys.modules if n.startswith("cera_model_example")]:
            del sys.modules[name]


def test_config_is_read_from_the_files_metadata(example_modules, tmp_path):
    from cera.errors import ModelConfigError
    from cera.formats.gguf import GGUFFile

    path = example_modules.tiny.write_tiny_gguf(tmp_path / "t.gguf", n_embd=96, n_head=6, n_head_kv=3, n_layer=3, n_ff=64)
    with GGUFFile(path) as g:
        c = example_modules.model.read_config(g)
    assert (c.n_layer, c.n_embd, c.n_ff, c.n_head, c.n_head_kv, c.head_dim) == (3, 96, 64, 6, 3, 16)
    assert c.eps == pytest.approx(1e-5) and c.rope_base == 10000.0

    # A key the family does not understand is refused rather than ignored.
    from gguf import GGUFWriter

    odd = tmp_path / "odd.gguf"
    w = GGUFWriter(str(odd), "cera-example")
    for key, value in [("block_count", 1), ("embedding_length", 32), ("feed_forward_length", 32), ("attention.head_count", 2)]:
        w.add_uint32(f"cera-example.{key}", value)
    w.add_float32("cera-example.attention.layer_norm_epsilon", 1e-5)
    w.add_float32("cera-example.rope.scaling.factor", 4.0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    with GGUFFile(odd) as g, pytest.raises(ModelConfigError, match="does not understand metadata key 'cera-example.rope.scaling.factor'"):
        example_modules.model.read_config(g)


def reference_logits(path: Path, tokens: list[int]) -> np.ndarray:
    """The example network computed directly with numpy from the dequantized tensors."""
    reader = GGUFReader(path)
    f = {k: v.contents() for k, v in reader.fields.items() if k.startswith("cera-example.")}
    W = {t.name: dequantize(t.data, t.tensor_type).astype(np.float64).reshape(tuple(int(d) for d in reversed(t.shape))) for t in reader.tensors}
    n_layer, n_embd = f["cera-example.block_count"], f["cera-example.embedding_length"]
    n_head, n_kv = f["cera-example.attention.head_count"], f["cera-example.attention.head_count_kv"]
    eps, base = f["cera-example.attention.layer_norm_epsilon"], f["cera-example.rope.freq_base"]
    d = n_embd // n_head
    n = len(tokens)
    pos = np.arange(n)

    def layer_norm(x, w, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * w + b

    def rope_neox(x):  # x [n, heads, d]: dimension i pairs with i + d/2
        half = d // 2
        theta = pos[:, None] * base ** (-2.0 * np.arange(half) / d)
        cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)

    def gelu_tanh(x):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))

    x = W["token_embd.weight"][tokens]
    for i in range(n_layer):
        p = f"blk.{i}."
        h = layer_norm(x, W[p + "attn_norm.weight"], W[p + "attn_norm.bias"])
        q = rope_neox((h @ W[p + "attn_q.weight"].T).reshape(n, n_head, d))
        k = rope_neox((h @ W[p + "attn_k.weight"].T).reshape(n, n_kv, d))
        v = (h @ W[p + "attn_v.weight"].T).reshape(n, n_kv, d)
        out = np.zeros((n, n_head, d))
        for hd in range(n_head):
            g = hd // (n_head // n_kv)
            s = q[:, hd] @ k[:, g].T / math.sqrt(d)
            s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
            pr = np.exp(s - s.max(-1, keepdims=True))
            out[:, hd] = (pr / pr.sum(-1, keepdims=True)) @ v[:, g]
        x = x + out.reshape(n, -1) @ W[p + "attn_output.weight"].T
        h = layer_norm(x, W[p + "ffn_norm.weight"], W[p + "ffn_norm.bias"])
        x = x + gelu_tanh(h @ W[p + "ffn_up.weight"].T) @ W[p + "ffn_down.weight"].T
    x = layer_norm(x, W["output_norm.weight"], W["output_norm.bias"])
    return x @ W["output.weight"].T


@pytest.fixture
def cpu_backend():
    spec = get_manager().backends.get("cpu")
    if spec is None:
        pytest.skip("cera-backend-cpu is not installed: the example model has no backend to run on")
    reason = spec.unavailable_reason()
    if reason:
        pytest.skip(f"the cpu backend cannot run here: {reason}")
    backend = load_factory(spec.factory)()
    yield backend
    backend.close()


def test_example_model_matches_a_direct_numpy_computation(example_modules, cpu_backend, tmp_path):
    from cera.formats.gguf import GGUFFile
    from cera.graph.builder import ALL_LOGITS
    from cera.model import Weights
    from cera.generation.runtime import Runner, SeqStep
    from cera.testing.reference import ReferenceBackend

    path = example_modules.tiny.write_tiny_gguf(tmp_path / "tiny.gguf", seed=3)
    # Load it the way cera does: the family registered by the plugin module, by architecture.
    pm = PluginManager(allow=set())
    assert pm.register_plugin(example_modules.plugin, "example").status == "ok"
    with GGUFFile(path) as g:
        Model = load_factory(pm.family_for(g.architecture).factory)
        weights = Weights.from_gguf(g)
        model = Model(Model.read_config(g), weights)
        weights.check_all_used("example")  # every tensor of the file is understood
        tokens = [3, 17, 42, 5, 60, 9, 1]
        expected = reference_logits(path, tokens)
        assert model.n_vocab == expected.shape[1] == 64
        scale = np.abs(expected).max()

        for backend, tol in ((cpu_backend, 0.02), (ReferenceBackend(), 1e-4)):
            runner = Runner(model, backend, {n: backend.upload(g, n) for n in weights.used})
            state = runner.new_state(32, kv_type="f32")
            logits = runner.forward(state, [SeqStep(0, tokens, range(len(tokens)))], ALL_LOGITS)["logits"]
            # The CPU backend multiplies Q8_0 weights by activations quantized to Q8_0 (as
            # llama.cpp does), so agreement is close but not exact; the reference is exact.
            assert np.abs(logits - expected).max() <= tol * scale, backend.name
            assert (logits.argmax(-1) == expected.argmax(-1)).all()

            # Prefill then decode one token at a time gives the same last-position logits.
            state = runner.new_state(32, kv_type="f32")
            for i, t in enumerate(tokens):
                last = runner.forward(state, [SeqStep(0, [t], [i])], ALL_LOGITS)["logits"]
                assert last.shape == (1, 64)
                assert np.abs(last[0] - expected[i]).max() <= tol * scale, (backend.name, i)
