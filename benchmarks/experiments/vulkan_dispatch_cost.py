"""What one dispatch costs on the adapter, apart from its work: the floor under every kernel
of a decode step, which is a chain of a few hundred dependent dispatches.

    python benchmarks/experiments/vulkan_dispatch_cost.py [--chain 256] [--trials 7]

Each case is one compute pass of N dispatches of a tiny kernel, timed by timestamp
queries at the pass's start and end (median of --trials passes after an untimed one);
the cost per dispatch is the slope between N = 1 and N = --chain:

- ``dependent``: every dispatch reads and writes the same storage buffer (as a decode
  step's arena), so wgpu puts a barrier between each two;
- ``disjoint``: each dispatch writes a buffer of its own: no hazard, no barrier;
- ``dependent-wide``: as dependent, 1024 workgroups a dispatch instead of 1;
- ``dependent-2buf``: ping-pong between two buffers (read one, write the other);

and the host round trip of a submission whose only work is a 4-byte copy to a mappable
buffer, mapped and read (the floor under every decoded token), by wall clock.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

KERNEL = """
@group(0) @binding(0) var<storage, read_write> A: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x % 4096u;
    A[i] = A[i] * 0.5 + 1.0;
}
"""
KERNEL2 = """
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x % 4096u;
    Y[i] = X[i] * 0.5 + 1.0;
}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chain", type=int, default=256)
    ap.add_argument("--trials", type=int, default=7)
    args = ap.parse_args()
    import wgpu

    adapter = sorted(wgpu.gpu.enumerate_adapters_sync(), key=lambda a: a.info.get("adapter_type") != "DiscreteGPU")[0]
    print("adapter:", adapter.info.get("device"), adapter.info.get("backend_type"))
    dev = adapter.request_device_sync(required_features=["timestamp-query"])
    q = dev.queue
    U = wgpu.BufferUsage
    mod1 = dev.create_shader_module(code=KERNEL)
    mod2 = dev.create_shader_module(code=KERNEL2)
    p1 = dev.create_compute_pipeline(layout="auto", compute={"module": mod1, "entry_point": "main"})
    p2 = dev.create_compute_pipeline(layout="auto", compute={"module": mod2, "entry_point": "main"})
    size = 4096 * 4
    N = args.chain
    shared = dev.create_buffer(size=size, usage=U.STORAGE | U.COPY_SRC)
    own = [dev.create_buffer(size=size, usage=U.STORAGE) for _ in range(N)]
    pp = [dev.create_buffer(size=size, usage=U.STORAGE) for _ in range(2)]

    def bg1(buf):
        return dev.create_bind_group(layout=p1.get_bind_group_layout(0),
                                     entries=[{"binding": 0, "resource": {"buffer": buf, "offset": 0, "size": size}}])

    bg_shared = bg1(shared)
    bg_own = [bg1(b) for b in own]
    bg_pp = [dev.create_bind_group(layout=p2.get_bind_group_layout(0), entries=[
        {"binding": 0, "resource": {"buffer": pp[i], "offset": 0, "size": size}},
        {"binding": 1, "resource": {"buffer": pp[1 - i], "offset": 0, "size": size}}]) for i in range(2)]
    qs = dev.create_query_set(type=wgpu.QueryType.timestamp, count=2)
    qbuf = dev.create_buffer(size=16, usage=U.QUERY_RESOLVE | U.COPY_SRC)

    def timed(pipe, bgs, groups: int) -> float:
        """us of one pass over the dispatches (bind group i of bgs each), the median."""
        out = []
        for trial in range(args.trials + 1):
            enc = dev.create_command_encoder()
            cp = enc.begin_compute_pass(timestamp_writes={"query_set": qs, "beginning_of_pass_write_index": 0,
                                                          "end_of_pass_write_index": 1})
            cp.set_pipeline(pipe)
            for bg in bgs:
                cp.set_bind_group(0, bg)
                cp.dispatch_workgroups(groups, 1, 1)
            cp.end()
            enc.resolve_query_set(qs, 0, 2, qbuf, 0)
            q.submit([enc.finish()])
            t = np.frombuffer(bytes(q.read_buffer(qbuf)), np.uint64)
            if trial:
                out.append((int(t[1]) - int(t[0])) / 1e3)
        return statistics.median(out)

    cases = {
        "dependent": (p1, lambda n: [bg_shared] * n, 1),
        "disjoint": (p1, lambda n: bg_own[:n], 1),
        "dependent-wide": (p1, lambda n: [bg_shared] * n, 1024),
        "dependent-2buf": (p2, lambda n: [bg_pp[i % 2] for i in range(n)], 1),
    }
    print(f"{'case':<16} {'1 dispatch us':>14} {N:>5} dispatches us {'per dispatch us':>16}")
    for name, (pipe, bgs, groups) in cases.items():
        t1 = timed(pipe, bgs(1), groups)
        tn = timed(pipe, bgs(N), groups)
        print(f"{name:<16} {t1:>14.2f} {tn:>19.1f} {(tn - t1) / (N - 1):>16.2f}")

    # the host round trip: submit a 4-byte copy, map the mappable buffer, read it
    rb = dev.create_buffer(size=256, usage=U.MAP_READ | U.COPY_DST)
    walls = []
    for _ in range(50):
        t0 = time.perf_counter()
        enc = dev.create_command_encoder()
        enc.copy_buffer_to_buffer(shared, 0, rb, 0, 4)
        q.submit([enc.finish()])
        rb.map_sync(wgpu.MapMode.READ)
        bytes(rb.read_mapped())
        rb.unmap()
        walls.append((time.perf_counter() - t0) * 1e6)
    print(f"round trip (copy 4 bytes, submit, map, read): median {statistics.median(walls[5:]):.1f} us, "
          f"min {min(walls[5:]):.1f} us")
    # and with a dependent chain of 184 dispatches before it (a SmolLM2 token's count)
    walls = []
    for _ in range(20):
        t0 = time.perf_counter()
        enc = dev.create_command_encoder()
        cp = enc.begin_compute_pass()
        cp.set_pipeline(p1)
        for _ in range(184):
            cp.set_bind_group(0, bg_shared)
            cp.dispatch_workgroups(1, 1, 1)
        cp.end()
        enc.copy_buffer_to_buffer(shared, 0, rb, 0, 4)
        q.submit([enc.finish()])
        rb.map_sync(wgpu.MapMode.READ)
        bytes(rb.read_mapped())
        rb.unmap()
        walls.append((time.perf_counter() - t0) * 1e6)
    print(f"184 dependent dispatches + round trip (recorded from Python): median {statistics.median(walls[3:]):.1f} us")


if __name__ == "__main__":
    main()
