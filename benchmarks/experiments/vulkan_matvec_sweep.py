"""The Vulkan backend's few-row (decode) product kernels, every variant on every product
shape of the four real files, timed on the adapter: GB/s of weight bytes per variant and
shape, and the best variant per shape.

    python benchmarks/experiments/vulkan_matvec_sweep.py [--variants workgroup,subgroup-x4] [--rows 1]
        [--reps 64] [--min-mb 256] [--check] [--quick] [--norm] [--json OUT]

Each (variant, shape) is one compute pass of ``--reps`` dispatches of that kernel, each
reading another copy of the weights (copies cycled so that together they exceed
``--min-mb``, more than the GPU's last-level cache: the bytes come from memory, as in a
decode step, where every product reads weights no earlier one read). The dispatches
write one activation buffer, so wgpu puts a barrier between them, as between the
dependent dispatches of a decode step. The time is the pass's (timestamp queries at its
start and end) divided by the dispatches; without timestamp queries, the wall clock of
the submission to its completion. The variants of a shape take turns, each pass after an
untimed one of its own, and a first round is discarded; the median of ``--trials``
passes is reported.

``--check`` also checks each variant on each shape (before timing): every row of a
batch of ``--rows`` >= 2 rows (3 when 1) must equal that row multiplied alone, bit for
bit (the backend's invariant), and the one-row result must match numpy's product of the
dequantized weights (relative error printed, 1e-4 expected).

``--quick``: a few small shapes, few repetitions, for a software adapter (lavapipe), to
check the script and the kernels; its figures mean nothing.

``--norm``: the kernels with x's rms_norm fused in (the norm weight in the arena), as a
decode step runs the products that follow a norm (gate/up, Q/K/V, the output).

Variants are the backend's row kernels (cera_backend_vulkan.compile.ROW_KERNELS): the
backend picks one with ``CERA_VULKAN_ROW_KERNEL=<name>`` (or ``VulkanBackend.row_kernel``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
for sub in ("cera-core/src", "cera-backend-vulkan/src"):
    if str(ROOT / sub) not in sys.path:
        sys.path.insert(0, str(ROOT / sub))

# (model, product, type, K, N, glu): the products of the four real files' layers (one of
# each kind; the counts per token are in the names' comments of the README), read from
# their GGUF tensor tables. glu: gate and up of one type in one dispatch.
SHAPES = [
    ("smollm2-135m", "gate+up", "Q4_1", 576, 1536, True),
    ("smollm2-135m", "down", "Q4_1", 1536, 576, False),
    ("smollm2-135m", "q/o", "Q4_1", 576, 576, False),
    ("smollm2-135m", "k/v", "Q4_1", 576, 192, False),
    ("smollm2-135m", "output", "Q8_0", 576, 49152, False),
    ("gemma3-270m", "gate+up", "Q5_0", 640, 2048, True),
    ("gemma3-270m", "q", "Q5_0", 640, 1024, False),
    ("gemma3-270m", "k/v", "Q5_0", 640, 256, False),
    ("gemma3-270m", "v", "Q8_0", 640, 256, False),
    ("gemma3-270m", "o", "Q4_K", 1024, 640, False),
    ("gemma3-270m", "down", "Q4_K", 2048, 640, False),
    ("gemma3-270m", "down", "Q6_K", 2048, 640, False),
    ("gemma3-270m", "output", "Q8_0", 640, 262144, False),
    ("qwen2.5-0.5b", "gate+up", "Q5_0", 896, 4864, True),
    ("qwen2.5-0.5b", "q/o", "Q5_0", 896, 896, False),
    ("qwen2.5-0.5b", "k/v", "Q5_0", 896, 128, False),
    ("qwen2.5-0.5b", "v", "Q8_0", 896, 128, False),
    ("qwen2.5-0.5b", "down", "Q4_K", 4864, 896, False),
    ("qwen2.5-0.5b", "down", "Q6_K", 4864, 896, False),
    ("qwen2.5-0.5b", "output", "Q8_0", 896, 151936, False),
    ("qwen2.5-1.5b", "gate+up", "Q4_K", 1536, 8960, True),
    ("qwen2.5-1.5b", "q/o", "Q4_K", 1536, 1536, False),
    ("qwen2.5-1.5b", "k/v", "Q4_K", 1536, 256, False),
    ("qwen2.5-1.5b", "v", "Q6_K", 1536, 256, False),
    ("qwen2.5-1.5b", "down", "Q4_K", 8960, 1536, False),
    ("qwen2.5-1.5b", "down", "Q6_K", 8960, 1536, False),
    ("qwen2.5-1.5b", "output", "Q6_K", 1536, 151936, False),
]

QUICK_SHAPES = [
    ("quick", "gate+up", "Q4_1", 576, 96, True),
    ("quick", "q", "Q5_0", 640, 64, False),
    ("quick", "v", "Q8_0", 896, 64, False),
    ("quick", "down", "Q4_K", 1536, 64, False),
    ("quick", "down", "Q6_K", 1024, 64, False),
    ("quick", "gate+up", "Q4_K", 1536, 64, True),
]


NORM = False  # --norm: the kernels with an rms_norm of x fused in (weight in the arena)
EPS = 1e-6


def kernel(ctx, variant: str, types: tuple, glu: bool, R: int, K: int, N: int):
    """(pipeline, layout, features per workgroup) of a row-kernel variant, as
    compile.VulkanExecutable._products builds it."""
    from cera_backend_vulkan import wgsl
    from cera_backend_vulkan.compile import BLK_LANES, ROW_KERNELS, VulkanExecutable

    kind = "swiglu" if glu else None
    n_b = 2 + len(types)
    ro = tuple(range(2, n_b))
    if variant.startswith("unit"):
        if not ctx.subgroups:
            return None
        from cera_backend_vulkan.compile import unit_plan, unit_shared_k

        shared = int(ctx.limits["max-compute-workgroup-storage-size"])
        plan = unit_plan(variant, K, N, types, ctx.subgroup_size, R, shared)
        if plan is None:  # unit-auto leaves these types to workgroup-1pass
            return kernel(ctx, "workgroup-1pass", types, glu, R, K, N)
        group, F, per, sk = plan
        sk = unit_shared_k(variant, sk)
        key = ("sweep", "matvec_unit", types, kind, R, per, F, NORM, group, sk)
        pipe, layout = ctx.pipeline(key, lambda: wgsl.matvec_unit(types, kind, R, per, F, NORM, group, sk), n_b, ro)
        return pipe, layout, per
    if variant.startswith("subgroup"):
        if not ctx.subgroups:
            return None
        per, span = max(1, wgsl.MV_WG // ctx.subgroup_size), ROW_KERNELS[variant]
        if span == 8:
            lanes = min(BLK_LANES[variant], ctx.subgroup_size)
            if lanes:
                per = wgsl.MV_WG // lanes
            vec = variant.endswith("-v4")
            n_v = sum(wgsl.vec_view(t) for t in types) if vec else 0
            key = ("sweep", "matvec_blk", types, kind, R, per, lanes, vec, NORM)
            pipe, layout = ctx.pipeline(
                key,
                lambda: wgsl.matvec_blk(types, kind, R, per, NORM, lanes, vec=vec),
                n_b + n_v,
                tuple(range(2, n_b + n_v)),
            )
            return pipe, layout, per
        key = ("sweep", "matvec_sg", types, kind, R, per, span, NORM)
        pipe, layout = ctx.pipeline(key, lambda: wgsl.matvec_sg(types, kind, True, R, per, NORM, span), n_b, ro)
        return pipe, layout, per
    F = VulkanExecutable._mv_feats(R)
    one = variant == "workgroup-1pass"
    if one and not ctx.subgroups:
        return None
    sg = ctx.subgroups
    key = ("sweep", "matvec", types, kind, R, sg, F, one, NORM)
    pipe, layout = ctx.pipeline(key, lambda: wgsl.matvec(types, kind, sg, R, NORM, F, one), n_b, ro)
    return pipe, layout, F


class Case:
    """One shape on the device: weight copies, an arena (x then y), parameters."""

    def __init__(self, ctx, ggml_type: str, K: int, N: int, glu: bool, R: int, min_bytes: int, rng):
        from cera.testing.conformance import _random_blocks
        from cera_backend_vulkan.wgsl import row_bytes

        wgpu = ctx.wgpu
        self.ctx, self.t, self.K, self.N, self.glu, self.R = ctx, ggml_type, K, N, glu, R
        self.n_w = 2 if glu else 1
        self.row_bytes = row_bytes(ggml_type, K)
        self.w_bytes = self.row_bytes * N * self.n_w  # read by one dispatch
        self.host = [_random_blocks(ggml_type, N, K, rng) for _ in range(self.n_w)]
        self.copies = max(1, min(64, -(-min_bytes // self.w_bytes)))
        self.buffers = []
        for _c in range(self.copies):
            bufs = []
            for h in self.host:
                raw = np.ascontiguousarray(h).reshape(-1)
                pad = -len(raw) % 4 + 16
                data = np.concatenate([raw, np.zeros(pad, np.uint8)])
                bufs.append(ctx.device.create_buffer_with_data(data=data, usage=wgpu.BufferUsage.STORAGE))
            self.buffers.append(bufs)
        self.x = rng.standard_normal((max(R, 3), K)).astype(np.float32)
        self.y_off = max(R, 3) * K
        # --norm: the rms_norm weight after y (at a multiple of 4 values, as the unit kernel needs)
        self.nw_off = -(-(self.y_off + max(R, 3) * N) // 4) * 4
        self.nw = rng.uniform(0.5, 1.5, K).astype(np.float32)
        self.arena_words = self.nw_off + K + 16
        self.arena = ctx.buffer(self.arena_words * 4)
        ctx.queue.write_buffer(self.arena, 0, np.ascontiguousarray(self.x))
        ctx.queue.write_buffer(self.arena, self.nw_off * 4, self.nw)

    def params(self, M: int) -> np.ndarray:
        p = np.zeros(64, np.uint32)
        # K, N, M, x offset, x row stride, y offset, y row stride, bias, residual,
        # residual stride, first feature, row bytes, second row bytes
        p[:13] = [self.K, self.N, M, 0, self.K, self.y_off, self.N, 0, 0, 0, 0, self.row_bytes, self.row_bytes]
        if NORM:  # the norm weight's offset + 1, eps
            p[13] = self.nw_off + 1
            p[14] = np.float32(EPS).view(np.uint32)
        return p

    def bind_groups(self, layout, params_buf, vec: bool = False):
        out = []
        for bufs in self.buffers:
            entries = [
                {"binding": 0, "resource": {"buffer": params_buf, "offset": 0, "size": 256}},
                {"binding": 1, "resource": {"buffer": self.arena, "offset": 0, "size": self.arena_words * 4}},
            ]
            for j, b in enumerate(bufs):
                entries.append({"binding": 2 + j, "resource": {"buffer": b, "offset": 0, "size": b.size}})
            if vec and wgsl_vec_view(self.t):  # the weights again, as the vec4 views
                for j, b in enumerate(bufs):
                    entries.append(
                        {"binding": 2 + len(bufs) + j, "resource": {"buffer": b, "offset": 0, "size": b.size}}
                    )
            out.append(self.ctx.device.create_bind_group(layout=layout, entries=entries))
            _arenas[id(out[-1])] = self.arena
        return out

    def reference(self) -> np.ndarray:
        """numpy: y of x's first row (the glu of the two products when glu), once."""
        if getattr(self, "_ref", None) is None:
            self._ref = self._reference()
        return self._ref

    def _reference(self) -> np.ndarray:
        from gguf.constants import GGMLQuantizationType
        from gguf.quants import dequantize

        ys = []
        x = self.x[0].astype(np.float64)
        if NORM:
            x = x / np.sqrt(np.mean(x * x) + EPS) * self.nw
        for h in self.host:
            w = dequantize(h.reshape(-1), GGMLQuantizationType[self.t]).reshape(self.N, self.K)
            ys.append(w.astype(np.float64) @ x)
        if self.glu:
            g, u = ys
            return g / (1.0 + np.exp(-g)) * u
        return ys[0]


