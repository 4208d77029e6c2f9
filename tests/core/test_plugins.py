"""The plugin core: discovery through entry points, per-plugin isolation, the allowlist.

Plugins here are real: small modules with a `.dist-info` folder (METADATA and
entry_points.txt) on sys.path, which is all `importlib.metadata` needs to see an installed
distribution. Every test asserts on what was registered and on the recorded reasons,
and checks that one plugin's failure leaves the others working.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types
from pathlib import Path

import click
import pytest

import cera
from cera.plugins import manager as plugins
from cera.errors import BackendUnavailable, PluginError, UnsupportedArchitecture
from cera.plugins.manager import PluginManager, PluginRecord
from cera.plugins.registry import AudioComponent, BackendSpec, ModelFamily, load_factory

HEADER = "import cera\nCERA_PLUGIN_API = '>=2,<3'\n"


def write_dist(site: Path, dist: str, version: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
    """Make `dist` look installed in folder `site`: modules plus a minimal .dist-info."""
    for mod, source in modules.items():
        (site / f"{mod}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    eps = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{cera.ENTRY_POINT_GROUP}]\n{eps}")


def module(name: str, source: str) -> types.ModuleType:
    """An in-memory plugin module."""
    m = types.ModuleType(name)
    exec(textwrap.dedent(source), m.__dict__)
    return m


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on sys.path for fake distributions; their modules are forgotten afterwards."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    before = set(sys.modules)
    yield folder
    for name in set(sys.modules) - before:
        if name.startswith("tp_"):
            del sys.modules[name]


@pytest.fixture(autouse=True)
def fresh_process_manager():
    plugins.set_manager(None)
    yield
    plugins.set_manager(None)


GOOD = HEADER + """
@cera.hookimpl
def cera_register_backends(register):
    register(cera.BackendSpec(name="tp-dev", factory="tp_never_imported:Dev", tensor_types=("F32", "Q8_0")))

@cera.hookimpl
def cera_register_models(register):
    register(cera.ModelFamily(name="tp-fam", architectures=("tp-arch", "tp-arch2"), factory="tp_never_imported:M"))

@cera.hookimpl
def cera_register_audio(register):
    register(cera.AudioComponent(name="tp-vad", kind="vad", factory="tp_never_imported:V"))

@cera.hookimpl
def cera_register_commands(register):
    import click

    @click.command("tp-hello")
    def hello():
        click.echo("hello from tp")

    register(hello)
