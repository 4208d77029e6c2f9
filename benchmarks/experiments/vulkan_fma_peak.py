"""The arithmetic ceilings a WGSL kernel reaches through wgpu on this adapter, for the tiled
(prompt) products: chains of f32 FMA on vec4<f32>, of packed f16 FMA on vec4<f16>, and f16
FMA runs of 8 converted into f32 accumulators (f16 products with f32 accumulation). Eight
independent chains a thread, operands from a uniform (nothing folds), one large dispatch
timed on the host around submit and read-back (about 20-50 ms of work, median of 5).
Prints the adapter's features too: whether shader-f16 and any cooperative-matrix feature
are listed.

    python benchmarks/experiments/vulkan_fma_peak.py [--iters 20000]
"""

from __future__ import annotations

import argparse
import statistics
import struct
import time

import numpy as np
import wgpu

HEAD = """
struct P { n: u32, s: f32, t: f32, u: f32 }
@group(0) @binding(0) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(1) var<uniform> p: P;
"""

F32 = HEAD + """
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    let b = vec4<f32>(p.s); let c = vec4<f32>(p.t);
    var a0 = vec4<f32>(f32(g.x & 7u) * p.u); var a1 = a0 + c; var a2 = a1 + c; var a3 = a2 + c;
    var a4 = a3 + c; var a5 = a4 + c; var a6 = a5 + c; var a7 = a6 + c;
    for (var i = 0u; i < p.n; i++) {
        a0 = fma(a0, b, c); a1 = fma(a1, b, c); a2 = fma(a2, b, c); a3 = fma(a3, b, c);
        a4 = fma(a4, b, c); a5 = fma(a5, b, c); a6 = fma(a6, b, c); a7 = fma(a7, b, c);
    }
    out[g.x] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}
"""

F16 = "enable f16;\n" + HEAD + """
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    let b = vec4<f16>(f16(p.s)); let c = vec4<f16>(f16(p.t));
    var a0 = vec4<f16>(f16(f32(g.x & 7u) * p.u)); var a1 = a0 + c; var a2 = a1 + c; var a3 = a2 + c;
    var a4 = a3 + c; var a5 = a4 + c; var a6 = a5 + c; var a7 = a6 + c;
    for (var i = 0u; i < p.n; i++) {
        a0 = fma(a0, b, c); a1 = fma(a1, b, c); a2 = fma(a2, b, c); a3 = fma(a3, b, c);
        a4 = fma(a4, b, c); a5 = fma(a5, b, c); a6 = fma(a6, b, c); a7 = fma(a7, b, c);
    }
    out[g.x] = vec4<f32>(a0 + a1 + a2 + a3) + vec4<f32>(a4 + a5 + a6 + a7);
}
"""

# runs of 8 f16 FMAs, each run's result added into an f32 accumulator (a tile's k-steps
# in f16, the sum over k-tiles in f32); n counts FMAs as above (n/8 runs)
F16_F32 = "enable f16;\n" + HEAD + """
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    let b = vec4<f16>(f16(p.s)); let c = vec4<f16>(f16(p.t));
    var s0 = vec4<f32>(0.0); var s1 = s0; var s2 = s0; var s3 = s0;
    var s4 = s0; var s5 = s0; var s6 = s0; var s7 = s0;
    let z = vec4<f16>(f16(f32(g.x & 7u) * p.u));
    for (var i = 0u; i < p.n / 8u; i++) {
        var a0 = z; var a1 = z + c; var a2 = a1 + c; var a3 = a2 + c;
        var a4 = a3 + c; var a5 = a4 + c; var a6 = a5 + c; var a7 = a6 + c;
        for (var k = 0u; k < 8u; k++) {
            a0 = fma(a0, b, c); a1 = fma(a1, b, c); a2 = fma(a2, b, c); a3 = fma(a3, b, c);
            a4 = fma(a4, b, c); a5 = fma(a5, b, c); a6 = fma(a6, b, c); a7 = fma(a7, b, c);
        }
        s0 += vec4<f32>(a0); s1 += vec4<f32>(a1); s2 += vec4<f32>(a2); s3 += vec4<f32>(a3);
        s4 += vec4<f32>(a4); s5 += vec4<f32>(a5); s6 += vec4<f32>(a6); s7 += vec4<f32>(a7);
    }
    out[g.x] = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--groups", type=int, default=4096)
    args = ap.parse_args()
    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    feats = sorted(adapter.features)
    print("adapter:", adapter.info.get("device"), "| driver", adapter.info.get("description"))
    print("features:", " ".join(feats))
    print("cooperative-matrix listed:", [f for f in feats if "coop" in f.lower() or "matrix" in f.lower()] or "no")
    want = [f for f in ("shader-f16",) if f in feats]
    device = adapter.request_device_sync(required_features=want)
    threads = args.groups * 256
    out = device.create_buffer(size=threads * 16, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    uni = device.create_buffer(size=16, usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
    device.queue.write_buffer(uni, 0, struct.pack("<Ifff", args.iters, 0.999, 0.0001, 0.001))
    variants = [("f32 vec4 fma", F32)]
    if "shader-f16" in want:
        variants += [("f16 vec4 fma (packed)", F16), ("f16 runs of 8 -> f32 sum", F16_F32)]
    else:
        print("shader-f16 not offered: f16 variants skipped")
    for name, src in variants:
        mod = device.create_shader_module(code=src)
        pipe = device.create_compute_pipeline(layout="auto", compute={"module": mod, "entry_point": "main"})
        bg = device.create_bind_group(
            layout=pipe.get_bind_group_layout(0),
            entries=[{"binding": 0, "resource": {"buffer": out}}, {"binding": 1, "resource": {"buffer": uni}}],
        )
        times = []
        for rep in range(6):
            enc = device.create_command_encoder()
            cp = enc.begin_compute_pass()
            cp.set_pipeline(pipe)
            cp.set_bind_group(0, bg)
            cp.dispatch_workgroups(args.groups)
            cp.end()
            t = time.perf_counter()
            device.queue.submit([enc.finish()])
            res = np.frombuffer(device.queue.read_buffer(out, 0, 64), np.float32)
            if rep:  # the first is a warm-up
                times.append(time.perf_counter() - t)
        flops = threads * args.iters * 8 * 4 * 2
        med = statistics.median(times)
        print(f"{name:28s} {flops / med / 1e12:7.1f} TFLOP/s  ({med * 1e3:.2f} ms, {min(times) * 1e3:.2f}-"
              f"{max(times) * 1e3:.2f}; out[0] {res[0]:.4g})")


if __name__ == "__main__":
    main()
