"""Bit-exact ops against llama.cpp, tensor by tensor (reference/layer_diff.py's taps).

Where cera follows llama.cpp's arithmetic exactly, an op given llama.cpp's own input
tensor must return llama.cpp's output tensor bit for bit: the quantized matrix products of
decoding and of a prompt (ggml's vec_dot lane order, tinyBLAS, the tiled K-quant kernel),
RoPE (ggml's rotation as GCC contracts it into fused multiply-adds) and GeGLU (ggml's f16
GELU table, built with the same contraction). On x86 with AVX-512, as the llama.cpp build.
llama.cpp runs Gemma 3 (Q5_0, Q8_0, Q4_K and Q6_K weights, NeoX RoPE, GeGLU) through its
graph callback; cera's CPU backend applies each op to the tensors llama.cpp fed it, the
way it runs a model's ops: a one-op graph (cera.graph.builder.GraphBuilder, the tensor a declared
input, the layer's RoPE from the model's `layer_rope`, the weight the model's file tensor)
compiled by the backend, run as a fused C plan and step by step (CERA_CPU_PLANS=0), each
compared. Skipped without llama-cpp-python; slow (the Gemma file).
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
    from cera.sources import bundles

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


def _run_op(loaded, positions, inputs, build):
    """One op run as cera runs a model's ops: a graph of its own (``build(g, *inputs)`` on
    declared f32 inputs, a batch of ``len(positions)`` rows, one sequence) compiled by the
    CPU backend and run once with the loaded model's uploaded weights, both as a fused C
    plan (the default) and step by step, unfused (as with CERA_CPU_PLANS=0). Returns
    both outputs, by mode."""
    from cera.backend import StepInputs
    from cera.graph.builder import GraphBuilder, Layout, Outputs

    n = len(positions)
    g = GraphBuilder(Layout((n,)), Outputs())
    g.output("y", build(g, *(g.input(name, x.shape) for name, x in inputs.items())))
    graph = g.finish()
    step = StepInputs(
        tokens=np.zeros(n, np.int32), positions=positions, slots=np.zeros(1, np.int32), starts=np.zeros(1, np.int32),
        extra=inputs,
    )  # fmt: skip
    be, out = loaded.backend, {}
    for mode, use_plans in (("plan", True), ("eager", False)):
        be.use_plans = use_plans
        try:
            out[mode] = be.compile(graph, loaded.runner.weights, None).run(None, step)["y"]
        finally:
            be.use_plans = True
    return out


def _assert_same(ours, theirs, what):
    for mode, got in ours.items():
        got, want = np.asarray(got).reshape(-1), np.asarray(theirs).reshape(-1)
        assert got.shape == want.shape, f"{what} ({mode}): {got.shape} values, llama.cpp {want.shape}"
        differ = int((got != want).sum())
        assert differ == 0, (
            f"{what} ({mode}): {differ} of {got.size} values differ from llama.cpp (max {np.abs(got - want).max():.3g})"
        )


@pytest.mark.parametrize("layer", [0, 5])  # a sliding layer (base 10000) and a global one (base 1e6)
def test_rope_equals_llama_cpp_bit_for_bit(runs, layer):
    loaded, evaluations = runs
    spec = loaded.model.layer_rope(layer)  # the RoPE the model's graph gives this layer
    assert (loaded.model.config.windows[layer] is None) == (layer == 5)  # layer 5 is the global one
    assert spec.neox and spec.base == (1e6 if layer == 5 else 10000.0)
    for positions, tensors in evaluations:
        for name in ("Qcur", "Kcur"):
            normed = _t(tensors, f"{name}_normed", layer)[0]  # [n, heads, dim]
            roped = _t(tensors, name, layer, occurrence=2)  # projection, its reshape, roped
            ours = _run_op(loaded, positions, {"x": normed}, lambda g, x: g.rope(x, g.positions, spec))
            _assert_same(ours, roped, f"{name} rope, layer {layer}")


def test_geglu_equals_llama_cpp_bit_for_bit(runs):
    loaded, evaluations = runs
    for positions, tensors in evaluations:
        gate = _t(tensors, "ffn_gate").reshape(len(positions), -1)
        up = _t(tensors, "ffn_up").reshape(len(positions), -1)
        ours = _run_op(loaded, positions, {"gate": gate, "up": up}, lambda g, a, b: g.glu("geglu", a, b))
        _assert_same(ours, _t(tensors, "ffn_geglu"), "geglu")


@pytest.mark.parametrize(
    "layer,weight,ggml_type,source,result",
    [
        (0, "attn_q", "Q5_0", "attn_norm", "Qcur"),
        (0, "attn_v", "Q8_0", "attn_norm", "Vcur"),
        (0, "ffn_gate", "Q5_0", "ffn_norm", "ffn_gate"),
        (0, "ffn_down", "Q6_K", "ffn_geglu", "ffn_out"),
        (2, "ffn_down", "Q4_K", "ffn_geglu", "ffn_out"),
    ],
)
def test_products_equal_llama_cpp_bit_for_bit(runs, layer, weight, ggml_type, source, result):
    """Decoding (one row: llama.cpp's vec_dot) and the 20-row prompt (its tinyBLAS for the
    legacy formats, its tiled K-quant kernel for Q4_K/Q6_K)."""
    loaded, evaluations = runs
    w = loaded.model.weights[f"blk.{layer}.{weight}.weight"]  # the graph's reference to the file's tensor
    assert w.ggml_type == ggml_type
    for positions, tensors in evaluations:
        x = _t(tensors, source, layer).reshape(len(positions), -1)
        ours = _run_op(loaded, positions, {"x": x}, lambda g, x: g.linear(x, w))
        _assert_same(ours, _t(tensors, result, layer), f"{weight} ({w.ggml_type}), {len(positions)} rows")