"""


def load(allow=None) -> PluginManager:
    m = PluginManager(allow=allow)
    m.load_entry_points()
    return m


def record(m: PluginManager, name: str) -> PluginRecord:
    matches = [r for r in m.records if r.name == name]
    assert len(matches) == 1, (name, m.records)
    return matches[0]


# -- a good plugin -----------------------------------------------------------------------


def test_good_plugin_registers_everything_declaratively(site):
    write_dist(site, "tp-good", "1.2.3", {"tp-good": "tp_good"}, {"tp_good": GOOD})
    m = load(allow={"tp-good"})
    r = record(m, "tp-good")
    assert r.to_json() == {
        "name": "tp-good",
        "distribution": "tp-good",
        "version": "1.2.3",
        "status": "ok",
        "error": None,
        "registered": {
            "backends": ["tp-dev"],
            "architectures": ["tp-arch", "tp-arch2"],
            "audio": ["tp-vad"],
            "commands": ["tp-hello"],
        },
    }
    assert m.backend_spec("tp-dev").tensor_types == ("F32", "Q8_0")
    assert m.family_for("tp-arch2").name == "tp-fam"
    assert [a.name for a in m.audio_components("vad")] == ["tp-vad"]
    assert m.audio_components("kws") == []
    assert isinstance(m.commands["tp-hello"], click.Command)
    assert m.plugin_of("backend", "tp-dev") == "tp-good"
    # Registration is declarative: the factory module was never imported.
    assert "tp_never_imported" not in sys.modules


def test_lookups_of_missing_names_raise_errors_that_name_what_is_installed(site):
    write_dist(site, "tp-good", "1", {"tp-good": "tp_good"}, {"tp_good": GOOD})
    m = load(allow={"tp-good"})
    with pytest.raises(UnsupportedArchitecture, match=r"'nope'.*tp-arch, tp-arch2"):
        m.family_for("nope")
    with pytest.raises(BackendUnavailable, match=r"no backend named 'gpu9'.*installed: tp-dev"):
        m.backend_spec("gpu9")


def test_hook_taking_no_arguments_is_accepted(site):
    # pluggy lets an implementation take a subset of the spec's arguments.
    write_dist(
        site,
        "tp-noargs",
        "1",
        {"tp-noargs": "tp_noargs"},
        {"tp_noargs": HEADER + "@cera.hookimpl\ndef cera_register_models():\n    pass\n"},
    )
    assert record(load(allow={"tp-noargs"}), "tp-noargs").status == "ok"


# -- isolation ---------------------------------------------------------------------------


def test_import_error_is_recorded_and_others_keep_working(site):
    write_dist(site, "tp-good", "1", {"tp-good": "tp_good"}, {"tp_good": GOOD})
    write_dist(site, "tp-bad", "0.9", {"tp-bad": "tp_bad"}, {"tp_bad": "raise RuntimeError('boom at import')\n"})
    m = load(allow={"tp-good", "tp-bad"})
    bad = record(m, "tp-bad")
    assert (bad.status, bad.distribution, bad.version) == ("error", "tp-bad", "0.9")
    assert bad.error == "import of 'tp_bad' failed: RuntimeError: boom at import"
    assert bad.backends == bad.architectures == bad.audio == bad.commands == []
    assert record(m, "tp-good").status == "ok"
    assert m.family_for("tp-arch").name == "tp-fam"


def test_missing_dependency_and_system_exit_at_import_are_contained(site):
    write_dist(site, "tp-dep", "1", {"tp-dep": "tp_dep"}, {"tp_dep": "import tp_module_that_does_not_exist\n"})
    write_dist(site, "tp-exit", "1", {"tp-exit": "tp_exit"}, {"tp_exit": "raise SystemExit(3)\n"})
    m = load(allow={"tp-dep", "tp-exit"})
    assert "ModuleNotFoundError" in record(m, "tp-dep").error
    assert "tp_module_that_does_not_exist" in record(m, "tp-dep").error
    assert record(m, "tp-exit").error == "import of 'tp_exit' failed: SystemExit: 3"


@pytest.mark.parametrize(
    "declaration, reason",
    [
        ("", "does not declare CERA_PLUGIN_API"),
        ("CERA_PLUGIN_API = '>=3'", "targets plugin API '>=3' but this cera-core provides API 2"),
        ("CERA_PLUGIN_API = '<1'", "targets plugin API '<1' but this cera-core provides API 2"),
        ("CERA_PLUGIN_API = 'version one'", "is not a version specifier"),
        ("CERA_PLUGIN_API = 1", "is not a version specifier"),
    ],
)
def test_plugin_api_version_is_checked_before_any_hook_runs(site, declaration, reason):
    source = f"""
import cera
{declaration}
HOOK_RAN = []

@cera.hookimpl
def cera_register_models(register):
    HOOK_RAN.append(1)
    register(cera.ModelFamily(name="tp-api", architectures=("tp-api",), factory="x:y"))
"""
    write_dist(site, "tp-api", "1", {"tp-api": "tp_api"}, {"tp_api": source})
    m = load(allow={"tp-api"})
    r = record(m, "tp-api")
    assert r.status == "error" and reason in r.error
    assert sys.modules["tp_api"].HOOK_RAN == []
    assert "tp-api" not in m.architectures


def test_api_range_including_the_current_version_is_accepted():
    m = PluginManager(allow=set())
    src = f"import cera\nCERA_PLUGIN_API = '>={cera.PLUGIN_API_VERSION},<{cera.PLUGIN_API_VERSION + 1}'\n"
    assert m.register_plugin(module("tp_range", src), "tp-range").status == "ok"


def test_duplicate_name_rolls_back_every_registration_of_the_second_plugin(site):
    first = HEADER + """
@cera.hookimpl
def cera_register_backends(register):
    register(cera.BackendSpec(name="tp-shared", factory="a:b"))
"""
    # The second plugin's models hook runs (and registers) before its backends hook conflicts.
    second = HEADER + """