def wgsl_vec_view(t: str) -> bool:
    from cera_backend_vulkan.wgsl import vec_view

    return vec_view(t)


def _groups(n_wg: int) -> tuple[int, int]:
    from cera_backend_vulkan.compile import grid

    return grid(n_wg)


def run_pass(ctx, pipe, bgs, groups, reps: int, qs=None, qbuf=None):
    enc = ctx.device.create_command_encoder()
    tw = None
    if qs is not None:
        tw = {"query_set": qs, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1}
    cp = enc.begin_compute_pass(timestamp_writes=tw) if tw else enc.begin_compute_pass()
    cp.set_pipeline(pipe)
    for i in range(reps):
        cp.set_bind_group(0, bgs[i % len(bgs)])
        cp.dispatch_workgroups(groups[0], groups[1], 1)
    cp.end()
    if qs is not None:
        enc.resolve_query_set(qs, 0, 2, qbuf, 0)
    t0 = time.perf_counter()
    ctx.queue.submit([enc.finish()])
    if qs is not None:
        raw = np.frombuffer(bytes(ctx.queue.read_buffer(qbuf)), np.uint64)  # waits for the submission
        return float(int(raw[1]) - int(raw[0])) * 1e-9
    ctx.queue.read_buffer(bgs_arena(bgs), 0, 4)  # waits for the submission
    return time.perf_counter() - t0


