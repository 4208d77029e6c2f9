"""Every tensor type against llama.cpp: files made with llama.cpp's quantizer from
the real SmolLM2 weights (quantized_files.py, cached, not committed), evaluated by both
engines on the same tokens (type_fidelity.py).

With llama-cpp-python installed the comparison is live: every logit of every step, bit for
bit, on the AVX-512 variants (the build the installed library is: llama.cpp's x86 code for
this CPU); elsewhere llama.cpp's greedy tokens wherever its top-2 margin is over 0.5.
Without it, the stored references (reference/types/*.json, make_type_references.py) stand
in: their top-10 logits exactly, if the file made here has the stored SHA-256.

Making a file takes from half a minute to several (the IQ searches), so all but two types
are marked slow.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import quantized_files
import type_fidelity as tf

import cera

TYPES = ("Q5_K", "Q3_K", "Q2_K", "IQ4_NL", "F16", "BF16", "F32", "IQ4_XS", "IQ3_S", "IQ3_XXS", "IQ2_S",
         "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S")  # fmt: skip
FAST = {"Q5_K", "IQ4_XS"}
HAVE_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None
# the types llama.cpp's CPU backend hands to its AMX kernels when its build has them and
# weight repacking is on (ggml-cpu/amx/common.h, qtype_has_amx_kernels)
AMX_TYPES = {"Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS"}


def _llama_cpp_amx_types(path) -> set[str]:
    """The tensor types of the file at ``path`` that llama.cpp as shipped repacks for its
    AMX kernels here (its build reports AMX_INT8): arithmetic that cera's repack mode does
    not follow (it follows the x86 8x8 repacked kernels). SmolLM2's tied Q8_0 embedding,
    its output matrix, is one: in the IQ4_NL file it is the only such tensor, and there
    every logit of every step differed, by up to 1.3e-5."""
    import llama_cpp
    from gguf import GGUFReader

    if "AMX_INT8 = 1" not in llama_cpp.llama_print_system_info().decode():
        return set()
    return {t.tensor_type.name for t in GGUFReader(str(path)).tensors} & AMX_TYPES


def _params():
    return [pytest.param(t, marks=[] if t in FAST else [pytest.mark.slow], id=t) for t in TYPES]


def _exact(loaded) -> bool:
    return getattr(loaded.backend, "variant", "") in ("avx512", "avx512vnni")


@pytest.mark.parametrize("type_name", _params())
def test_logits_equal_llama_cpp(type_name):
    path = quantized_files.make(type_name)
    with cera.load(path, device="cpu", threads=tf.THREADS, quiet=True) as loaded:
        exact = _exact(loaded)
        if HAVE_LLAMA_CPP:
            runs = tf.llama_cpp_logits(path)
            ours = tf.cera_logits(loaded, {cid: tokens for cid, (tokens, _) in runs.items()})
            for cid, (_, ref_rows) in runs.items():
                for step, (ref, got) in enumerate(zip(ref_rows, ours[cid], strict=True)):
                    if exact:
                        differ = np.count_nonzero(ref.view(np.uint32) != got.view(np.uint32))
                        assert differ == 0, (
                            f"{type_name} {cid} step {step}: {differ} logits differ from llama.cpp's, "
                            f"max |diff| {np.abs(ref - got).max():.4g}"
                        )
                    else:
                        top2 = np.sort(ref)[-2:]
                        if top2[1] - top2[0] > 0.5:
                            assert int(np.argmax(got)) == int(np.argmax(ref)), (type_name, cid, step)
            return
        stored = tf.load_stored(type_name)
        if stored is None:
            pytest.skip(f"no stored reference for {type_name} and llama-cpp-python is not installed")
        if quantized_files.sha256(path) != stored["file_sha256"]:
            pytest.skip(f"{path.name} differs from the file the stored reference was made on")
        ours = tf.cera_logits(loaded, {c["id"]: c["tokens"] for c in stored["cases"]})
        for case in stored["cases"]:
            for step, (top10, got) in enumerate(zip(case["top10"], ours[case["id"]], strict=True)):
                ids = [i for i, _ in top10]
                ref = np.array([v for _, v in top10], dtype=np.float32)
                if exact:
                    assert np.array_equal(got[ids], ref), (type_name, case["id"], step, np.abs(got[ids] - ref).max())
                elif ref[0] - ref[1] > 0.5:
                    assert int(np.argmax(got)) == ids[0], (type_name, case["id"], step)


@pytest.mark.parametrize("type_name", _params())
def test_stored_reference_is_what_llama_cpp_computes(type_name):
    """The stored references stay honest: llama.cpp, run now, gives them again."""
    if not HAVE_LLAMA_CPP:
        pytest.skip("llama-cpp-python is not installed")
    stored = tf.load_stored(type_name)
    if stored is None:
        pytest.skip(f"no stored reference for {type_name}")
    path = quantized_files.make(type_name)
    if quantized_files.sha256(path) != stored["file_sha256"]:
        pytest.fail(f"{path.name} is not the file the stored reference was made on (ggml's quantizer changed?)")
    runs = tf.llama_cpp_logits(path)
    for case in stored["cases"]:
        tokens, rows = runs[case["id"]]
        assert tokens == case["tokens"], case["id"]
        for step, (top10, row) in enumerate(zip(case["top10"], rows, strict=True)):
            assert tf.top(row) == top10, (case["id"], step)


@pytest.mark.parametrize("type_name", [pytest.param("Q4_0", id="Q4_0"), pytest.param("IQ4_NL", id="IQ4_NL", marks=pytest.mark.slow)])
def test_repack_mode_equals_llama_cpp_as_shipped(type_name, monkeypatch):
    """CERA_CPU_LLAMA_REPACK=1 against llama.cpp with its default weight repacking."""
    monkeypatch.setenv("CERA_CPU_LLAMA_REPACK", "1")
    path = quantized_files.make(type_name)
    with cera.load(path, device="cpu", threads=tf.THREADS, quiet=True) as loaded:
        if not _exact(loaded):
            pytest.skip("the repacked arithmetic is that of llama.cpp's x86 AVX-512 build")
        if HAVE_LLAMA_CPP:
            amx = _llama_cpp_amx_types(path)
            if amx:
                # (its load log says "amx repack tensor ... of type q4_0"; on an AMX machine
                # it then crashed in its first Q4_0 product: signal 11)
                pytest.skip(f"llama.cpp's build here repacks this file's {', '.join(sorted(amx))} weights for its "
                            "AMX kernels, not the x86 8x8 ones cera's repack mode follows")  # fmt: skip
            runs = tf.llama_cpp_logits(path, repack=True)
            ours = tf.cera_logits(loaded, {cid: tokens for cid, (tokens, _) in runs.items()})
            for cid, (_, ref_rows) in runs.items():
                for step, (ref, got) in enumerate(zip(ref_rows, ours[cid], strict=True)):
                    assert np.array_equal(ref.view(np.uint32), got.view(np.uint32)), (cid, step, np.abs(ref - got).max())
            return
        stored = tf.load_stored(type_name, repack=True)
        if stored is None or quantized_files.sha256(path) != stored["file_sha256"]:
            pytest.skip("no stored repacked reference for this file and llama-cpp-python is not installed")
        ours = tf.cera_logits(loaded, {c["id"]: c["tokens"] for c in stored["cases"]})
        for case in stored["cases"]:
            for step, (top10, got) in enumerate(zip(case["top10"], ours[case["id"]], strict=True)):
                ids = [i for i, _ in top10]
                assert np.array_equal(got[ids], np.array([v for _, v in top10], dtype=np.float32)), (case["id"], step)
