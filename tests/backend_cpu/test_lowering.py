"""The CPU backend's table of lowerers agrees with the op table, the backend's declared ops,
and the C plan's op enum (csrc/plan.c), so that no op can be lowered to a C op that does
not exist, no C op is left without a way in, and the kernels' codes are the op table's."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import cera_backend_cpu
from cera.graph.ops import OPS
from cera_backend_cpu import capabilities
from cera_backend_cpu._native import lib
from cera_backend_cpu.lowering import C_OPS, LOWERERS

PLAN_C = Path(cera_backend_cpu.__file__).parent / "csrc" / "plan.c"
API_H = Path(cera_backend_cpu.__file__).parent / "csrc" / "cera_cpu_api.h"


def _plan_enum() -> tuple[list[str], list[str]]:
    """plan.c's ``enum { OP_...,  OP_COUNT }`` and its ``OP_NAMES`` table, in order."""
    text = PLAN_C.read_text()
    enum = re.search(r"enum\s*\{([^}]*)\}", text).group(1)
    members = [m.strip() for m in enum.split(",") if m.strip()]
    assert members[-1] == "OP_COUNT"
    table = re.search(r"OP_NAMES\[OP_COUNT\]\s*=\s*\{([^}]*)\}", text).group(1)
    return members[:-1], re.findall(r'"(\w+)"', table)


def test_the_c_enum_and_its_names_agree():
    members, names = _plan_enum()
    assert [m.removeprefix("OP_").lower() for m in members] == names


def test_every_lowered_op_is_in_the_op_table_and_declared_by_the_backend():
    assert C_OPS == frozenset(LOWERERS)
    assert C_OPS <= set(OPS), sorted(C_OPS - set(OPS))
    assert C_OPS <= set(capabilities.OPS), sorted(C_OPS - set(capabilities.OPS))


def test_the_lowerers_name_exactly_the_c_plan_ops():
    _, names = _plan_enum()
    named = {c for lowerer in LOWERERS.values() for c in lowerer.c_ops}
    assert named == set(names), (sorted(named - set(names)), sorted(set(names) - named))
    for c in names:  # each has its append function in the compiled library and the header
        assert hasattr(lib, f"cera_plan_{c}"), c
        assert re.search(rf"\bcera_plan_{c}\(", API_H.read_text()), c


@pytest.mark.parametrize("op", ["unary", "glu"])
def test_the_kernels_compute_the_activation_the_op_table_codes_name(be, op):
    """Each value of the op table's activation attribute, through its code, gives the
    kernel that computes that activation (against the op table's numpy reference)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(256).astype(np.float32) * 3
    u = rng.standard_normal(256).astype(np.float32)
    for kind in OPS[op].choices["kind"]:
        if op == "unary":
            got, want = be.unary(kind, x), OPS[op].reference(None, x, kind=kind)
        else:
            got, want = be.glu(kind, x, u), OPS[op].reference(None, x, u, kind=kind)
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3, err_msg=kind)


def test_an_unknown_activation_names_the_known_ones():
    from cera.errors import ShapeError

    with pytest.raises(ShapeError, match="silu, gelu, gelu_erf, relu"):
        OPS["unary"].code("kind", "swish")