@cera.hookimpl
def cera_register_models(register):
    register(cera.ModelFamily(name="tp-second-fam", architectures=("tp-second-arch",), factory="a:b"))

@cera.hookimpl
def cera_register_backends(register):
    register(cera.BackendSpec(name="tp-other", factory="a:b"))
    register(cera.BackendSpec(name="tp-shared", factory="c:d"))

@cera.hookimpl
def cera_register_commands(register):
    import click
    register(click.Command("tp-second-cmd"))
"""
    write_dist(site, "tp-first", "1", {"tp-first": "tp_first"}, {"tp_first": first})
    write_dist(site, "tp-second", "1", {"tp-second": "tp_second"}, {"tp_second": second})
    m = load(allow={"tp-first", "tp-second"})
    r = record(m, "tp-second")
    assert r.status == "error"
    assert r.error == "registers backend 'tp-shared', which plugin 'tp-first' already registered"
    assert r.backends == r.architectures == r.commands == []
    # Nothing of the second plugin survives, including what its other hooks registered.
    assert set(m.backends) >= {"tp-shared"} and "tp-other" not in m.backends
    assert "tp-second-fam" not in m.families and "tp-second-arch" not in m.architectures
    assert "tp-second-cmd" not in m.commands
    assert m.backends["tp-shared"].factory == "a:b"
    assert m.plugin_of("backend", "tp-shared") == "tp-first"
    assert not any(k[1].startswith("tp-second") or k[1] == "tp-other" for k in m.owner)
    # ... and its hooks are no longer registered with pluggy.
    assert m.pm.get_plugin("tp-second") is None
    assert record(m, "tp-first").status == "ok"


def test_architecture_claimed_by_two_families_conflicts():
    m = PluginManager(allow=set())
    a = module("tp_a", HEADER + """
@cera.hookimpl
def cera_register_models(register):
    register(cera.ModelFamily(name="fa", architectures=("shared-arch",), factory="a:b"))
""")
    b = module("tp_b", HEADER + """
@cera.hookimpl
def cera_register_models(register):
    register(cera.ModelFamily(name="fb", architectures=("own-arch", "shared-arch"), factory="a:b"))
""")
    assert m.register_plugin(a, "a").status == "ok"
    rb = m.register_plugin(b, "b")
    assert rb.error == "registers architecture 'shared-arch', which plugin 'a' already registered"
    assert "own-arch" not in m.architectures and "fb" not in m.families


def test_the_same_name_twice_within_one_plugin_is_an_error():
    m = PluginManager(allow=set())
    p = module("tp_twice", HEADER + """
@cera.hookimpl
def cera_register_audio(register):
    register(cera.AudioComponent(name="vad1", kind="vad", factory="a:b"))
    register(cera.AudioComponent(name="vad1", kind="vad", factory="a:c"))
""")
    r = m.register_plugin(p, "twice")
    assert (r.status, r.error) == ("error", "registers audio 'vad1' twice")
    assert m.audio == {}


def test_hook_that_raises_rolls_back_the_plugins_other_hooks():
    m = PluginManager(allow=set())
    p = module("tp_raises", HEADER + """
@cera.hookimpl
def cera_register_backends(register):
    register(cera.BackendSpec(name="tp-raise-dev", factory="a:b"))

@cera.hookimpl
def cera_register_models(register):
    raise ValueError("cannot read my config")
""")
    r = m.register_plugin(p, "raises")
    assert r.status == "error"
    assert r.error == "ValueError in a registration hook: cannot read my config"
    assert m.backends == {} and m.owner == {}
    assert m.pm.get_plugin("raises") is None
    # The manager keeps working for the next plugin.
    ok = module("tp_ok", HEADER + """
@cera.hookimpl
def cera_register_backends(register):
    register(cera.BackendSpec(name="tp-raise-dev", factory="a:b"))
