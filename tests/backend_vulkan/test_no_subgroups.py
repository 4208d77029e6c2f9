"""The kernels' paths for adapters without subgroup operations: the norm's and the
decode attention's shared-memory trees, the workgroup products (the GPUs' row kernel
then, whatever it is named), against the numpy reference. An adapter's context is made
once a process, so this runs in a process of its own with CERA_VULKAN_SUBGROUPS=0 (the
switch that turns them off); lavapipe has subgroups, so nothing else here covers these
paths."""

from __future__ import annotations

import os
import subprocess
import sys

from .conftest import needs_vulkan

CHILD = """
from cera.testing import conformance
from cera_backend_vulkan.backend import VulkanBackend
from cera_backend_vulkan.capabilities import OPS, TENSOR_TYPES

b = VulkanBackend()
assert not b.ctx.subgroups, "CERA_VULKAN_SUBGROUPS=0 left subgroups on"
ops = ("rms_norm", "layer_norm", "attention", "attention_full", "cross_attention", "argmax", "top_k")
linear = {"linear[Q4_K,1]", "linear[Q6_K,1]", "linear[Q4_1,1]", "linear[Q8_0,5]", "linear[Q4_K,20]"}
done = []
for c in conformance.op_cases(TENSOR_TYPES, OPS):
    if (c.op in ops or c.name in linear) and c.kv_type in ("f16", "f32"):
        for row_kernel in (None, "unit-auto"):
            b.row_kernel = row_kernel
            conformance.check_op(b, c)
        done.append(c.name)
print(len(done), " ".join(done))
"""


@needs_vulkan
def test_kernels_without_subgroups():
    env = dict(os.environ, CERA_VULKAN_SUBGROUPS="0")
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-4000:]
    n, names = p.stdout.split(maxsplit=1)
    assert int(n) >= 12, names
    for want in ("rms_norm", "layer_norm", "attention[f16]", "attention[window_softcap]", "linear[Q4_K,1]"):
        assert want in names.split(), (want, names)
