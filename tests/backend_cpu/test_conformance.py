"""The CPU backend through the conformance suite (cera.testing.conformance): every op
against the numpy reference backend, with the suite's stated tolerances, and the tiny
families model by model."""

from __future__ import annotations

from pathlib import Path

import pytest

from cera.testing import conformance

TINY = sorted((Path(__file__).resolve().parent.parent / "models" / "reference" / "tiny").glob("tiny-*.gguf"))


def _backend():
    from cera_backend_cpu.backend import CpuBackend

    return CpuBackend(threads=2)


@pytest.fixture(scope="module")
def backend():
    b = _backend()
    yield b
    b.close()


def _cases():
    from cera_backend_cpu.capabilities import OPS, TENSOR_TYPES

    return conformance.op_cases(TENSOR_TYPES, OPS)


@pytest.mark.parametrize("case", _cases(), ids=str)
def test_op(backend, case):
    conformance.check_op(backend, case)


@pytest.mark.parametrize("path", TINY, ids=[p.stem for p in TINY])
def test_tiny_family(backend, path):
    # F32 weights: the CPU uses F32 activations for them; what remains is float rounding
    # and, for the gemma families, GELU through ggml's f16 table (conformance.TOL_F16_TABLE)
    conformance.check_model(backend, path, tolerance=conformance.TOL_F16_TABLE)


def test_every_op_of_the_table_has_a_case():
    from cera.graph.ops import names

    # reshape, copy, take and store_cross are exercised inside the slice, top_k and cross cases
    covered = {c.op for c in conformance.op_cases()} | {"embedding", "reshape", "copy", "take", "store_cross"}
    assert set(names()) <= covered, sorted(set(names()) - covered)
