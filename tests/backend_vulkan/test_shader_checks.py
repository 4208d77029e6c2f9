"""CERA_VULKAN_SHADER_CHECKS: which of wgpu's runtime checks (index clamping, loop
counters) the kernels are compiled with. The default is none (wgpu-native's trusted
module); the conformance suite runs every kernel that way. Here: the setting's parsing,
and kernels compiled with the checks on, in a process of their own (a context's checks
are fixed when it is made)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import needs_vulkan

pytest.importorskip("cera_backend_vulkan")
from cera.errors import InvalidOptions  # noqa: E402
from cera_backend_vulkan import device  # noqa: E402


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (None, ()),
        ("none", ()),
        ("", ()),
        ("all", ("bounds", "loops")),
        ("bounds", ("bounds",)),
        ("loops", ("loops",)),
        ("loops, bounds", ("bounds", "loops")),
        ("BOUNDS", ("bounds",)),
    ],
)
def test_the_setting_names_the_checks(monkeypatch, value, want):
    if value is None:
        monkeypatch.delenv(device.SHADER_CHECKS_ENV, raising=False)
    else:
        monkeypatch.setenv(device.SHADER_CHECKS_ENV, value)
    assert device.shader_checks() == want


def test_an_unknown_check_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(device.SHADER_CHECKS_ENV, "bounds,overflow")
    with pytest.raises(InvalidOptions, match=r"CERA_VULKAN_SHADER_CHECKS.*'overflow'.*bounds, loops"):
        device.shader_checks()


CHILD = """
import numpy as np
from cera.testing import conformance
from cera_backend_vulkan.backend import VulkanBackend
from cera_backend_vulkan.capabilities import OPS, TENSOR_TYPES

b = VulkanBackend()
ctx = b.ctx
assert ctx.shader_checks == ("bounds",), ctx.shader_checks
assert "shader checks: bounds" in b.probe().device, b.probe().device

# naga's bounds policy ("Restrict") reads a workgroup array's last element for an index
# past its end: the check is compiled in
code = '''
@group(0) @binding(0) var<uniform> u: vec4<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
var<workgroup> a: array<u32, 4>;
@compute @workgroup_size(4)
fn main(@builtin(local_invocation_index) t: u32) {
    a[t] = 10u + t;
    workgroupBarrier();
    if (t == 0u) { out[0] = a[u.x]; }
}
'''
import wgpu
pipe, layout = ctx.pipeline("restrict-probe", lambda: code, 2)
ubuf = ctx.device.create_buffer_with_data(data=np.array([9, 0, 0, 0], np.uint32), usage=wgpu.BufferUsage.UNIFORM)
obuf = ctx.buffer(16)
bg = ctx.device.create_bind_group(layout=layout, entries=[
    {"binding": 0, "resource": {"buffer": ubuf}}, {"binding": 1, "resource": {"buffer": obuf}}])
enc = ctx.device.create_command_encoder()
cp = enc.begin_compute_pass(); cp.set_pipeline(pipe); cp.set_bind_group(0, bg); cp.dispatch_workgroups(1); cp.end()
ctx.queue.submit([enc.finish()])
got = int(np.frombuffer(bytes(ctx.queue.read_buffer(obuf, 0, 4)), np.uint32)[0])
assert got == 13, got

names = {"rms_norm", "attention[f16]", "attention[prompt_tiles]", "linear[Q4_K,1]", "linear[Q6_K,20]", "linear[Q8_0,5]", "rope[normal]"}
done = []
for c in conformance.op_cases(TENSOR_TYPES, OPS):
    if c.name in names:
        conformance.check_op(b, c)
        done.append(c.name)
print(" ".join(sorted(done)))
"""


@needs_vulkan
def test_kernels_with_wgpus_bounds_checks():
    env = dict(os.environ, CERA_VULKAN_SHADER_CHECKS="bounds")
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-4000:]
    assert len(p.stdout.split()) == 7, p.stdout
