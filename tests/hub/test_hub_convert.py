"""Streaming SafeTensors-to-GGUF conversion, checked against llama.cpp's own conversion.

The tiny llama-architecture repository (tiny_hf.py: seeded bf16 weights that
transformers saved as the same bytes) converted by cera must equal, type by type, what
llama.cpp's convert_hf_to_gguf.py --outtype f32 followed by llama_model_quantize made
(reference/tiny-llama.json, with reference/make_tiny_llama.py): every metadata key and
value, every tensor's name, shape, type and position, and every tensor's bytes; and its
logits must be llama.cpp's within the quantization's own error."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tiny_hf

from cera.sources import resolve
from cera.sources.convert import ConversionError, convert_folder, quantize_gguf
from cera.errors import ModelNotFound
from cera.formats.gguf import GGUFFile

REFS = {a: json.loads((Path(__file__).parent / "reference" / f"tiny-{a}.json").read_text()) for a in tiny_hf.ARCHS}
REF = REFS["llama"]
TYPES = list(REF["types"])
# llama: every type; the other architectures (their own tensors and keys): a type of each kind
CASES = [("llama", q) for q in TYPES] + [(a, q) for a in ("qwen2", "qwen3", "smollm3", "granite", "olmo2", "phi2", "starcoder2")
                                        for q in ("F32", "Q4_0", "Q6_K", "Q4_K_M", "Q3_K_M", "Q2_K")]


def local_path(source, **kw):
    """The GGUF file a source resolves to."""
    return resolve(source, **kw).path


def _plain(v):
    if hasattr(v, "tolist"):
        return v.tolist()
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def describe(path) -> dict:
    with GGUFFile(path) as g:
        meta = {k: _plain(v) for k, v in g.metadata.items()}
        for big in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"):
            meta[big] = {"n": len(meta[big]), "sha256": hashlib.sha256(json.dumps(meta[big]).encode()).hexdigest()}
        tensors = [{"name": t.name, "shape": list(t.shape), "type": t.type_name,
                    "sha256": hashlib.sha256(bytes(g.tensor_data(t.name))).hexdigest()} for t in g.tensors.values()]  # fmt: skip
    return {"metadata": meta, "tensors": tensors}


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    out = {}
    for arch in tiny_hf.ARCHS:
        out[arch] = tmp_path_factory.mktemp(f"tiny-{arch}") / "hf"
        tiny_hf.write_repo(out[arch], arch)
    return out


@pytest.fixture(scope="module")
def repo(repos):
    return repos["llama"]


@pytest.fixture(scope="module")
def all_converted(repos, tmp_path_factory):
    out = tmp_path_factory.mktemp("converted")
    return {(a, q): convert_folder(repos[a], out / f"tiny-{a}-{q}.gguf", q, name="Hf") for a, q in CASES}


@pytest.fixture(scope="module")
def converted(all_converted):
    return {q: p for (a, q), p in all_converted.items() if a == "llama"}


@pytest.mark.parametrize("arch", tiny_hf.ARCHS)
def test_regenerated_weights_are_what_transformers_saved(arch):
    assert tiny_hf.tensor_sha256(tiny_hf.weights(arch)) == REFS[arch]["hf_tensor_sha256"]


@pytest.mark.parametrize("arch, qtype", CASES)
def test_conversion_equals_llama_cpp(all_converted, arch, qtype):
    mine, theirs = describe(all_converted[arch, qtype]), REFS[arch]["types"][qtype]
    assert mine["metadata"] == theirs["metadata"]
    assert [(t["name"], t["shape"], t["type"]) for t in mine["tensors"]] == [
        (t["name"], t["shape"], t["type"]) for t in theirs["tensors"]
    ]
    assert [t["sha256"] for t in mine["tensors"]] == [t["sha256"] for t in theirs["tensors"]]


@pytest.mark.parametrize("arch, qtype", CASES)
def test_logits_match_llama_cpp(all_converted, arch, qtype):
    import cera

    ref = REFS[arch]
    ids, hf = ref["ids"], np.array(ref["hf_logits_last"])
    llama = np.array(ref["types"][qtype]["llama_logits_last"])
    with cera.load(all_converted[arch, qtype], device="cpu", threads=2, quiet=True) as model:
        assert model.tokenize(ref["prompt"]) == ids  # the converted tokenizer tokenizes as transformers' does
        session = model.new_session(n_ctx=128)
        session.append_tokens(ids)
        logits = np.asarray(session.evaluate(), dtype=np.float64).reshape(-1)
    quant_error = np.abs(llama - hf).max()  # what quantizing costs, by llama.cpp's own run
    diff = np.abs(logits - llama).max()
    assert diff <= max(0.05, 0.6 * quant_error)
    if qtype == "F32":  # unquantized: transformers' logits, about as closely as llama.cpp gets them
        assert np.abs(logits - hf).max() <= max(0.01, 1.5 * quant_error)
    # the same top token, unless llama.cpp's own top two are closer than the difference could
    # flip (the 2- and 3-bit files of this random model: gaps of 0.005 and 0.05)
    top2 = np.sort(llama)[-2:]
    if top2[1] - top2[0] > 2 * diff:
        assert logits.argmax() == llama.argmax()
    else:
        assert llama[logits.argmax()] >= llama.max() - 2 * diff


def test_quantizing_llama_cpps_f32_file_equals_llama_quantize(converted, tmp_path):
    # the F32 conversion is llama.cpp's byte for byte (above): quantize it as a GGUF file
    for qtype in ("Q4_0", "Q4_K_M", "Q6_K"):
        out = quantize_gguf(converted["F32"], tmp_path / f"{qtype}.gguf", qtype)
        assert describe(out) == {k: REF["types"][qtype][k] for k in ("metadata", "tensors")}
    with pytest.raises(ConversionError, match="is already Q6_K; quantize from an F32, F16 or BF16 file"):
        quantize_gguf(converted["Q4_0"], tmp_path / "again.gguf", "Q8_0")


def test_search_lowers_the_weighted_error_against_round_to_nearest(repo):
    from gguf import GGMLQuantizationType as T
    from gguf.quants import dequantize

    from cera.sources.quants import quantize

    w = tiny_hf.weights()["model.layers.0.mlp.down_proj.weight"]
    x = (w.astype(np.uint32) << 16).view(np.float32)
    for t in (T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K):
        errs = {}
        for strategy in ("search", "rtn"):
            y = dequantize(quantize(x, t, strategy), t)
            errs[strategy] = float((((y - x) ** 2) * (x**2 + np.mean(x**2))).sum())
        assert errs["search"] < 0.97 * errs["rtn"], (t.name, errs)


def test_hub_repo_converts_once_per_revision(hub, capfd):
    files = tiny_hf.write_repo(Path(os.environ["CERA_CACHE_DIR"]).parent / "src")
    c1 = hub.add_commit("org/tiny-llama", files)
    with pytest.raises(ModelNotFound, match=r"no GGUF file but a SafeTensors model.*org/tiny-llama:Q8_0"):
        local_path("org/tiny-llama")
    path = local_path("org/tiny-llama:Q8_0")
    assert c1 in str(path) and path.name.endswith("-Q8_0-search-v1.gguf")
    assert describe(path)["tensors"] == REF["types"]["Q8_0"]["tensors"]
    err = capfd.readouterr().err
    assert "converting org/tiny-llama" in err and "model-00001-of-00002.safetensors" in err
    # cached: the same file, nothing fetched or converted again
    n, mtime = len(hub.requests("cdn")) + len(hub.requests("resolve")), path.stat().st_mtime_ns
    assert local_path("org/tiny-llama:Q8_0") == path and path.stat().st_mtime_ns == mtime
    assert len(hub.requests("cdn")) + len(hub.requests("resolve")) == n
    # a new revision: a new entry
    c2 = hub.add_commit("org/tiny-llama", {"README.md": b"# tiny llama, revised\n"}, parent=True)
    path2 = local_path("org/tiny-llama:Q8_0")
    assert c2 in str(path2) and path2 != path and path.exists()
    n = len(hub.requests())
    assert local_path(f"org/tiny-llama@{c1}:Q8_0") == path
    assert len(hub.requests()) == n  # a cached commit's conversion: no request at all
    with pytest.raises(ModelNotFound, match="cera converts to F32, F16"):
        local_path("org/tiny-llama:IQ2_XXS")


def test_cera_run_converts_and_generates(hub, tmp_path):
    files = tiny_hf.write_repo(tmp_path / "src")
    hub.add_commit("org/tiny-llama", files)
    env = os.environ.copy()
    proc = subprocess.run([sys.executable, "-m", "cera_cli.main", "run", "-m", "org/tiny-llama", "--quant", "Q4_0",
                           "-p", REF["prompt"], "--raw", "-n", "4", "--temp", "0", "--device", "cpu", "-t", "2"],
                          capture_output=True, env=env, timeout=300)  # fmt: skip
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 0, err
    assert "converting org/tiny-llama" in err
    import cera

    path = local_path("org/tiny-llama:Q4_0", quiet=True)
    with cera.load(path, device="cpu", threads=2, quiet=True) as model:
        want = model.generate(REF["prompt"], max_tokens=4, temperature=0)
    assert proc.stdout.decode("utf-8", "replace")[:-1] == want  # run ends the text with a newline


def test_unknown_architecture_and_damaged_shards(repo, tmp_path):
    import shutil

    bad = tmp_path / "gpt2"
    shutil.copytree(repo, bad)
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ConversionError, match=r"converts .*LlamaForCausalLM.*not GPT2LMHeadModel"):
        convert_folder(bad, tmp_path / "x.gguf", "Q8_0")
    cut = tmp_path / "cut"
    shutil.copytree(repo, cut)
    shard = cut / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-1000])
    with pytest.raises(ConversionError, match=r"model-00002-of-00002.safetensors: tensor .* do not fit"):
        convert_folder(cut, tmp_path / "y.gguf", "Q8_0")
    assert list(tmp_path.glob("*.gguf")) == [] and list(tmp_path.glob(".*partial")) == []


def test_a_full_disk_is_said_and_leaves_nothing(repo, tmp_path, monkeypatch):
    """Not enough space: said before writing; the disk filling up mid-write (the file-size
    limit stops writes as a full disk does): said, the partial file deleted."""
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    with monkeypatch.context() as m:
        m.setattr(shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 1000, 1000))
        with pytest.raises(ConversionError, match=r"x.gguf needs about [\d.]+ MiB, but .* has only 0.0 MiB free") as e:
            convert_folder(repo, tmp_path / "x.gguf", "Q8_0")
    assert list(tmp_path.iterdir()) == []
    need = float(str(e.value).split("needs about ")[1].split(" MiB")[0]) * 2**20
    size = convert_folder(repo, tmp_path / "x.gguf", "Q8_0").stat().st_size  # the data, plus header and padding
    assert 0.9 * size < need < 1.05 * size  # (the message rounds to 0.1 MiB)
    (tmp_path / "x.gguf").unlink()
    script = textwrap.dedent(
        f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (600_000, 600_000))
        from cera.sources.convert import ConversionError, convert_folder
        try:
            convert_folder({str(repo)!r}, {str(tmp_path / "y.gguf")!r}, "Q8_0")
        except ConversionError as e:
            print(e)
            sys.exit(3)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"the disk filled up while writing {tmp_path / 'y.gguf'}" in proc.stdout and "partial file was deleted" in proc.stdout
    assert list(tmp_path.iterdir()) == []


MAKE_BIG = """
import json, sys, numpy as np
sys.path.insert(0, sys.argv[2])
import tiny_hf
from pathlib import Path
src = Path(sys.argv[1])
src.mkdir()
d, f, v = 1024, 2048, 16384
cfg = dict(tiny_hf.config(), vocab_size=v, hidden_size=d, intermediate_size=f, num_hidden_layers=2)
(src / "config.json").write_text(json.dumps(cfg))
for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
    (src / name).write_bytes((tiny_hf.DATA / name).read_bytes())
