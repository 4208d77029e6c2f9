"""The Hexagon backend through the conformance suite on QNN's HTP simulator: ops against the
numpy reference backend at float16 tolerances, and the tiny dense and LFM2 models.

The HTP computes in float16 (11-bit mantissa, relative rounding 2^-11 = 4.9e-4 per value):
weights, activations, the KV cache and every intermediate are rounded to it. So one tolerance, TOL_HTP, replaces the suite's float32
ones (max |got - want| <= TOL_HTP * max(1, max |want|)). Measured on the simulator (QNN 2.51,
SM8650) over these cases: the worst was attention with a window and soft-capping, 2.2e-3;
softmax 1.1e-3; every product under 1e-3. Quantized weights keep the suite's TOL_QUANT: both sides decode the same blocks
(the HTP then rounds them to float16), so the error is float16's, smaller than it. Models
compare logits after several layers, at TOL_MODEL (every tiny family the README lists as
measured passed it; tiny-mistral: 0.18 on logits of about 28).

Kept to about a minute: the weight types are a sample (float, the two block types llama.cpp's
Hexagon backend runs, a K-quant; see `_sampled`); every other op case runs.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from cera.testing import conformance

from .conftest import needs_simulator

TINY = Path(__file__).resolve().parent.parent / "models" / "reference" / "tiny"
TOL_HTP = 1e-2
TOL_MODEL = 2e-2
# products: every layout (one row, a few, many, a decode batch) for F32 and Q4_0, one for the
# others; embeddings of the types llama.cpp's Hexagon backend serves
EVERY_LAYOUT = {"F32", "Q4_0"}
ONE_LAYOUT = {"F16", "Q8_0", "Q6_K"}
EMBEDDING_TYPES = {"F16", "Q4_0", "Q8_0"}


def _sampled(c) -> bool:
    if c.op == "embedding":
        return c.name in {f"embedding[{t}]" for t in EMBEDDING_TYPES}
    if c.op == "linear":
        t = c.name[len("linear[") :].split(",")[0]
        return t in EVERY_LAYOUT or (t in ONE_LAYOUT and c.name.endswith(",5]"))
    return True


def _cases():
    from cera_backend_hexagon.capabilities import OPS, TENSOR_TYPES

    out = []
    for c in conformance.op_cases(TENSOR_TYPES, OPS):
        if not _sampled(c):
            continue
        if (
            c.op == "attention"
            and c.kv_type != "f16"
            and c.name not in ("attention[batch]", "attention[window_softcap]")
        ):
            continue  # the f32 and q8_0 caches: the HTP keeps f16 (the batch and window cases run on it below)
        out.append(c)
    return out


@needs_simulator
@pytest.mark.parametrize("case", _cases(), ids=str)
def test_op(simulator, case):
    case = attrs.evolve(case, kv_type="f16", tolerance=max(case.tolerance, TOL_HTP))
    conformance.check_op(simulator, case)


@needs_simulator
@pytest.mark.parametrize("name", ["tiny-mistral", "tiny-lfm2"])
def test_tiny_model(simulator, name):
    err = conformance.check_model(simulator, TINY / f"{name}.gguf", tolerance=TOL_MODEL, kv_type="f16")
    assert err > 0  # float16 rounds: an error of exactly 0 would mean the reference ran, not the HTP


def test_the_served_ops_are_the_lowered_ones():
    from cera_backend_hexagon.capabilities import OPS
    from cera_backend_hexagon.lower import LOWERED_OPS

    assert set(OPS) == set(LOWERED_OPS)
