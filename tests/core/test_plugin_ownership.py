"""Plugins cannot take cera over: names have owners, conflicts resolve by rule (never by
the order plugins are discovered), and a plugin's import, hooks and probes run with time
limits and cannot end the program. Each hostile plugin reproduced, as a test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import tomllib

import cera
from cera.plugins import manager as plugins, registry
from cera.plugins.manager import FIRST_PARTY, PluginManager

REPO = Path(__file__).resolve().parents[2]
HEADER = "import cera\nCERA_PLUGIN_API = '>=2,<3'\n"

# A third-party backend that calls itself "cpu".
IMPOSTOR = (
    HEADER
    + """
@cera.hookimpl
def cera_register_backends(register):
    register(cera.BackendSpec(name="cpu", factory="tp_impostor_impl:Backend", tensor_types=("F32",), priority=1000))
"""
)


def write_dist(site: Path, dist: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
    site.mkdir(parents=True, exist_ok=True)
    for mod, source in modules.items():
        (site / f"{mod}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    eps = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[cera]\n{eps}")


def run_cera(args, sites, timeout=120, **env_extra) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CERA_PLUGINS", "CERA_PLUGIN_OVERRIDES")}
    env["PYTHONPATH"] = os.pathsep.join(str(s) for s in sites)
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, "-c", "from cera_cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def manager_in_subprocess(sites, code: str, append: bool = False, **env_extra) -> dict:
    """Run ``code`` (which sets ``out``) after loading the process-wide manager, with
    ``sites`` first on sys.path (or last, after the installed distributions: ``append``)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CERA_PLUGINS", "CERA_PLUGIN_OVERRIDES")}
    env.update(env_extra)
    paths = "".join(
        (f"sys.path.append({str(s)!r})\n" if append else f"sys.path.insert(0, {str(s)!r})\n") for s in sites
    )
    full = (
        "import json, sys\n"
        + paths
        + "from cera.plugins.manager import get_manager\nm = get_manager()\n"
        + code
        + "\nprint(json.dumps(out))"
    )
    proc = subprocess.run([sys.executable, "-c", full], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture(autouse=True)
def fresh_process_manager():
    plugins.set_manager(None)
    yield
    plugins.set_manager(None)


# -- ownership --------------------------------------------------------------------------------


def test_first_party_list_matches_the_repository():
    """Every distribution of this repository that registers plugins is first-party."""
    names = set()
    for pyproject in REPO.glob("**/pyproject.toml"):
        if ".venv" in pyproject.parts or "examples" in pyproject.parts:
            continue
        project = tomllib.loads(pyproject.read_text()).get("project", {})
        if "cera" in project.get("entry-points", {}):
            names.add(project["name"])
    assert names, "no plugin distributions found"
    assert names <= FIRST_PARTY, sorted(names - FIRST_PARTY)


@pytest.mark.parametrize("impostor_first", [True, False])
def test_a_third_party_plugin_cannot_take_the_cpu_backend(tmp_path, impostor_first):
    """Reproduction: whichever plugin was discovered first owned "cpu"; with the impostor
    first on the path, the real CPU backend was reported as the faulty one."""
    site = tmp_path / "site"
    write_dist(site, "tp-impostor", {"aaa-impostor": "tp_impostor"}, {"tp_impostor": IMPOSTOR})
    out = manager_in_subprocess(
        [site],
        "rec = {r.name: (r.status, r.error, r.distribution) for r in m.records}\n"
        "out = {'cpu': m.backends['cpu'].factory, 'owner': m.plugin_of('backend', 'cpu'), 'rec': rec}",
        append=not impostor_first,
    )
    assert out["cpu"] == "cera_backend_cpu.backend:CpuBackend"
    assert out["owner"] == "cpu"
    assert out["rec"]["cpu"][0] == "ok"
    status, error, _ = out["rec"]["aaa-impostor"]
    assert status == "error"
    assert "registers backend 'cpu', which plugin 'cpu' (cera-backend-cpu, a distribution of cera itself)" in error
    assert "CERA_PLUGIN_OVERRIDES=backend:cpu=<plugin name>" in error


def test_first_party_names_are_owned_even_when_their_distribution_is_not_loaded(site_module):
    m = PluginManager(allow=set(), overrides={})
    rec = m.register_plugin(site_module("tp_impostor2", IMPOSTOR), "impostor", distribution="tp-impostor")
    assert rec.status == "error"
    assert rec.error.startswith(
        "registers backend 'cpu', which belongs to cera-backend-cpu, a distribution of cera itself"
    )
    assert "cpu" not in m.backends
    fam = (
        HEADER
        + """
@cera.hookimpl
def cera_register_models(register):
    register(cera.ModelFamily(name="fastllama", architectures=("llama",), factory="a:b"))
"""
    )
    rec = m.register_plugin(site_module("tp_fam_impostor", fam), "fastllama", distribution="tp-fastllama")
    assert rec.status == "error" and "architecture 'llama', which belongs to cera-model-llama" in rec.error


def test_the_override_gives_a_name_to_the_plugin_it_names(tmp_path):
    site = tmp_path / "site"
    write_dist(site, "tp-impostor", {"aaa-impostor": "tp_impostor"}, {"tp_impostor": IMPOSTOR})
    out = manager_in_subprocess(
        [site],
        "rec = {r.name: (r.status, r.error, r.notes, r.backends) for r in m.records}\n"
        "out = {'cpu': m.backends['cpu'].factory, 'rec': rec}",
        CERA_PLUGIN_OVERRIDES="backend:cpu=tp-impostor",
    )
    assert out["cpu"] == "tp_impostor_impl:Backend"
    status, error, notes, backends = out["rec"]["aaa-impostor"]
    assert status == "ok" and backends == ["cpu"]
    assert notes == ["takes backend 'cpu' from plugin 'cpu' (CERA_PLUGIN_OVERRIDES)"]
    status, error, notes, backends = out["rec"]["cpu"]
    assert status == "ok" and backends == []
    assert notes == ["backend 'cpu' was replaced by plugin 'aaa-impostor' (CERA_PLUGIN_OVERRIDES)"]


def test_the_override_is_reported_by_cera_plugins(tmp_path):
    site = tmp_path / "site"
    write_dist(site, "tp-impostor", {"aaa-impostor": "tp_impostor"}, {"tp_impostor": IMPOSTOR})
    proc = run_cera(["plugins", "--json"], [site], CERA_PLUGIN_OVERRIDES="backend:cpu=aaa-impostor")
    assert proc.returncode == 0, proc.stderr
    report = {e["name"]: e for e in json.loads(proc.stdout)}
    assert report["cpu"]["notes"] == ["backend 'cpu' was replaced by plugin 'aaa-impostor' (CERA_PLUGIN_OVERRIDES)"]
    assert report["aaa-impostor"]["registered"]["backends"] == ["cpu"]


def test_a_malformed_override_is_an_error(monkeypatch):
    monkeypatch.setenv("CERA_PLUGIN_OVERRIDES", "cpu")
    with pytest.raises(cera.PluginError, match="kind:name=plugin"):
        PluginManager(allow=set())


@pytest.mark.parametrize("order", ["ab", "ba"])
def test_two_third_party_plugins_conflict_by_name_not_by_discovery(tmp_path, order):
    claim = (
        HEADER
        + """
@cera.hookimpl
def cera_register_backends(register):
    register(cera.BackendSpec(name="tp-shared", factory="{mod}:B"))
"""
    )
    a, b = tmp_path / "a", tmp_path / "b"
    write_dist(a, "tp-alpha", {"tp-alpha": "tp_alpha"}, {"tp_alpha": claim.replace("{mod}", "alpha")})
    write_dist(b, "tp-beta", {"tp-beta": "tp_beta"}, {"tp_beta": claim.replace("{mod}", "beta")})
    out = manager_in_subprocess(
        [a, b] if order == "ab" else [b, a],
        "out = {'factory': m.backends['tp-shared'].factory, "
        "'beta': [r.error for r in m.records if r.name == 'tp-beta']}",
        CERA_PLUGINS="tp-alpha,tp-beta",
    )
    assert out["factory"] == "alpha:B"
    assert out["beta"] == ["registers backend 'tp-shared', which plugin 'tp-alpha' already registered"]


# -- time limits and exceptions ---------------------------------------------------------------


@pytest.fixture
def site_module(tmp_path, monkeypatch):
    import types

    def make(name: str, source: str):
        m = types.ModuleType(name)
        exec(textwrap.dedent(source), m.__dict__)
        return m

    return make


@pytest.fixture
def site(tmp_path, monkeypatch):
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    before = set(sys.modules)
    yield folder
    for name in set(sys.modules) - before:
        if name.startswith("tp_"):
            del sys.modules[name]


GOOD = (
    HEADER
    + """
@cera.hookimpl
def cera_register_backends(register):
    register(cera.BackendSpec(name="tp-good-backend", factory="a:b"))
"""
)


def test_a_plugin_that_hangs_at_import_is_skipped_after_the_time_limit(site):
    write_dist(site, "tp-sleepy", {"tp-sleepy": "tp_sleepy"}, {"tp_sleepy": "import time\ntime.sleep(30)\n"})
    write_dist(site, "tp-good", {"tp-good": "tp_good"}, {"tp_good": GOOD})
    m = PluginManager(allow={"tp-sleepy", "tp-good"}, timeout=0.5)
    t0 = time.monotonic()
    m.load_entry_points()
    assert time.monotonic() - t0 < 5
    errors = {r.name: r.error for r in m.records}
    assert errors["tp-sleepy"] == "import of 'tp_sleepy' did not finish within 0.5 s (CERA_PLUGIN_TIMEOUT); skipped"
    assert errors["tp-good"] is None and "tp-good-backend" in m.backends


@pytest.mark.parametrize(
    "raise_", ["SystemExit(3)", "KeyboardInterrupt()", "GeneratorExit()", "BaseException('odd')", "MemoryError()"]
)
def test_base_exceptions_at_import_are_contained(site, raise_):
    """Reproduction: a plugin raising SystemExit or KeyboardInterrupt at import broke every
    command."""
    write_dist(site, "tp-exits", {"tp-exits": "tp_exits"}, {"tp_exits": f"raise {raise_}\n"})
    write_dist(site, "tp-good", {"tp-good": "tp_good"}, {"tp_good": GOOD})
    m = PluginManager(allow={"tp-exits", "tp-good"})
    m.load_entry_points()
    errors = {r.name: r.error for r in m.records}
    assert errors["tp-exits"].startswith(f"import of 'tp_exits' failed: {raise_.split('(')[0]}")
    assert errors["tp-good"] is None


def test_base_exceptions_in_a_hook_are_contained(site_module):
    src = (
        HEADER
        + """
@cera.hookimpl
def cera_register_backends(register):
    raise KeyboardInterrupt
"""
    )
    m = PluginManager(allow=set())
    rec = m.register_plugin(site_module("tp_hook_kbi", src), "kbi")
    assert rec.status == "error" and rec.error.startswith("KeyboardInterrupt in a registration hook")


def test_a_hook_that_hangs_is_skipped(site_module):
    src = (
        HEADER
        + """
import time
@cera.hookimpl
def cera_register_backends(register):
    time.sleep(30)
"""
    )
    m = PluginManager(allow=set(), timeout=0.5)
    t0 = time.monotonic()
    rec = m.register_plugin(site_module("tp_hook_sleepy", src), "sleepy-hook")
    assert time.monotonic() - t0 < 5
    assert rec.error == "its registration hooks did not finish within 0.5 s (CERA_PLUGIN_TIMEOUT)"


def test_an_availability_check_that_hangs_is_reported_once(monkeypatch):
    """Reproduction: a hanging probe hung `cera plugins` and `cera inspect`."""
    monkeypatch.setattr(registry, "PROBE_TIMEOUT_S", 0.3)
    calls = []

    def hang():
        calls.append(1)
        time.sleep(30)

    spec = cera.BackendSpec(name="tp-hangs", factory="a:b", available=hang)
    t0 = time.monotonic()
    assert spec.unavailable_reason() == "availability check did not finish within 0.3 s"
    assert spec.unavailable_reason() == "availability check did not finish within 0.3 s"
    assert time.monotonic() - t0 < 3 and len(calls) == 1


def test_an_availability_check_raising_base_exceptions():
    def exits():
        raise SystemExit(2)

    spec = cera.BackendSpec(name="tp-exits", factory="a:b", available=exits)
    assert spec.unavailable_reason() == "availability check failed: SystemExit: 2"


# -- the CLI stays usable ----------------------------------------------------------------------


def test_help_stays_fast_with_a_plugin_that_sleeps_at_import(tmp_path):
    """Reproduction: a plugin taking 5 s to import made `cera --help` take 5 s. The help
    waits a fixed short time for plugin imports (the figure, on an idle machine, is in the
    issue's note; here only that it does not wait for the plugin)."""
    site = tmp_path / "site"
    write_dist(site, "tp-sleepy", {"sleepy": "tp_sleepy"}, {"tp_sleepy": "import time\ntime.sleep(30)\n" + GOOD})
    t0 = time.monotonic()
    proc = run_cera(["--help"], [site], timeout=60)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert "Commands:" in proc.stdout and "run " in proc.stdout
    assert "Not listed: the commands of plugin(s) sleepy, still importing after" in " ".join(proc.stdout.split())
    assert elapsed < 10, f"cera --help took {elapsed:.1f} s"


def test_help_waits_longer_for_third_party_plugins_when_told(tmp_path):
    site = tmp_path / "site"
    command = HEADER + """
import click

@cera.hookimpl
def cera_register_commands(register):
    register(click.Command("tp-hello", help="Say hello."))
"""
    write_dist(site, "tp-sleepy", {"sleepy": "tp_sleepy"}, {"tp_sleepy": "import time\ntime.sleep(1)\n" + command})
    listed = run_cera(["--help"], [site], CERA_HELP_PLUGIN_WAIT="60").stdout
    assert "Not listed" not in listed and "tp-hello" in listed
    hidden = run_cera(["--help"], [site], CERA_HELP_PLUGIN_WAIT="0").stdout
    assert "tp-hello" not in hidden and "still importing after 0 s" in " ".join(hidden.split())


@pytest.mark.parametrize("raise_", ["SystemExit(0)", "KeyboardInterrupt()"])
def test_help_and_plugins_work_with_a_plugin_that_exits_at_import(tmp_path, raise_):
    site = tmp_path / "site"
    write_dist(site, "tp-exits", {"tp-exits": "tp_exits"}, {"tp_exits": f"raise {raise_}\n"})
    assert "Commands:" in run_cera(["--help"], [site]).stdout
    proc = run_cera(["plugins"], [site])
    assert proc.returncode == 0, proc.stderr
    assert "import of 'tp_exits' failed: " + raise_.split("(")[0] in proc.stdout


def test_auto_passes_over_a_backend_whose_constructor_raises(smollm2_path, site_module):
    """Reproduction: a higher-priority backend whose constructor raised aborted --device
    auto with a traceback."""
    from cera.engine import load

    sys.modules["tp_broken_backend_impl"] = site_module(
        "tp_broken_backend_impl",
        """
class Broken:
    def __init__(self, **options):
        raise RuntimeError("no device here after all")
""",
    )
    try:
        m = plugins.get_manager()
        src = (
            HEADER
            + """
@cera.hookimpl
def cera_register_backends(register):
    register(cera.BackendSpec(name="tp-broken", factory="tp_broken_backend_impl:Broken", priority=10_000,
             tensor_types=("F32", "F16", "Q4_1", "Q8_0", "Q4_0", "Q6_K", "Q4_K", "Q5_K", "Q5_0", "Q5_1"),
             ops=tuple(cera.backend.OPS)))
"""
        )
        assert m.register_plugin(site_module("tp_broken_backend", src), "tp-broken").status == "ok"
        loaded = load(smollm2_path, manager=m)
        try:
            assert loaded.backend.name == "cpu"
            assert any(
                n.startswith("tp-broken: starting it failed: RuntimeError: no device here")
                for n in loaded.backend_notes
            )
        finally:
            loaded.close()
        with pytest.raises(cera.BackendUnavailable, match="starting it failed: RuntimeError"):
            load(smollm2_path, device="tp-broken", manager=m)
    finally:
        del sys.modules["tp_broken_backend_impl"]


# -- every kind of name, not only backends ----------------------------------------------------

CLAIMS = {
    "architecture": (
        "cera_register_models",
        'cera.ModelFamily(name="{fam}", architectures=("{name}",), factory="{mod}:F")',
    ),
    "audio": ("cera_register_audio", 'cera.AudioComponent(name="{name}", kind="vad", factory="{mod}:A")'),
    "command": ("cera_register_commands", 'click.Command("{name}", callback=lambda: None)'),
}


def claim_source(kind: str, name: str, mod: str) -> str:
    hook, item = CLAIMS[kind]
    item = item.format(name=name, mod=mod, fam=f"{mod}-family")
    return HEADER + f"import click\n\n@cera.hookimpl\ndef {hook}(register):\n    register({item})\n"


def owners_of(kind: str) -> str:
    table = {"architecture": "m.architectures", "audio": "m.audio", "command": "m.commands"}[kind]
    return (
        f"reg = {table}\n"
        "rec = {r.name: r.error for r in m.records}\n"
        "out = {'rec': rec, 'item': {k: (getattr(v, 'factory', None) or getattr(v, 'callback', None) and "
        "v.callback.__module__) for k, v in reg.items()}}"
    )


@pytest.mark.parametrize("order", ["ab", "ba"])
@pytest.mark.parametrize("kind", CLAIMS)
def test_two_plugins_claiming_a_name_of_any_kind_resolve_by_plugin_name(tmp_path, kind, order):
    a, b = tmp_path / "a", tmp_path / "b"
    write_dist(a, "tp-alpha", {"tp-alpha": "tp_alpha"}, {"tp_alpha": claim_source(kind, "tp-shared", "alpha")})
    write_dist(b, "tp-beta", {"tp-beta": "tp_beta"}, {"tp_beta": claim_source(kind, "tp-shared", "beta")})
    out = manager_in_subprocess([a, b] if order == "ab" else [b, a], owners_of(kind), CERA_PLUGINS="tp-alpha,tp-beta")
    assert out["rec"]["tp-alpha"] is None
    assert out["rec"]["tp-beta"] == f"registers {kind} 'tp-shared', which plugin 'tp-alpha' already registered"
    if kind != "command":
        assert out["item"]["tp-shared"] == "alpha:" + ("F" if kind == "architecture" else "A")


FIRST_PARTY_CLAIMS = {
    "architecture": ("qwen2", "qwen2", "cera-model-qwen2"),
    "audio": ("silero-vad", "vad", "cera-audio-vad"),
    "command": ("transcribe", "whisper", "cera-audio-whisper"),
}


@pytest.mark.parametrize("kind", FIRST_PARTY_CLAIMS)
def test_a_third_party_plugin_cannot_take_a_first_party_name_of_any_kind(tmp_path, kind):
    name, holder, dist = FIRST_PARTY_CLAIMS[kind]
    site = tmp_path / "site"
    write_dist(site, "tp-impostor", {"aaa-impostor": "tp_impostor"}, {"tp_impostor": claim_source(kind, name, "imp")})
    out = manager_in_subprocess([site], owners_of(kind))
    assert out["rec"][holder] is None
    assert out["rec"]["aaa-impostor"].startswith(
        f"registers {kind} {name!r}, which plugin {holder!r} ({dist}, a distribution of cera itself) already registered"
    )
    if kind != "command":
        assert not str(out["item"][name]).startswith("imp:")


def test_a_plugin_cannot_take_a_built_in_command(site_module):
    from cera_cli import main as cli_main  # reserves the built-in command names

    m = cli_main._plugins.PluginManager(allow=set())
    rec = m.register_plugin(site_module("tp_run", claim_source("command", "run", "tp_run")), "tp-run")
    assert rec.status == "error"
    assert rec.error == "registers command 'run', which is reserved by cera-cli (a built-in command)"
    assert "run" not in m.commands


HANGING_PROBE = (
    HEADER
    + """
import time


def _hang():
    time.sleep(120)


@cera.hookimpl
def cera_register_backends(register):
    register(cera.BackendSpec(name="tp-hangs", factory="tp_hangprobe:B", available=_hang, priority=100,
                              tensor_types=("F32",)))
"""
)


@pytest.mark.parametrize("command", ["inspect", "plugins"])
def test_cera_inspect_and_plugins_finish_with_a_hanging_probe_installed(tmp_path, command):
    """Reproduction, end to end: a hanging availability probe hung `cera plugins` and
    `cera inspect`. The probe's limit is cut to 0.5 s here to keep the test short."""
    site = tmp_path / "site"
    write_dist(site, "tp-hangprobe", {"hangprobe": "tp_hangprobe"}, {"tp_hangprobe": HANGING_PROBE})
    model = REPO / "tests" / "models" / "reference" / "tiny" / "tiny-mistral.gguf"
    args = ["inspect", "-m", str(model)] if command == "inspect" else ["plugins"]
    env = {k: v for k, v in os.environ.items() if k not in ("CERA_PLUGINS", "CERA_PLUGIN_OVERRIDES")}
    env["PYTHONPATH"] = str(site)
    code = "import sys\nfrom cera.plugins import registry\nregistry.PROBE_TIMEOUT_S = 0.5\nfrom cera_cli.main import main\nmain()\n"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=100)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert "tp-hangs  not usable here: availability check did not finish within 0.5 s" in proc.stdout
    assert elapsed < 60, f"took {elapsed:.1f} s"