rng = np.random.default_rng(0)
def m(r, c):
    return tiny_hf.to_bf16(rng.standard_normal((r, c), dtype=np.float32))
tiny_hf.write_safetensors(src / "model-00001-of-00002.safetensors",
                          {"model.embed_tokens.weight": m(v, d), "model.norm.weight": m(1, d)[0], "lm_head.weight": m(v, d)})
t = {}
for i in range(2):
    p = f"model.layers.{i}."
    t.update({p + "input_layernorm.weight": m(1, d)[0], p + "post_attention_layernorm.weight": m(1, d)[0],
              p + "self_attn.q_proj.weight": m(d, d), p + "self_attn.k_proj.weight": m(256, d),
              p + "self_attn.v_proj.weight": m(256, d), p + "self_attn.o_proj.weight": m(d, d),
              p + "mlp.gate_proj.weight": m(f, d), p + "mlp.up_proj.weight": m(f, d), p + "mlp.down_proj.weight": m(d, f)})
tiny_hf.write_safetensors(src / "model-00002-of-00002.safetensors", t)
"""

CONVERT_MEASURED = r"""
import json, re, sys
from pathlib import Path
import numpy as np
from cera.sources import quants
from cera.sources.convert import MEMORY_BOUND_BYTES, convert_folder, read_safetensors_index
import gguf.quants
# VmHWM is this process image's peak; ru_maxrss would carry the forking pytest worker's
# peak across exec and hide the rise
def peak():
    return int(re.search(r"VmHWM:\s*(\d+)", open("/proc/self/status").read()).group(1)) * 1024
