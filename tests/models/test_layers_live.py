"""Bit-exact ops against llama.cpp, tensor by tensor (reference/layer_diff.py's taps).

Where cera follows llama.cpp's arithmetic exactly, an op given llama.cpp's own input
tensor must return llama.cpp's output tensor bit for bit: the quantized matrix products of
decoding and of a prompt (ggml's vec_dot lane order, tinyBLAS, the tiled K-quant kernel),
RoPE (ggml's rotation as GCC contracts it into fused multiply-adds) and GeGLU (ggml's f16
GELU table, built with the same contraction). On x86 with AVX-512, as the llama.cpp build. llama.cpp runs Gemma 3 (Q5_0, Q8_0, Q4_K and Q6_K
weights, NeoX RoPE, GeGLU) through its graph callback; cera's CPU backend applies each op
to the tensors llama.cpp fed it. Skipped without llama-cpp-python; slow (the Gemma file).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from fidelity import REFERENCE

import cera

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install llama-cpp-python==0.3.36)")
sys.path.insert(0, str(REFERENCE))
import layer_diff  # noqa: E402
from llamacpp_driver import ContextSettings  # noqa: E402

pytestmark = pytest.mark.slow
NAME = "gemma3-270m-q4_k_m"
PROMPT = [2, 651, 6037, 529, 4043] + list(range(1000, 1015))  # 20 rows: the many-row kernels
STEPS = [5000, 6000]


@pytest.fixture(scope="module")
def runs():
    """(cera's loaded model, [(positions, llama.cpp's tensors) per evaluation])."""
    from cera import bundles

    path = bundles.fetch_file(NAME, quiet=True)
    loaded = cera.load(path, device="cpu", threads=2)
    if loaded.backend.variant not in ("avx512", "avx512vnni"):
        pytest.skip(f"the llama-cpp-python build compared is AVX-512; this CPU runs {loaded.backend.variant!r}")
    taps = layer_diff.LlamaCppTaps()
    lm = layer_diff.LlamaCppTapped(str(path), ContextSettings(n_ctx=256, n_threads=2), taps)
    out, pos = [], 0
    for toks in [PROMPT] + [[t] for t in STEPS]:
        lm.eval(toks)
        out.append((np.arange(pos, pos + len(toks), dtype=np.int32), taps.take()))
        pos += len(toks)
    lm.close()
    return loaded, out


def _t(tensors, name, layer=0, occurrence=0):
    return tensors[f"{name}-{layer}"][occurrence]


def _assert_same(ours, theirs, what):
    ours, theirs = np.asarray(ours).reshape(-1), np.asarray(theirs).reshape(-1)
    assert ours.shape == theirs.shape, what
    differ = int((ours != theirs).sum())
    assert differ == 0, (
        f"{what}: {differ} of {ours.size} values differ from llama.cpp (max {np.abs(ours - theirs).max():.3g})"
    )


@pytest.mark.parametrize("layer", [0, 5])  # a sliding layer (base 10000) and a global one (base 1e6)
def test_rope_equals_llama_cpp_bit_for_bit(runs, layer):
    loaded, evaluations = runs
    model, be = loaded.model, loaded.backend
    spec = model.config.rope_local if model.config.is_swa[layer] else model.config.rope_global
    for positions, tensors in evaluations:
        for name in ("Qcur", "Kcur"):
            normed = _t(tensors, f"{name}_normed", layer)[0]  # [n, heads, dim]
            roped = _t(tensors, name, layer, occurrence=2)  # projection, its reshape, roped
            _assert_same(be.rope(normed, positions, spec), roped, f"{name} rope, layer {layer}")


def test_geglu_equals_llama_cpp_bit_for_bit(runs):
    loaded, evaluations = runs
    be = loaded.backend
    for _, tensors in evaluations:
        gate = _t(tensors, "ffn_gate").reshape(-1, 2048)
        up = _t(tensors, "ffn_up").reshape(-1, 2048)
        _assert_same(be.glu("geglu", gate, up), _t(tensors, "ffn_geglu"), "geglu")


@pytest.mark.parametrize(
    "layer,weight,source,result",
    [
        (0, "attn_q", "attn_norm", "Qcur"),  # Q5_0
        (0, "attn_v", "attn_norm", "Vcur"),  # Q8_0
        (0, "ffn_gate", "ffn_norm", "ffn_gate"),  # Q5_0
        (0, "ffn_down", "ffn_geglu", "ffn_out"),  # Q6_K
        (2, "ffn_down", "ffn_geglu", "ffn_out"),  # Q4_K
    ],
)
def test_products_equal_llama_cpp_bit_for_bit(runs, layer, weight, source, result):
    """Decoding (one row: llama.cpp's vec_dot) and the 20-row prompt (its tinyBLAS for the
    legacy formats, its tiled K-quant kernel for Q4_K/Q6_K)."""
    loaded, evaluations = runs
    w = loaded.model.weights[f"blk.{layer}.{weight}.weight"]
    for positions, tensors in evaluations:
        x = _t(tensors, source, layer).reshape(len(positions), -1)
        _assert_same(loaded.backend.linear(x, w), _t(tensors, result, layer), f"{weight} ({w.ggml_type})")
