"""LoRA adapters against their peers: a LoRA trained by the `peft` library (its PEFT
directory, and the GGUF adapters llama.cpp's convert_lora_to_gguf.py made of it) on the
tiny llama of tests/hub, against transformers' and llama.cpp's stored outputs; SmolLM2 with
a random adapter through `cera run --lora` against llama.cpp's stored greedy tokens; and,
where llama-cpp-python is installed, llama.cpp live on the same files.

The stored data and the adapter files are in reference/data, made by
reference/make_references.py (its docstring says how).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cera

HERE = Path(__file__).parent
DATA = HERE / "reference" / "data"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "hub"))
sys.path.insert(0, str(HERE / "reference"))
import tiny_hf  # noqa: E402
from lora_files import random_pairs, write_gguf_adapter  # noqa: E402
from make_references import SMOL, tensors_sha256  # noqa: E402

LLAMA = json.loads((DATA / "llama_cpp.json").read_text())
PEFT = json.loads((DATA / "peft.json").read_text())
PEFT_DIR = DATA / "peft-tiny-llama"
MARGIN = 0.5  # llama.cpp's own top two closer than this: its pick is not asserted (tests/models/fidelity.py)

try:
    import llama_cpp  # noqa: F401

    HAVE_LLAMA_CPP = True
except ImportError:
    HAVE_LLAMA_CPP = False
live = pytest.mark.skipif(not HAVE_LLAMA_CPP, reason="llama-cpp-python is not installed (stored references are used)")


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    """The tiny llama converted by cera; its tensors are those of llama.cpp's conversion."""
    from cera.sources.convert import convert_folder

    d = tmp_path_factory.mktemp("tiny-lora")
    tiny_hf.write_repo(d / "hf", "llama")
    path = convert_folder(d / "hf", d / "tiny-llama-F32.gguf", "F32", name="Hf")
    assert tensors_sha256(path) == LLAMA["tiny_llama"]["base_tensors_sha256"]
    return path


@pytest.fixture(scope="module")
def tiny(tiny_path):
    with cera.load(tiny_path, device="cpu", threads=2, quiet=True) as m:
        yield m


def teacher_forced(loaded, case: dict, adapters) -> tuple[np.ndarray, list[tuple[int, int, float, float]]]:
    """Prompt logits, and per step (cera's pick, the reference's, its margin, max |diff| over
    its top 10), feeding the reference's tokens one at a time."""
    s = loaded.new_session(n_ctx=256, adapters=adapters)
    s.append_tokens(case["prompt_tokens"])
    logits = s.evaluate().copy()
    first = logits.copy()
    out = []
    for i, step in enumerate(case["steps"]):
        ids = [t for t, _ in step["top10"]]
        ref = np.array([v for _, v in step["top10"]])
        out.append((int(np.argmax(logits)), step["token"], step["margin"], float(np.abs(logits[ids] - ref).max())))
        if i + 1 < len(case["steps"]):
            s.append_tokens([step["token"]])
            logits = s.evaluate().copy()
    return first, out


def greedy(loaded, prompt, n: int, adapters) -> list[int]:
    s = loaded.new_session(n_ctx=256, adapters=adapters)
    s.append_tokens(prompt)
    return [e.id for e in s.events(max_tokens=n, temperature=0.0, ignore_eos=True) if hasattr(e, "logprob")]


def run_of(record: dict, adapters: list) -> dict:
    return next(r for r in record["runs"] if r["adapters"] == adapters)


# -- the peft-made adapter ----------------------------------------------------------------------------


@pytest.mark.parametrize("with_adapter", [True, False], ids=["adapter", "base"])
def test_peft_directory_gives_transformers_logits(tiny, with_adapter):
    adapters = [tiny.load_adapter(PEFT_DIR)] if with_adapter else []
    for case in PEFT["cases"]:
        ref = case["adapter" if with_adapter else "base"]
        forced = {"prompt_tokens": case["prompt_tokens"], "steps": ref["steps"]}
        first, steps = teacher_forced(tiny, forced, adapters)
        # transformers in f32 throughout; cera keeps the KV cache in f16, as llama.cpp does
        np.testing.assert_allclose(first, ref["prompt_logits"], atol=1e-2, rtol=0)
        assert max(d for *_, d in steps) < 1e-2
        assert [c for c, *_ in steps] == [t for _, t, *_ in steps]
    # the adapter changes what the model says
    assert any(c["adapter"]["steps"][0]["token"] != c["base"]["steps"][0]["token"] for c in PEFT["cases"])