src = Path(sys.argv[1])
largest = max(t.nbytes for p in src.glob("*.safetensors") for t in read_safetensors_index(p).values())
before = peak()  # the peak so far: imports
convert_folder(src, src.parent / "big.gguf", sys.argv[2])
after = peak()
print(json.dumps({"rise": after - before, "largest": largest, "bound": MEMORY_BOUND_BYTES}))
"""


@pytest.mark.parametrize("qtype", ["Q8_0"] + [pytest.param(q, marks=pytest.mark.slow) for q in ("Q4_K_M", "Q3_K_M", "Q2_K")])
def test_memory_stays_below_the_largest_tensor_plus_a_bound(tmp_path, qtype):
    """Peak memory of a conversion, in a fresh process: the rise of the peak RSS over the
    peak after imports stays below the largest tensor in its source dtype (32 MiB here,
    of a 2 x 32 MiB + 44 MiB bf16 model in two shards) plus the stated bound,
    cera.sources.convert.MEMORY_BOUND_BYTES."""
    src = tmp_path / "big"
    subprocess.run([sys.executable, "-c", MAKE_BIG, str(src), str(Path(__file__).parent)], check=True, timeout=300)
    proc = subprocess.run([sys.executable, "-c", CONVERT_MEASURED, str(src), qtype], capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    m = json.loads(proc.stdout.strip().splitlines()[-1])
    print(qtype, {k: f"{v / 2**20:.1f} MiB" for k, v in m.items()})
    assert m["largest"] == 32 * 2**20
    assert m["rise"] < m["largest"] + m["bound"], (qtype, m)
