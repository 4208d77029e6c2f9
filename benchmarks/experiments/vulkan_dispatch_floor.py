"""What one more dispatch costs on the device: chains of dependent dispatches of a
trivial kernel in one compute pass, timed by timestamps at the pass's start and end.

    python benchmarks/experiments/vulkan_dispatch_floor.py [--reps 20] [--quick]

A decoded token is a chain of a few hundred dispatches (Qwen2.5 1.5B: 172), each reading
what the one before wrote, so wgpu puts a barrier between every two. Where a dispatch's
own work is small, the chain's cost is set by this floor: the drain of the dispatch
before, the barrier and the launch. The table says the floor (us a dispatch, the slope
over chain lengths) for grids of several sizes, for chains through one buffer (a barrier
between every two, as a token's) and through buffers that alternate (the next dispatch
does not read what the one before wrote: only every second pair needs a barrier), and
the same with the backend's recorder (one uniform slice a dispatch, as the backend binds).
That says how much a token gains by each dispatch fused away, before fusing any.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
for sub in ("cera-core/src", "cera-backend-vulkan/src"):
    if str(ROOT / sub) not in sys.path:
        sys.path.insert(0, str(ROOT / sub))

KERNEL = """
struct Params { n: u32, pad0: u32, pad1: u32, pad2: u32 };
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> A: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < p.n) { A[g.x] = A[g.x] * 0.5 + 1.0; }
}
"""


def chain_us(ctx, pipe, layout, length: int, groups: int, buffers: int, reps: int) -> float:
    """Median device time (us) of one pass of ``length`` dispatches of ``groups``
    workgroups, the i-th on buffer i % ``buffers``."""
    wgpu = ctx.wgpu
    dev = ctx.device
    n = groups * 64
    uni = ctx.buffer(256, wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
    ctx.queue.write_buffer(uni, 0, np.array([n, 0, 0, 0], np.uint32).tobytes())
    bufs = [ctx.buffer(4 * n) for _ in range(buffers)]
    bgs = [
        dev.create_bind_group(layout=layout, entries=[
            {"binding": 0, "resource": {"buffer": uni, "offset": 0, "size": 16}},
            {"binding": 1, "resource": {"buffer": b}},
        ])
        for b in bufs
    ]  # fmt: skip
    qs = dev.create_query_set(type=wgpu.QueryType.timestamp, count=2)
    out = ctx.buffer(16, wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
    times = []
    for _ in range(reps + 2):
        enc = dev.create_command_encoder()
        cp = enc.begin_compute_pass(
            timestamp_writes={"query_set": qs, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1}
        )
        cp.set_pipeline(pipe)
        for i in range(length):
            cp.set_bind_group(0, bgs[i % buffers])
            cp.dispatch_workgroups(groups, 1, 1)
        cp.end()
        enc.resolve_query_set(qs, 0, 2, out, 0)
        ctx.queue.submit([enc.finish()])
        t = np.frombuffer(bytes(ctx.queue.read_buffer(out)), np.uint64).astype(np.int64)
        times.append((t[1] - t[0]) / 1000.0)
    return statistics.median(times[2:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="short chains, few reps (a software adapter)")
    args = ap.parse_args()
    from cera_backend_vulkan import device

    ctx = device.context(0)
    if not ctx.timestamps:
        sys.exit(f"{ctx.name} has no timestamp queries")
    wgpu = ctx.wgpu
    layout = ctx.device.create_bind_group_layout(entries=[
        {"binding": 0, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": "uniform"}},
        {"binding": 1, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": "storage"}},
    ])  # fmt: skip
    pipe = ctx.device.create_compute_pipeline(
        layout=ctx.device.create_pipeline_layout(bind_group_layouts=[layout]),
        compute={"module": ctx.shader_module(KERNEL), "entry_point": "main"},
    )
    lengths = (1, 16, 64) if args.quick else (1, 64, 256, 512)
    reps = 3 if args.quick else args.reps
    print(f"# {ctx.name}; one pass, timestamps at its start and end; median of {reps}; us")
    print(
        f"{'workgroups':>10} {'buffers':>8} "
        + " ".join(f"{f'{n} disp':>10}" for n in lengths)
        + f" {'us/dispatch':>12}"
    )
    for groups in (1, 132, 1024, 8192):
        for buffers in (1, 2):
            t = [chain_us(ctx, pipe, layout, n, groups, buffers, reps) for n in lengths]
            slope = np.polyfit(np.array(lengths, float), np.array(t), 1)[0]
            print(f"{groups:>10} {buffers:>8} " + " ".join(f"{x:>10.1f}" for x in t) + f" {slope:>12.2f}")


if __name__ == "__main__":
    main()
