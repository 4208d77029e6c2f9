"""The Hexagon backend through the conformance suite on QNN's HTP simulator: ops against the
numpy reference backend at float16 tolerances, and the tiny dense and LFM2 models.

The HTP computes in float16 (11-bit mantissa, relative rounding 2^-11 = 4.9e-4 per value):
weights, activations, the KV cache and every intermediate are rounded to it, and products
and norms sum in float16 arithmetic. So one tolerance, TOL_HTP, replaces the suite's float32
ones (max |got - want| <= TOL_HTP * max(1, max |want|)); measured on the simulator at the
commit that added these tests, the worst op case (linear over 256 inputs) stayed under a
third of it. Quantized weights keep the suite's TOL_QUANT: both sides decode the same blocks
(the HTP then rounds them to float16), so the error is float16's, smaller than it. Models
compare logits after several layers, at TOL_MODEL.

Kept to about a minute: the weight types are a sample (float, the two block types llama.cpp's
Hexagon backend runs, a K-quant); every other op case runs.
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
SAMPLE_TYPES = {"F32", "F16", "Q4_0", "Q8_0", "Q6_K"}


def _cases():
    from cera_backend_hexagon.capabilities import OPS, TENSOR_TYPES

    out = []
    for c in conformance.op_cases(TENSOR_TYPES, OPS):
        if c.op in ("embedding", "linear") and not c.types <= SAMPLE_TYPES | {"F32"}:
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