""")
    assert m.register_plugin(ok, "ok").status == "ok"
    assert list(m.backends) == ["tp-raise-dev"]


@pytest.mark.parametrize(
    "body, reason",
    [
        (
            "@cera.hookimpl\ndef cera_register_backends(register):\n    register(cera.ModelFamily(name='x', architectures=('x',), factory='a:b'))\n",
            "cera_register_backends registered ModelFamily",
        ),
        (
            "@cera.hookimpl\ndef cera_register_commands(register):\n    register(print)\n",
            "cera_register_commands registered <built-in function print>, expected a click command",
        ),
        (
            "@cera.hookimpl\ndef cera_register_modles(register):\n    pass\n",
            "implements unknown hook(s) ['cera_register_modles']",
        ),
        (
            "@cera.hookimpl\ndef cera_register_models(register, extra):\n    pass\n",
            "invalid hook implementation",
        ),
        (
            "@cera.hookimpl(wrapper=True)\ndef cera_register_models(register):\n    yield\n",
            "declared as a hook wrapper",
        ),
        (
            "@cera.hookimpl\ndef cera_register_models(register):\n    register(cera.ModelFamily(name='x', architectures=('x',), factory='not-a-factory'))\n",
            "factory must be 'module:attr'",
        ),
    ],
)
def test_invalid_registrations_are_reported(body, reason):
    m = PluginManager(allow=set())
    r = m.register_plugin(module("tp_invalid", HEADER + body), "invalid")
    assert r.status == "error"
    assert reason in r.error
    assert m.backends == {} and m.families == {} and m.commands == {}


def test_register_kept_and_called_after_the_hook_returned_is_refused():
    m = PluginManager(allow=set())
    p = module("tp_late", HEADER + """
KEPT = []

@cera.hookimpl
def cera_register_backends(register):
    KEPT.append(register)
""")
    assert m.register_plugin(p, "late").status == "ok"
    with pytest.raises(PluginError, match="after the hook returned"):
        p.KEPT[0](cera.BackendSpec(name="sneaky", factory="a:b"))
    assert m.backends == {}


def test_reserved_names_are_refused_with_the_holder():
    m = PluginManager(allow=set(), reserved={("command", "inspect"): "cera-cli (a built-in command)"})
    p = module("tp_cmd", HEADER + """
import click

@cera.hookimpl
def cera_register_commands(register):
    register(click.Command("inspect"))
