"""`cera plugins`: run as a real process against real (fake-but-installed) distributions.

Each fake distribution is a module plus a `.dist-info` folder on PYTHONPATH, which is
what an installed distribution is to `importlib.metadata`. The test plugins cover a good
one and each way of being broken; the listing must report every one and keep working.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

HEADER = "import cera\nCERA_PLUGIN_API = '>=2,<3'\n"

GOOD = HEADER + """
def _offline():
    return "tp-offline needs a device this machine lacks"

@cera.hookimpl
def cera_register_backends(register):
    register(cera.BackendSpec(name="tp-fast", factory="tp_tripwire:Fast", tensor_types=("F32",)))
    register(cera.BackendSpec(name="tp-offline", factory="tp_tripwire:Off", available=_offline))

@cera.hookimpl
def cera_register_models(register):
    register(cera.ModelFamily(name="tp-fam", architectures=("tp-arch",), factory="tp_tripwire:Model"))

@cera.hookimpl
def cera_register_commands(register):
    import click

    @click.command("tp-hello")
    @click.option("--who", default="world")
    def hello(who):
        "Greet someone (a plugin command)."
        click.echo(f"hello {who} from tp-good")

    register(hello)
"""

BROKEN = {
    "tp-broken-import": ("tp_broken_import", "raise RuntimeError('this plugin is broken on purpose')\n"),
    "tp-old-api": ("tp_old_api", "import cera\nCERA_PLUGIN_API = '>=3,<4'\n"),
    "tp-no-api": ("tp_no_api", "import cera\n"),
    "tp-cmd-clash": (
        "tp_cmd_clash",
        HEADER + "import click\n@cera.hookimpl\ndef cera_register_commands(register):\n    register(click.Command('inspect'))\n",
    ),
}
# Listed first on PYTHONPATH, yet tp-good keeps the contested name: plugins register in order
# of their names (tp-good < tp-zdup), never in the order they are discovered.
DUPLICATE = HEADER + """
@cera.hookimpl
def cera_register_backends(register):
    register(cera.BackendSpec(name="tp-dup-own", factory="a:b"))

@cera.hookimpl
def cera_register_models(register):
    register(cera.ModelFamily(name="tp-dup-fam", architectures=("tp-arch",), factory="a:b"))