_arenas: dict = {}


def bgs_arena(bgs):
    return _arenas[id(bgs[0])]


def read_y(ctx, case: Case, M: int) -> np.ndarray:
    raw = ctx.queue.read_buffer(case.arena, case.y_off * 4, M * case.N * 4)
    return np.frombuffer(bytes(raw), np.float32).reshape(M, case.N).copy()


def check(ctx, case: Case, pipe, layout, per: int, vec: bool = False) -> str:
    """Rows of an M-row batch equal one-row results bit for bit; one row near numpy."""
    wgpu = ctx.wgpu
    M = max(case.R, 3) if case.R > 1 else 3
    results = {}
    for m in [1, M]:
        pbuf = ctx.device.create_buffer_with_data(data=case.params(m), usage=wgpu.BufferUsage.UNIFORM)
        bgs = case.bind_groups(layout, pbuf, vec)[:1]
        if m == 1:
            # each row alone: x row r moved to row 0's place
            rows = []
            for r in range(M):
                ctx.queue.write_buffer(case.arena, 0, np.ascontiguousarray(case.x[r]))
                run_pass(ctx, pipe, bgs, _groups(-(-case.N // per)), 1)
                rows.append(read_y(ctx, case, 1)[0])
            ctx.queue.write_buffer(case.arena, 0, np.ascontiguousarray(case.x))
            results[1] = np.stack(rows)
        else:
            run_pass(ctx, pipe, bgs, _groups(-(-case.N // per)), 1)
            results[m] = read_y(ctx, case, m)
    same = np.array_equal(results[1].view(np.uint32), results[M].view(np.uint32))
    ref = case.reference()
    err = float(np.abs(results[1][0] - ref).max() / max(1e-30, np.abs(ref).max()))
    status = "ok" if same and err < 1e-3 else "FAIL"
    return f"{status} (rows of {M} bit-identical: {same}; rel. error {err:.1e})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="", help="comma-separated (default: all of compile.ROW_KERNELS)")
    ap.add_argument("--rows", type=int, default=1, help="activation rows M (decode: 1)")
    ap.add_argument(
        "--norm",
        action="store_true",
        help="with the rms_norm of x fused in, as a decode step runs gate/up and the output",
    )
    ap.add_argument("--reps", type=int, default=0, help="dispatches per timed pass (default 64; 4 with --quick)")
    ap.add_argument("--trials", type=int, default=0, help="timed passes per case (default 5; 1 with --quick)")
    ap.add_argument("--min-mb", type=int, default=0, help="weight copies cycled: at least this many MB")
    ap.add_argument("--check", action="store_true", help="check every variant's results first")
    ap.add_argument("--quick", action="store_true", help="small shapes, few reps (software adapters)")
    ap.add_argument("--only", default="", help="comma-separated types to keep (e.g. Q4_K,Q6_K)")
    ap.add_argument("--device-index", type=int, default=0)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    global NORM
    NORM = args.norm

    from cera_backend_vulkan import device as gpu
    from cera_backend_vulkan.compile import ROW_KERNELS, VulkanExecutable
    from cera_backend_vulkan.wgsl import row_bytes

    t_start = time.perf_counter()
    ctx = gpu.context(args.device_index)
    wgpu = ctx.wgpu
    variants = [v for v in args.variants.split(",") if v] or list(ROW_KERNELS)
    for v in variants:
        if v not in ROW_KERNELS:
            sys.exit(f"unknown variant {v!r}; known: {', '.join(ROW_KERNELS)}")
    reps = args.reps or (4 if args.quick else 64)
    trials = args.trials or (1 if args.quick else 5)
    min_bytes = (args.min_mb or (1 if args.quick else 256)) << 20
    shapes = QUICK_SHAPES if args.quick else SHAPES
    if args.only:
        keep = set(args.only.split(","))
        shapes = [s for s in shapes if s[2] in keep]
    R = VulkanExecutable._mv_rows(args.rows)
    timing = "timestamp queries" if ctx.timestamps else "wall clock"
    print(
        f"# {ctx.name}; subgroups: {ctx.subgroups} (size {ctx.subgroup_size}); timing: {timing}; "
        f"M = {args.rows} row(s); {reps} dispatches a pass, median of {trials} passes"
    )
    rng = np.random.default_rng(0)
    qs = qbuf = None
    if ctx.timestamps:
        qs = ctx.device.create_query_set(type=wgpu.QueryType.timestamp, count=2)
        qbuf = ctx.buffer(16, wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
    rows_out = []
    header = f"{'model':<14} {'product':<8} {'type':<5} {'K':>5} {'N':>6} {'MB':>6} | " + " ".join(
        f"{v:>15}" for v in variants
    )
    print(header + " | best")
    for model, prod, t, K, N, glu in shapes:
        rb = row_bytes(t, K)
        if rb * N + 16 > ctx.max_binding:
            # more than one binding holds (a software adapter's 128 MB): the backend splits
            # such a weight into several dispatches; here only the rows one binding holds
            N = (ctx.max_binding - 16) // rb
            prod += "*"
        case = Case(ctx, t, K, N, glu, R, min_bytes, rng)
        gbs, us, checks, runs = {}, {}, {}, {}
        for v in variants:
            k = kernel(ctx, v, (t, t) if glu else (t,), glu, R, K, N)
            if k is None:
                continue
            pipe, layout, per = k
            if args.check:
                checks[v] = check(ctx, case, pipe, layout, per, v.endswith("-v4"))
            pbuf = ctx.device.create_buffer_with_data(data=case.params(args.rows), usage=wgpu.BufferUsage.UNIFORM)
            runs[v] = (pipe, case.bind_groups(layout, pbuf, v.endswith("-v4")), _groups(-(-N // per)))
        # the variants' passes alternated, each after a warm-up pass of its own, so that a
        # drift of the GPU's clocks (it idles while the checks run on the host) falls on
        # them all alike, not on the first columns
        ts = {v: [] for v in runs}
        for trial in range(trials + 1):
            for v, (pipe, bgs, groups) in runs.items():
                run_pass(ctx, pipe, bgs, groups, reps, qs, qbuf)  # warm-up
                sec = run_pass(ctx, pipe, bgs, groups, reps, qs, qbuf) / reps
                if trial:  # the first round only warms
                    ts[v].append(sec)
        for v, t_v in ts.items():
            sec = statistics.median(t_v)
            us[v] = sec * 1e6
            gbs[v] = case.w_bytes / sec / 1e9
        best = max(gbs, key=gbs.get) if gbs else "-"
        cells = " ".join(f"{gbs[v]:7.2f} {us[v]:6.1f}us" if v in gbs else f"{'-':>15}" for v in variants)
        print(f"{model:<14} {prod:<8} {t:<5} {K:>5} {N:>6} {case.w_bytes / 1e6:6.2f} | {cells} | {best}", flush=True)
        for v, c in checks.items():
            print(f"    check {v}: {c}")
        rows_out.append(
            {
                "model": model,
                "product": prod,
                "type": t,
                "K": K,
                "N": N,
                "glu": glu,
                "weight_bytes": case.w_bytes,
                "gb_s": gbs,
                "us": us,
                "best": best,
                "checks": checks,
            }  # fmt: skip
        )
        del case
    # a summary: per variant, the time all shapes take (each shape once) and its geometric mean GB/s
    print("\n# per variant: sum of the shapes' times (us), geometric mean GB/s, shapes where best")
    for v in variants:
        have = [r for r in rows_out if v in r["us"]]
        if not have:
            continue
        total = sum(r["us"][v] for r in have)
        gm = math.exp(sum(math.log(r["gb_s"][v]) for r in have) / len(have))
        wins = sum(r["best"] == v for r in have)
        print(f"{v:>16}: {total:9.1f} us  {gm:7.1f} GB/s  best on {wins}/{len(have)}")
    print("# *: N cut to the rows one binding of this adapter holds")
    print("# GB/s: weight bytes a dispatch reads / its time; cells: GB/s and us a dispatch")
    print(f"# {time.perf_counter() - t_start:.1f} s in all")
    if args.json:
        Path(args.json).write_text(json.dumps({"adapter": ctx.name, "timing": timing, "rows": rows_out}, indent=1))


if __name__ == "__main__":
    main()