""")
    r = m.register_plugin(p, "cmd")
    assert r.error == "registers command 'inspect', which is reserved by cera-cli (a built-in command)"
    assert m.commands == {}


def test_two_distributions_with_the_same_plugin_name(site):
    write_dist(site, "tp-one", "1", {"tp-same": "tp_one"}, {"tp_one": GOOD})
    write_dist(site, "tp-two", "1", {"tp-same": "tp_two"}, {"tp_two": HEADER})
    m = load(allow={"tp-same"})
    recs = sorted((r for r in m.records if r.name == "tp-same"), key=lambda r: r.status)
    assert [r.status for r in recs] == ["error", "ok"]
    assert recs[0].error == "a plugin named 'tp-same' is already loaded"
    assert {recs[0].distribution, recs[1].distribution} == {"tp-one", "tp-two"}


def test_two_entry_points_naming_one_module():
    m = PluginManager(allow=set())
    p = module("tp_shared_mod", GOOD)
    assert m.register_plugin(p, "first").status == "ok"
    r = m.register_plugin(p, "second")
    assert r.error == "its module is already loaded as plugin 'first'"


def test_get_manager_called_from_a_plugin_import_does_not_hang(tmp_path):
    """A plugin asking for the manager while plugins load gets an error, not a deadlock."""
    site = tmp_path / "site"
    site.mkdir()
    write_dist(
        site,
        "tp-reentrant",
        "1",
        {"tp-reentrant": "tp_reentrant"},
        {"tp_reentrant": HEADER + "from cera.plugins.manager import get_manager\nget_manager()\n"},
    )
    write_dist(site, "tp-good", "1", {"tp-good": "tp_good"}, {"tp_good": GOOD})
    code = (
        f"import sys; sys.path.insert(0, {str(site)!r})\n"
        "from cera.plugins.manager import get_manager\n"
        "m = get_manager()\n"
        "for r in m.records:\n"
        "    if r.name.startswith('tp-'): print(r.name, r.status, r.error)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"CERA_PLUGINS": "tp-reentrant,tp-good", "PATH": ""},
    )
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["tp-good"] == "ok None"
    assert lines["tp-reentrant"].startswith("error import of 'tp_reentrant' failed: PluginError:")
    assert "while plugins are loading" in lines["tp-reentrant"]


# -- the allowlist ------------------------------------------------------------------------


@pytest.fixture
def three_plugins(site):
    write_dist(site, "tp-good", "1", {"tp-good": "tp_good"}, {"tp_good": GOOD})
    write_dist(site, "tp-bad", "1", {"tp-bad": "tp_bad"}, {"tp_bad": "raise RuntimeError('x')\n"})
    write_dist(site, "tp-dist-c", "1", {"tp-c": "tp_c"}, {"tp_c": HEADER})
    return site


def _tp_names(m: PluginManager) -> set[str]:
    return {r.name for r in m.records if r.name.startswith("tp-")}


def test_allowlist_unset_loads_every_plugin(three_plugins, monkeypatch):
    monkeypatch.delenv("CERA_PLUGINS", raising=False)
    assert plugins.allowlist_from_env() is None
    m = plugins.get_manager()
    assert _tp_names(m) == {"tp-good", "tp-bad", "tp-c"}
    assert m.skipped == []


def test_allowlist_empty_loads_nothing(three_plugins, monkeypatch):
    monkeypatch.setenv("CERA_PLUGINS", "")
    assert plugins.allowlist_from_env() == set()
    m = plugins.get_manager()
    assert m.records == [] and m.backends == {} and m.architectures == {}
    assert {("tp-good", "tp-good"), ("tp-bad", "tp-bad"), ("tp-c", "tp-dist-c")} <= set(m.skipped)
    assert "tp_good" not in sys.modules and "tp_bad" not in sys.modules


def test_allowlist_by_plugin_or_distribution_name(three_plugins, monkeypatch):
    # "tp-dist-c" is a distribution name, "tp-good" a plugin name; spaces around commas are fine.
    monkeypatch.setenv("CERA_PLUGINS", " tp-good , tp-dist-c,tp-typo,")
    m = plugins.get_manager()
    assert {r.name for r in m.records} == {"tp-good", "tp-c"}
    assert "tp_bad" not in sys.modules
    assert ("tp-bad", "tp-bad") in m.skipped
    assert m.unknown_allowlist_names() == ["tp-typo"]


def test_get_manager_is_cached_until_reset(three_plugins, monkeypatch):
    monkeypatch.setenv("CERA_PLUGINS", "tp-good")
    m = plugins.get_manager()
    assert plugins.get_manager() is m
    plugins.set_manager(None)
    monkeypatch.setenv("CERA_PLUGINS", "")
    assert plugins.get_manager() is not m and plugins.get_manager().records == []


# -- declarations ----------------------------------------------------------------------------


def test_load_factory_imports_lazily_and_reports_failures(site):
    (site / "tp_factory_mod.py").write_text("class Thing:\n    class Inner:\n        pass\n")
    (site / "tp_factory_broken.py").write_text("raise ImportError('needs a GPU driver')\n")
    assert "tp_factory_mod" not in sys.modules
    assert load_factory("tp_factory_mod:Thing.Inner").__qualname__ == "Thing.Inner"
    with pytest.raises(PluginError, match=r"factory 'tp_factory_mod:Missing': module 'tp_factory_mod' has no attribute"):
        load_factory("tp_factory_mod:Missing")
    with pytest.raises(PluginError, match=r"cannot import 'tp_factory_broken'.*ImportError: needs a GPU driver"):
        load_factory("tp_factory_broken:X")


def test_backend_availability_check():
    assert BackendSpec(name="a", factory="m:a").unavailable_reason() is None
    assert BackendSpec(name="b", factory="m:b", available=lambda: "no GPU").unavailable_reason() == "no GPU"

    def broken():
        raise OSError("driver crashed")

    reason = BackendSpec(name="c", factory="m:c", available=broken).unavailable_reason()
    assert reason == "availability check failed: OSError: driver crashed"


def test_declarations_validate_their_fields():
    assert ModelFamily(name="f", architectures="one", factory="m:f").architectures == ("one",)
    with pytest.raises(PluginError, match="factory must be 'module:attr'"):
        BackendSpec(name="x", factory="m:")
    with pytest.raises(ValueError):
        AudioComponent(name="x", kind="camera", factory="m:x")