"""

TRIPWIRE = "raise AssertionError('a backend or model factory module was imported')\n"


def write_dist(site: Path, dist: str, version: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
    """Make `dist` look installed in folder `site`: modules plus a minimal .dist-info."""
    site.mkdir(parents=True, exist_ok=True)
    for mod, source in modules.items():
        (site / f"{mod}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    eps = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[cera]\n{eps}")


@pytest.fixture(scope="module")
def sites(tmp_path_factory) -> list[Path]:
    first = tmp_path_factory.mktemp("site1")
    second = tmp_path_factory.mktemp("site2")
    write_dist(first, "tp-good", "1.0.0", {"tp-good": "tp_good"}, {"tp_good": GOOD, "tp_tripwire": TRIPWIRE})
    for name, (mod, source) in BROKEN.items():
        write_dist(first, name, "0.1", {name: mod}, {mod: source})
    write_dist(first, "tp-zdup", "0.2", {"tp-zdup": "tp_zdup"}, {"tp_zdup": DUPLICATE})
    return [first, second]


def cera(args, sites=(), env_extra=None, check=True) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("CERA_PLUGINS", None)
    env["PYTHONPATH"] = os.pathsep.join(str(s) for s in sites)
    env.update(env_extra or {})
    proc = subprocess.run(
        [sys.executable, "-c", "from cera_cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def by_name(report: list[dict]) -> dict[str, dict]:
    names = [e["name"] for e in report]
    assert len(names) == len(set(names)), names
    return {e["name"]: e for e in report}


def test_json_reports_good_and_broken_plugins(sites):
    report = json.loads(cera(["plugins", "--json"], sites).stdout)
    for entry in report:
        assert set(entry) == {"name", "distribution", "version", "status", "error", "registered", "backend_status"}
        assert set(entry["registered"]) == {"backends", "architectures", "audio", "commands"}
        assert entry["status"] in ("ok", "error")
        assert (entry["error"] is None) == (entry["status"] == "ok")
    plugins = by_name(report)

    good = plugins["tp-good"]
    assert (good["distribution"], good["version"], good["status"], good["error"]) == ("tp-good", "1.0.0", "ok", None)
    assert good["registered"] == {
        "backends": ["tp-fast", "tp-offline"],
        "architectures": ["tp-arch"],
        "audio": [],
        "commands": ["tp-hello"],
    }
    assert good["backend_status"] == [
        {"name": "tp-fast", "usable": True, "reason": None},
        {"name": "tp-offline", "usable": False, "reason": "tp-offline needs a device this machine lacks"},
    ]

    expected_errors = {
        "tp-broken-import": "import of 'tp_broken_import' failed: RuntimeError: this plugin is broken on purpose",
        "tp-old-api": "targets plugin API '>=3,<4' but this cera-core provides API 2; upgrade the plugin or cera-core",
        "tp-no-api": "does not declare CERA_PLUGIN_API (the plugin-API versions it supports, e.g. '>=2,<3')",
        "tp-cmd-clash": "registers command 'inspect', which is reserved by cera-cli (a built-in command)",
        "tp-zdup": "registers architecture 'tp-arch', which plugin 'tp-good' already registered",
    }
    for name, error in expected_errors.items():
        entry = plugins[name]
        assert (entry["status"], entry["error"]) == ("error", error), name
        assert entry["distribution"] == name
        assert entry["registered"] == {"backends": [], "architectures": [], "audio": [], "commands": []}, name
        assert entry["backend_status"] == []


def test_json_matches_the_installed_entry_points_without_test_plugins():
    """With nothing added, the listing shows exactly what importlib.metadata sees installed."""
    report = json.loads(cera(["plugins", "--json"]).stdout)
    installed = {(ep.name, ep.dist.metadata["Name"], ep.dist.version) for ep in metadata.entry_points(group="cera")}
    assert {(e["name"], e["distribution"], e["version"]) for e in report} == installed
    broken = [e for e in report if e["status"] != "ok"]
    assert broken == [], f"installed plugins fail to load: {broken}"


def test_table_lists_plugins_backends_and_errors(sites):
    out = cera(["plugins"], sites).stdout
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "DISTRIBUTION", "VERSION", "STATUS", "REGISTERED"]
    row = next(line for line in lines if line.startswith("tp-good "))
    assert row.split()[:4] == ["tp-good", "tp-good", "1.0.0", "ok"]
    assert "backends: tp-fast, tp-offline; architectures: tp-arch; commands: tp-hello" in row
    assert next(line for line in lines if line.startswith("tp-old-api ")).split()[:4] == ["tp-old-api", "tp-old-api", "0.1", "error"]
    assert any(line.split() == ["tp-fast", "usable"] for line in lines)
    assert "  tp-offline  not usable here: tp-offline needs a device this machine lacks" in lines
    errors = lines[lines.index("Errors (these plugins were skipped; everything else works):") + 1 :]
    assert "  tp-broken-import (tp-broken-import 0.1): import of 'tp_broken_import' failed: RuntimeError: this plugin is broken on purpose" in errors
    assert any(e.startswith("  tp-zdup (tp-zdup 0.2): registers architecture 'tp-arch'") for e in errors)


def test_allowlist_and_no_plugins_switch(sites):
    assert json.loads(cera(["plugins", "--json"], sites, {"CERA_PLUGINS": ""}).stdout) == []
    assert json.loads(cera(["--no-plugins", "plugins", "--json"], sites).stdout) == []
    only = json.loads(cera(["plugins", "--json"], sites, {"CERA_PLUGINS": "tp-good,tp-old-api"}).stdout)
    assert [(e["name"], e["status"]) for e in only] == [("tp-good", "ok"), ("tp-old-api", "error")]
    text = cera(["plugins"], sites, {"CERA_PLUGINS": "tp-good,tp-typo"}).stdout
    assert "Not loaded because CERA_PLUGINS does not name them: " in text and "tp-zdup" in text
    assert "CERA_PLUGINS names tp-typo, which match no installed plugin or distribution." in text
    text = cera(["--no-plugins", "plugins"], sites).stdout
    assert text.startswith("No plugins loaded: plugins are disabled")


def test_plugin_commands_join_the_cli_and_no_plugins_removes_them(sites):
    # The help waits only 0.04 s for a third party's import; on a loaded test machine, longer.
    help_text = cera(["--help"], sites, {"CERA_HELP_PLUGIN_WAIT": "30"}).stdout
    assert "tp-hello" in help_text and "Greet someone (a plugin command)." in help_text
    assert "plugins" in help_text and "inspect" in help_text
    assert cera(["tp-hello", "--who", "tests"], sites).stdout == "hello tests from tp-good\n"
    assert "tp-hello" not in cera(["--no-plugins", "--help"], sites).stdout
    assert "tp-hello" not in cera(["--help", "--no-plugins"], sites).stdout
    proc = cera(["--no-plugins", "tp-hello"], sites, check=False)
    assert proc.returncode == 2 and "No such command 'tp-hello'" in proc.stderr
    # The built-in inspect is not replaced by the clashing plugin's command.
    assert "-m, --model FILE" in cera(["inspect", "--help"], sites).stdout


def test_version():
    lines = cera(["--version"]).stdout.splitlines()
    assert lines[0] == f"cera {metadata.version('cera-cli')}"
    assert f"  cera-core {metadata.version('cera-core')}" in lines[1:]