@pytest.mark.parametrize(
    "adapter, scale, atol",
    [("peft-tiny-llama-bf16.gguf", 1.0, 2e-3), ("peft-tiny-llama-bf16.gguf", 0.5, 2e-3), ("peft-tiny-llama-q8_0.gguf", 1.0, 2e-3)],
)
def test_llama_cpp_adapter_gives_llama_cpp_logits(tiny, adapter, scale, atol):
    a = tiny.load_adapter(DATA / adapter)
    base = run_of(LLAMA["tiny_llama"], [])
    run = run_of(LLAMA["tiny_llama"], [[adapter, scale]])
    for case, base_case in zip(run["cases"], base["cases"], strict=True):
        first, steps = teacher_forced(tiny, case, [(a, scale)])
        np.testing.assert_allclose(first, case["prompt_logits"], atol=atol, rtol=0)
        assert max(d for *_, d in steps) < atol
        assert all(c == t for c, t, m, _ in steps if m > 0.01)
        assert greedy(tiny, case["prompt_tokens"], len(case["steps"]), [(a, scale)]) == [s["token"] for s in case["steps"]]
        assert base_case["steps"][0]["token"] != case["steps"][0]["token"] or scale != 1.0 or adapter.endswith("q8_0.gguf")


def test_peft_form_gives_the_gguf_forms_tokens(tiny):
    peft_adapter = tiny.load_adapter(PEFT_DIR)
    gguf_adapter = tiny.load_adapter(DATA / "peft-tiny-llama-bf16.gguf")
    assert peft_adapter.pairs.keys() == gguf_adapter.pairs.keys()
    for case in PEFT["cases"]:
        a = greedy(tiny, case["prompt_tokens"], 16, [peft_adapter])
        b = greedy(tiny, case["prompt_tokens"], 16, [gguf_adapter])
        assert a == b == [s["token"] for s in case["adapter"]["steps"]]


# -- SmolLM2 with a random adapter, through the command line ---------------------------------------


@pytest.fixture(scope="module")
def smol_adapter(smollm2_path, tmp_path_factory):
    rec = LLAMA["smollm2"]
    pairs = random_pairs(smollm2_path, rank=SMOL["rank"], seed=SMOL["seed"], std=SMOL["std"])
    path = write_gguf_adapter(tmp_path_factory.mktemp("smol-lora") / "smol-lora.gguf", "llama", pairs, SMOL["alpha"])
    assert tensors_sha256(path) == rec["adapter_tensors_sha256"], "the seeded adapter is not the one llama.cpp ran"
    return path


def test_cera_run_lora_reproduces_llama_cpps_greedy_tokens(smollm2_path, smol_adapter):
    rec = LLAMA["smollm2"]
    run, base = run_of(rec, [["smol-lora.gguf", SMOL["scale"]]]), run_of(rec, [])
    assert any([s["token"] for s in c["steps"]] != [s["token"] for s in b["steps"]]
               for c, b in zip(run["cases"], base["cases"], strict=True))  # the adapter changes the text
    with cera.load(smollm2_path, device="cpu", quiet=True) as m:
        for text, case, base_case in zip(rec["prompts"], run["cases"], base["cases"], strict=True):
            n = case["first_step_margin_below_0_5"] or len(case["steps"])
            want = [s["token"] for s in case["steps"][:n]]
            r = subprocess.run(
                [sys.executable, "-m", "cera_cli.main", "run", "-m", str(smollm2_path), "--lora", str(smol_adapter),
                 "--raw", "--temp", "0", "-n", str(n), "--no-timings", "-p", text],
                capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            assert r.returncode == 0, r.stderr
            assert r.stdout == m.detokenize(want) + "\n", text
            break  # one command line; the API checks every prompt below


def test_smollm2_adapter_teacher_forced_against_llama_cpp(smollm2_path, smol_adapter):
    run = run_of(LLAMA["smollm2"], [["smol-lora.gguf", SMOL["scale"]]])
    with cera.load(smollm2_path, device="cpu", threads=LLAMA["settings"]["n_threads"], quiet=True) as m:
        a = m.load_adapter(smol_adapter)
        for case in run["cases"]:
            _, steps = teacher_forced(m, case, [(a, SMOL["scale"])])
            wrong = [(i, c, t, mg) for i, (c, t, mg, _) in enumerate(steps) if c != t and mg > MARGIN]
            assert not wrong, wrong


# -- llama.cpp live ----------------------------------------------------------------------------------


@live
def test_stored_llama_cpp_outputs_are_what_llama_cpp_computes(tiny_path):
    from make_references import llama_run

    for run in LLAMA["tiny_llama"]["runs"]:
        adapters = [(DATA / name, scale) for name, scale in run["adapters"]]
        got = llama_run(tiny_path, adapters, [c["prompt_tokens"] for c in run["cases"]], 16)
        for g, want in zip(got, run["cases"], strict=True):
            assert [s["token"] for s in g["steps"]] == [s["token"] for s in want["steps"]]
            np.testing.assert_allclose(g["prompt_logits"], want["prompt_logits"], atol=2e-4, rtol=0)
