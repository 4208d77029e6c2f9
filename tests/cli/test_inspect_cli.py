"""`cera inspect`: header facts checked against `gguf.GGUFReader`, and plugin admission
checked against plugins whose declarations the test controls.

The in-process tests install a plugin manager holding only test plugins, so what inspect
says about families and backends follows from their declarations alone. Their factory
strings point at a module that does not exist: if inspect imported backend or model
code, the import would fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from collections import Counter

import pytest
from click.testing import CliRunner
from gguf import GGUFReader

from cera.plugins import manager as plugins
from cera.plugins.manager import PluginManager
from cera_cli.main import cli

HEADER = "import cera\nCERA_PLUGIN_API = '>=2,<3'\n"

FAMILY = HEADER + """
@cera.hookimpl
def cera_register_models(register):
    register(cera.ModelFamily(name="tp-llama", architectures=("llama", "tp-other"), factory="tp_not_a_module:M"))
"""

BACKENDS = HEADER + """
def _offline():
    return "no tp device on this machine"

@cera.hookimpl
def cera_register_backends(register):
    register(cera.BackendSpec(name="tp-full", factory="tp_not_a_module:A", tensor_types=("F32", "Q4_1", "Q8_0"), priority=5))
    register(cera.BackendSpec(name="tp-noq41", factory="tp_not_a_module:B", tensor_types=("F32", "Q8_0", "Q4_K"), priority=9))
    register(cera.BackendSpec(name="tp-offline", factory="tp_not_a_module:C", tensor_types=("F32", "Q4_1", "Q8_0"), available=_offline))
"""


def module(name: str, source: str) -> types.ModuleType:
    m = types.ModuleType(name)
    exec(textwrap.dedent(source), m.__dict__)
    return m


@pytest.fixture
def manager():
    # tp-llama claims 'llama', which cera-model-llama owns: replacing it is on purpose here
    m = PluginManager(allow=set(), overrides={("architecture", "llama"): "tp-family"})
    assert m.register_plugin(module("tp_family", FAMILY), "tp-family", "tp-family-dist", "3.1").status == "ok"
    assert m.register_plugin(module("tp_backends", BACKENDS), "tp-backends").status == "ok"
    plugins.set_manager(m)
    yield m
    plugins.set_manager(None)


@pytest.fixture
def no_plugins():
    plugins.set_manager(PluginManager(allow=set()))
    yield
    plugins.set_manager(None)


@pytest.fixture(scope="module")
def reference(smollm2_path):
    """What the format's reference reader says about the SmolLM2 file."""
    reader = GGUFReader(smollm2_path)
    counts, nbytes = Counter(), Counter()
    for t in reader.tensors:
        counts[t.tensor_type.name] += 1
        nbytes[t.tensor_type.name] += int(t.n_bytes)
    fields = reader.fields
    return {
        "counts": counts,
        "bytes": nbytes,
        "parameters": sum(int(t.n_elements) for t in reader.tensors),
        "context_length": int(fields["llama.context_length"].contents()),
        "block_count": int(fields["llama.block_count"].contents()),
        "tokenizer": fields["tokenizer.ggml.model"].contents(),
        "pre": fields["tokenizer.ggml.pre"].contents(),
        "vocab": len(fields["tokenizer.ggml.tokens"].data),
        "name": fields["general.name"].contents(),
        "chat_template": "tokenizer.chat_template" in fields,
        "first_q4_1": next(t.name for t in reader.tensors if t.tensor_type.name == "Q4_1"),
        "first": reader.tensors[0].name,
        "first_type": reader.tensors[0].tensor_type.name,
    }


def run_json(args) -> dict:
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_smollm2_header_facts(smollm2_path, reference, manager):
    r = run_json(["inspect", "-m", str(smollm2_path), "--json"])
    # The figures the issue names.
    assert r["architecture"] == "llama"
    assert r["tensor_count"] == 272
    assert {k: v["count"] for k, v in r["tensor_types"].items()} == {"Q4_1": 210, "Q8_0": 1, "F32": 61}
    # Everything else against the reference reader.
    assert {k: v["bytes"] for k, v in r["tensor_types"].items()} == dict(reference["bytes"])
    assert r["parameters"] == reference["parameters"]
    assert r["context_length"] == reference["context_length"] == 8192
    assert r["block_count"] == reference["block_count"]
    assert (r["tokenizer"], r["tokenizer_pre"], r["vocab_size"]) == (reference["tokenizer"], reference["pre"], reference["vocab"])
    assert r["chat_template"] is reference["chat_template"] is True
    assert r["name"] == reference["name"]
    assert r["file_size"] == os.path.getsize(smollm2_path)
    assert r["gguf_version"] == 3 and r["file_type"] == "Q4_1"


def test_family_and_backend_admission(smollm2_path, reference, manager):
    r = run_json(["inspect", "-m", str(smollm2_path), "--json"])
    assert r["family"] == {"name": "tp-llama", "plugin": "tp-family", "distribution": "tp-family-dist", "version": "3.1"}
    assert r["family_error"] is None
    backends = {b["name"]: b for b in r["backends"]}
    # Ordered by priority, as --device auto would consider them.
    assert [b["name"] for b in r["backends"]] == ["tp-noq41", "tp-full", "tp-offline"]
    assert backends["tp-full"]["serves_all_tensors"] and backends["tp-full"]["usable"]
    assert backends["tp-full"]["first_unserved"] is None
    assert backends["tp-noq41"]["serves_all_tensors"] is False
    assert backends["tp-noq41"]["first_unserved"] == {
        "tensor": reference["first_q4_1"],
        "type": "Q4_1",
        "reason": "backend 'tp-noq41' has no kernel for Q4_1",
    }
    off = backends["tp-offline"]
    assert (off["usable"], off["unavailable_reason"], off["serves_all_tensors"]) == (False, "no tp device on this machine", True)
    assert r["runs_on"] == ["tp-full"]
    assert "tp_not_a_module" not in sys.modules


