"""kernels.unit_plan, the unit kernel's plan per product shape: whatever the shape, the
kernel it plans declares no more workgroup memory than the adapter offers (read from the
generated WGSL, not from the plan's own arithmetic), and the plans the H200's figures
chose stay as measured (benchmarks/README.md, "Vulkan: measurements behind the defaults")."""

from __future__ import annotations

import re

import pytest

from cera_backend_vulkan import wgsl
from cera_backend_vulkan.kernels import unit_cluster, unit_plan

SIZES = {"f32": 4, "u32": 4, "i32": 4, "vec4<f32>": 16, "vec4<u32>": 16}


def workgroup_bytes(src: str) -> int:
    total = 0
    for elem, n in re.findall(r"var<workgroup>\s+\w+\s*:\s*array<(\w+(?:<\w+>)?),\s*(\d+)>", src):
        total += SIZES[elem] * int(n)
    return total


@pytest.mark.parametrize("limit", [16384, 32768, 49152])
@pytest.mark.parametrize("rows", [1, 2, 4, 8])
@pytest.mark.parametrize("K,N,types", [
    (1536, 8960, ("Q4_K", "Q4_K")), (8960, 1536, ("Q6_K",)), (1536, 151936, ("Q6_K",)),
    (4864, 896, ("Q4_K",)), (1024, 640, ("Q4_K",)), (3584, 18944, ("Q4_K", "Q4_K")),
    (640, 262144, ("Q8_0",)), (4864, 896, ("Q5_0",)), (896, 1152, ("Q5_0", "Q5_0", "Q8_0")),
    (8192, 3072, ("Q4_K", "Q4_K", "Q6_K")),
])  # fmt: skip
def test_planned_kernels_fit_the_adapters_workgroup_memory(limit, rows, K, N, types):
    segments = len(types) == 3  # Q, K and V in one dispatch
    plan = unit_plan("unit-auto", K, N, types, 32, rows, limit, segments)
    assert plan is not None
    group, feats, per, shared_k = plan
    for norm in (False, True):
        kind = "swiglu" if len(types) == 2 else None
        src = wgsl.matvec_unit(types, kind, rows, per, feats, norm, group, shared_k, segments)
        assert workgroup_bytes(src) <= limit, (group, feats, shared_k)


def test_the_measured_plans():
    # Qwen2.5 1.5B's decode products on a 32-lane adapter with 48 KB of workgroup memory
    assert unit_plan("unit-auto", 1536, 8960, ("Q4_K", "Q4_K"), 32, 1, 49152) == ("sub", 2, 8, 1536)
    assert unit_plan("unit-auto", 8960, 1536, ("Q4_K",), 32, 1, 49152) == ("wg", 2, 2, 0)
    # the output: 4 features a group of 16 lanes (48 units: three full steps)
    assert unit_plan("unit-auto", 1536, 151936, ("Q6_K",), 32, 1, 49152) == ("sub16", 4, 32, 1536)
    assert unit_plan("unit-auto-c32", 1536, 151936, ("Q6_K",), 32, 1, 49152) == ("sub", 4, 16, 1536)
    assert unit_plan("unit-auto", 1536, 256, ("Q4_K",), 32, 1, 49152) == ("sub", 1, 4, 1536)
    # Q/K/V in one dispatch: 2048 features of one weight each
    assert unit_plan("unit-auto", 1536, 2048, ("Q4_K", "Q4_K", "Q6_K"), 32, 1, 49152, True) == ("sub", 1, 4, 1536)
    # the 32-element block types (SmolLM2's gate/up, Gemma 3's output)
    assert unit_plan("unit-auto", 576, 1536, ("Q4_1", "Q4_1"), 32, 1, 49152) == ("sub", 1, 4, 576)
    assert unit_plan("unit-auto", 640, 262144, ("Q8_0",), 32, 1, 49152) == ("sub8", 4, 64, 640)
    assert unit_plan("unit-auto", 576, 49152, ("Q8_0",), 32, 1, 49152) == ("sub4", 4, 128, 576)
    assert unit_plan("unit-auto", 896, 151936, ("Q8_0",), 32, 1, 49152) == ("sub16", 4, 32, 896)
    # types without a unit decoder of their own stay with workgroup-1pass
    assert unit_plan("unit-auto", 896, 151936, ("IQ4_NL",), 32, 1, 49152) is None
    assert unit_plan("unit-auto", 896, 4864, ("Q5_0", "F16"), 32, 1, 49152) is None
    # "unit-auto-gx" never copies x to shared memory
    assert unit_plan("unit-auto-gx", 1536, 8960, ("Q4_K", "Q4_K"), 32, 1, 49152)[3] == 0


@pytest.mark.parametrize("units,sgs,lanes", [
    # lanes busy over ceil(units / lanes) steps, at least 0.8 of them: 48 units fill three
    # steps of 16 (32 lanes: 48 of 64); 28 fill 28 of 32; 18 fill 18 of 20 lanes with 4
    # (8: 18 of 24, 0.75); 20 fill 20 of 24 with 8; 64 fill two steps of 32, 280 fill
    # 280 of 288; 3 units fill no cluster to 0.8 and take the fewest lanes, 2
    (48, 32, 16), (28, 32, 32), (18, 32, 4), (20, 32, 8), (64, 32, 32), (280, 32, 32),
    (48, 8, 8), (20, 8, 8), (3, 32, 2), (1, 32, 2),
])  # fmt: skip
def test_unit_cluster_fills_its_steps(units, sgs, lanes):
    assert unit_cluster(units, sgs) == lanes


def test_clusters_give_a_subgroups_features_to_fewer_lanes():
    # Qwen2.5 1.5B's gate/up (48 units): 16 lanes a group, 8 groups of 2 features a workgroup
    assert unit_plan("unit-auto-cfit", 1536, 8960, ("Q4_K", "Q4_K"), 32, 1, 49152) == ("sub16", 2, 16, 1536)
    assert unit_plan("unit-auto-c8", 1536, 8960, ("Q4_K", "Q4_K"), 32, 1, 49152) == ("sub8", 2, 32, 1536)
    # Qwen2.5 0.5B's gate/up (28 units fill 32 lanes to 0.875): whole subgroups, as
    # "unit-auto" plans them, 2 features each, 4 subgroups of 32 lanes in 128 threads
    assert unit_plan("unit-auto-cfit", 896, 4864, ("Q5_0", "Q5_0"), 32, 1, 49152) == ("sub", 2, 8, 896)
    assert unit_plan("unit-auto", 896, 4864, ("Q5_0", "Q5_0"), 32, 1, 49152) == ("sub", 2, 8, 896)
    assert unit_plan("unit-auto-c16", 1536, 8960, ("Q4_K", "Q4_K"), 8, 1, 49152)[0] == "sub"
    # long rows keep a workgroup a group
    assert unit_plan("unit-auto-c16", 8960, 1536, ("Q4_K",), 32, 1, 49152)[0] == "wg"