def test_without_plugins_it_says_what_is_missing(smollm2_path, no_plugins):
    r = run_json(["inspect", "-m", str(smollm2_path), "--json"])
    assert r["family"] is None
    assert "no installed model family serves architecture 'llama'" in r["family_error"]
    assert r["backends"] == [] and r["runs_on"] == []
    text = CliRunner().invoke(cli, ["inspect", "-m", str(smollm2_path)]).output
    assert "family        none: no installed model family serves architecture 'llama'" in text
    # the backend is installed, only not loaded: the hint must not say to install it
    assert "backends      none loaded: cera-backend-cpu is installed, but plugins are disabled" in text
    assert "pip install" not in text


def test_text_output(smollm2_path, reference, manager):
    result = CliRunner().invoke(cli, ["inspect", "-m", str(smollm2_path)], catch_exceptions=False)
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert "architecture  llama" in lines
    assert "tensors       272" in lines
    types_ = {line.split()[0]: int(line.split()[1]) for line in lines if line.startswith("  ") and line.split()[0] in ("Q4_1", "Q8_0", "F32")}
    assert types_ == {"Q4_1": 210, "Q8_0": 1, "F32": 61}
    assert "chat template present" in lines
    assert "family        tp-llama (plugin tp-family, tp-family-dist 3.1)" in lines
    assert "backends      tp-full can run it" in lines
    assert f"  tp-noq41    cannot serve tensor '{reference['first_q4_1']}': backend 'tp-noq41' has no kernel for Q4_1" in lines
    assert "  tp-offline  not usable here: no tp device on this machine; serves every tensor" in lines


def test_probe_starts_the_admitted_backends_and_says_what_auto_picks(smollm2_path, manager):
    """--probe starts each admitted backend (here tp-full, whose factory module does not
    exist): the failure is reported for it, and with no backend left --device auto takes
    none; without --probe nothing is started (tp_not_a_module is never imported)."""
    r = run_json(["inspect", "-m", str(smollm2_path), "--json"])
    assert "auto" not in r and all("probe" not in b for b in r["backends"])
    r = run_json(["inspect", "-m", str(smollm2_path), "--json", "--probe"])
    backends = {b["name"]: b for b in r["backends"]}
    assert backends["tp-full"]["probe"]["error"].startswith("starting it failed: PluginError: cannot import 'tp_not_a_module'")
    assert "probe" not in backends["tp-noq41"] and "probe" not in backends["tp-offline"]  # not admitted: not started
    assert r["auto"] is None
    text = CliRunner().invoke(cli, ["inspect", "-m", str(smollm2_path), "--probe"]).output
    assert "backends      tp-full can run it; --device auto takes none of them" in text.splitlines()


def test_architecture_served_by_nobody(tmp_path, manager):
    from gguf import GGUFWriter

    path = tmp_path / "odd.gguf"
    w = GGUFWriter(str(path), "tp-unknown-arch")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = run_json(["inspect", "-m", str(path), "--json"])
    assert r["architecture"] == "tp-unknown-arch" and r["family"] is None
    assert r["family_error"].startswith("no installed model family serves architecture 'tp-unknown-arch' (architectures served now: llama, tp-other)")
    assert r["tensor_count"] == 0 and r["tensor_types"] == {} and r["parameters"] == 0
    # An empty file needs no kernel: every usable backend can hold it.
    assert r["runs_on"] == ["tp-noq41", "tp-full"]


def cera_process(args, **env):
    full_env = dict(os.environ, **env)
    return subprocess.run(
        [sys.executable, "-c", "from cera_cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=300,
    )


def test_issue_command_as_a_process(smollm2_path):
    """The exact command of the issue, with whatever plugins are installed."""
    proc = cera_process(["inspect", "-m", str(smollm2_path), "--json"])
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert (r["architecture"], r["tensor_count"]) == ("llama", 272)
    assert {k: v["count"] for k, v in r["tensor_types"].items()} == {"Q4_1": 210, "Q8_0": 1, "F32": 61}


def test_bundle_name_resolves_to_the_cached_file(smollm2_path):
    proc = cera_process(["inspect", "-m", "smollm2-135m-instruct-q4_1", "--json"])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["path"] == str(smollm2_path)


def test_bad_inputs_are_clear_errors(tmp_path):
    proc = cera_process(["inspect", "-m", str(tmp_path / "absent.gguf")])
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith(f"error: model '{tmp_path / 'absent.gguf'}' is not a file, a known bundle")
    bad = tmp_path / "notes.txt"
    bad.write_text("these are not the weights you are looking for")
    proc = cera_process(["inspect", "-m", str(bad)])
    assert proc.returncode == 1
    assert proc.stderr == f"error: {bad}: invalid GGUF file at byte 0: bad magic b'thes', expected b'GGUF': this is not a GGUF file\n"
