"""The Vulkan compiler's fingerprint: every kernel's WGSL and every dispatch a sweep of
graphs compiles to, hashed, without a device.

A refactor of the compiler or of the kernel generators must leave every hash as it was:

    python tests/backend_vulkan/fingerprint.py --out before.json     # at the old commit
    python tests/backend_vulkan/fingerprint.py --check before.json   # at the new one

The sweep: the WGSL generators called directly over their arguments (products of every
type set, row counts, norms, glus, unit-dot forms; attention variants, rope, cache
stores; the rest), and the executables compiled for the conformance suite's op cases and
the tiny reference models (their weights also retyped to block types, so that the unit
and block-wise kernels are planned) on stand-in adapters (a software one with subgroups
of 8, GPUs with subgroups of 32 and 64, one without subgroups, one with a small binding)
under every switch of `cera_backend_vulkan.tuning` changed one at a time. A compiled
executable is recorded as its dispatches (kernel key, the hash of its WGSL, parameters,
bindings, workgroups, label), its constants and its memory plan."""

from __future__ import annotations

import argparse
import contextlib
import glob
import hashlib
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
TINY = sorted(glob.glob(str(ROOT / "tests" / "models" / "reference" / "tiny" / "tiny-*.gguf")))

SWITCHES = [
    {},
    *(
        {"CERA_VULKAN_ROW_KERNEL": k}
        for k in (
            "unit-auto",
            "unit-auto-gx",
            "unit-auto-sx",
            "unit-auto-c32",
            "unit-auto-c16",
            "unit-auto-c8",
            "unit-auto-c4",
            "unit-auto-cfit",
            "unit",
            "unit-f1",
            "unit-f4",
            "unit-wg1",
            "unit-wg2",
            "unit-wg4",
            "workgroup",
            "workgroup-1pass",
            "subgroup",
            "subgroup-x2",
            "subgroup-x4",
            "subgroup-blk",
            "subgroup-blk16",
            "subgroup-blk8",
            "subgroup-blk-v4",
            "subgroup-blk16-v4",
        )
    ),
    *({"CERA_VULKAN_ROW_KERNEL": "unit-auto", "CERA_VULKAN_UNIT_DOT": d} for d in ("f32", "i8")),
    *({"CERA_VULKAN_ROW_KERNEL": "unit-auto-sx", "CERA_VULKAN_UNIT_DOT": d} for d in ("f32", "i8")),
    *({"CERA_VULKAN_MATMUL": m} for m in ("4x4", "4x8", "4x4-m32", "auto-m32", "4x4-split", "4x4-skew-split")),
    *({"CERA_VULKAN_ATTENTION": a} for a in ("lanes-whole", "lanes-split", "tiles", "chunked")),
    {"CERA_VULKAN_ATTENTION": "lanes-split", "CERA_VULKAN_ATT_SPLIT": "4"},
    {"CERA_VULKAN_FOLD_KV": "0"},
    {"CERA_VULKAN_FUSE_SANDWICH": "0"},
    {"CERA_VULKAN_ROPE_ATTENTION": "0"},
    {"CERA_VULKAN_ROPE_TREE": "1"},
    {"CERA_VULKAN_UNIT_SEGMENTS": "0"},
    {"CERA_VULKAN_ROW_KERNEL": "unit-auto", "CERA_VULKAN_UNIT_SEGMENTS": "0"},
]
# the switches every stand-in adapter compiles the models under (gpu32 takes them all)
FEW = [
    {},
    {"CERA_VULKAN_ROW_KERNEL": "workgroup"},
    {"CERA_VULKAN_ATTENTION": "tiles"},
    {"CERA_VULKAN_ATTENTION": "chunked"},
    {"CERA_VULKAN_FOLD_KV": "0"},
    {"CERA_VULKAN_ROPE_TREE": "1"},
]
SWITCH_NAMES = sorted({k for s in SWITCHES for k in s})

# stand-in adapters: (name, software, subgroups, subgroup size, workgroup memory, largest binding)
ADAPTERS = [
    ("lavapipe", True, True, 8, 32768, 134217728),
    ("gpu32", False, True, 32, 49152, 134217728),
    ("gpu64", False, True, 64, 65536, 134217728),
    ("gpu-nosg", False, False, 1, 16384, 134217728),
    ("gpu-small", False, True, 32, 49152, 1 << 16),
]


class _Buffer:
    def __init__(self, size):
        self.size = int(size)


class _Queue:
    def write_buffer(self, *a, **k):
        pass


class _Usage:
    def __getattr__(self, name):
        return 1


class _Wgpu:
    BufferUsage = _Usage()
    MapMode = _Usage()


class _Device:
    def create_buffer_with_data(self, data=None, usage=None):
        return _Buffer(np.asarray(data).nbytes)


class FakeContext:
    """What compiling needs of a GpuContext, recording each kernel's WGSL by key."""

    def __init__(self, name, software, subgroups, sg_size, shared, max_binding):
        self.name = name
        self.software, self.subgroups, self.subgroup_size = software, subgroups, sg_size
        self.limits = {"max-compute-workgroup-storage-size": shared, "max-storage-buffer-binding-size": max_binding}
        self.max_binding = max_binding
        self.max_buffer = 1 << 34
        self.storage_align, self.uniform_align = 256 if name != "lavapipe" else 32, 256
        self.queue, self.device, self.wgpu = _Queue(), _Device(), _Wgpu()
        self.features = ("subgroup",) if subgroups else ()
        self.timestamps = self.timestamps_in_pass = False
        self.shader_checks = ()
        self.sources: dict = {}

    def pipeline(self, key, source, n_bindings, read_only=()):
        if key not in self.sources:
            self.sources[key] = hashlib.sha256(source().encode()).hexdigest()[:16]
        return ("pipe", key, n_bindings, tuple(read_only)), None

    def buffer(self, size, usage=None, label=""):
        return _Buffer(max(16, -(-int(size) // 16) * 16))


def _backend(ctx, tiled=None):
    from cera_backend_vulkan.backend import VulkanBackend

    b = object.__new__(VulkanBackend)
    b.device_index, b.memory_limit, b.profile = 0, None, False
    b.tiled, b.row_kernel = tiled, None
    b._ctx = ctx
    return b


def _bind(b) -> list:
    if b[0] == "w":
        return ["w", b[1].name, b[1].ggml_type, int(b[2]), int(b[3])]
    return [str(x) for x in b]


def _describe(exe, ctx) -> dict:
    """Everything a compiled executable does, as plain data."""
    ds = []
    for d in exe.dispatches:
        ds.append(
            [
                repr(d.key),
                ctx.sources[d.key],
                [int(p) for p in d.params],
                [_bind(b) for b in d.binds],
                [int(g) for g in d.groups],
                d.label,
                repr(d.pipe),
            ]
        )
    consts = hashlib.sha256()
    for off, arr in _consts(exe):
        consts.update(str(int(off)).encode())
        consts.update(np.ascontiguousarray(arr).tobytes())
    return {
        "dispatches": ds,
        "consts": consts.hexdigest()[:16],
        "arena": int(exe.arena_bytes),
        "io": {k: list(v) for k, v in _io(exe).items()},
        "out": {k: repr(v) for k, v in exe.out_spans.items()},
        "readback": int(exe.readback_bytes),
    }


def _consts(exe):
    mem = getattr(exe, "mem", None)
    return mem.consts if mem is not None else exe._consts


def _io(exe):
    mem = getattr(exe, "mem", None)
    io = mem.io if mem is not None else exe.io
    seq = mem.seq_off if mem is not None else exe.seq_off
    cross = mem.cross_off if mem is not None else exe.cross_off
    return {**io, "_seq": (seq,), **{f"_cross{i}": (v,) for i, v in cross.items()}}


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


@contextlib.contextmanager
def _switches(values: dict):
    old = {k: os.environ.get(k) for k in SWITCH_NAMES}
    for k in SWITCH_NAMES:
        os.environ.pop(k, None)
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _compile(backend, graph, weights, state):
    try:
        return _describe(backend.compile(graph, weights, state), backend.ctx)
    except Exception as e:  # noqa: BLE001 - a refusal is part of the fingerprint
        return {"error": f"{type(e).__name__}: {e}"}


# -- the generators, called directly ---------------------------------------------------------


def generator_sweep() -> dict:
    from cera_backend_vulkan import wgsl

    out = {}

    def put(name, fn, *args, **kw):
        key = f"{name}{args}{sorted(kw.items())}"
        try:
            out[key] = hashlib.sha256(fn(*args, **kw).encode()).hexdigest()[:16]
        except Exception as e:  # noqa: BLE001
            out[key] = f"error {type(e).__name__}: {e}"

    types = [
        "F32",
        "F16",
        "BF16",
        "Q8_0",
        "Q4_0",
        "Q4_1",
        "Q5_0",
        "Q5_1",
        "Q4_K",
        "Q5_K",
        "Q6_K",
        "Q2_K",
        "Q3_K",
        "IQ4_NL",
        "IQ4_XS",
    ]
    types = [t for t in types if t in wgsl.BLOCKS]
    unit = [t for t in types if t in wgsl.UNIT_DECODERS]
    for t in types:
        put("embedding", wgsl.embedding, t)
        put("weight_lib", wgsl.weight_lib, t, "W", 2)
        put("moe_logits", wgsl.moe_logits, t)
        put("moe_down", wgsl.moe_down, t)
        for fn, tm, s, sk in itertools.product((4, 8), (64, 32), (1, 3), (False, True)):
            put("matmul", wgsl.matmul, t, fn, tm, s, sk)
        for glu, sg, R, norm, F, one in itertools.product(
            (None, "swiglu", "geglu"), (False, True), (1, 2, 4, 8), (False, True), (1, 4), (False, True)
        ):
            tt = (t, t) if glu else (t,)
            put("matvec", wgsl.matvec, tt, glu, sg, R, norm, F, one)
        for glu, R, per, norm, span in itertools.product(
            (None, "swiglu"), (1, 2, 8), (4, 16), (False, True), (1, 2, 4)
        ):
            tt = (t, t) if glu else (t,)
            put("matvec_sg", wgsl.matvec_sg, tt, glu, True, R, per, norm, span)
        for R, per, norm, lanes, vec in itertools.product((1, 2, 8), (4, 16), (False, True), (0, 8, 16), (False, True)):
            put("matvec_blk", wgsl.matvec_blk, (t,), None, R, per, norm, lanes, vec=vec)
            put("matvec_blk_glu", wgsl.matvec_blk, (t, t), "swiglu", R, per, norm, lanes, vec=vec)
    for a, b in itertools.product(types, repeat=2):
        put("moe_up", wgsl.moe_up, a, b)
    for tt in [("Q8_0", "Q8_0", "Q8_0"), ("Q4_K", "Q4_K", "Q6_K"), ("F32", "F16"), ("Q4_0", "Q8_0")]:
        for sg, R, norm, F, one in itertools.product((False, True), (1, 2, 8), (False, True), (1, 4), (False, True)):
            put("matvec_segments", wgsl.matvec_segments, tt, sg, R, norm, F, one)
        for R, F, norm, lanes, vec in itertools.product((1, 8), (4, 16), (False, True), (0, 8), (False, True)):
            put("matvec_blk_seg", wgsl.matvec_blk, tt, None, R, F, norm, lanes, True, vec)
    sets = (
        [(t,) for t in unit]
        + [(t, t) for t in unit]
        + [
            ("Q4_K", "Q6_K"),
            ("Q8_0", "Q4_0"),
            ("Q4_K", "Q4_K", "Q6_K"),
            ("Q8_0", "Q8_0", "Q8_0"),
            ("Q5_0", "Q5_1", "Q4_1"),
        ]
    )
    for tt in sets:
        glus = (None,) if len(tt) != 2 else (None, "swiglu", "geglu")
        for glu in glus:
            seg = len(tt) > 1 and glu is None
            if len(tt) == 2 and glu is None:
                seg = True
            for R, (grp, per, F), norm, sk, pre, dot, qk in itertools.product(
                (1, 2, 8),
                (
                    ("sub", 4, 1),
                    ("sub", 8, 2),
                    ("sub", 16, 4),
                    ("wg", 1, 1),
                    ("wg", 2, 2),
                    ("sub16", 16, 2),
                    ("sub8", 32, 4),
                    ("sub4", 32, 1),
                ),
                (False, True),
                (0, 512),
                (False, True),
                ("f32", "i8"),
                (0, 512),
            ):
                if pre and not sk:
                    continue
                put(
                    "matvec_unit",
                    wgsl.matvec_unit,
                    tt,
                    glu,
                    R,
                    per,
                    F,
                    norm,
                    grp,
                    sk,
                    segments=seg,
                    pre_add=pre,
                    dot=dot,
                    quant_k=qk,
                )
    for s in (2, 3, 8):
        put("matmul_splits", wgsl.matmul_splits, s)
    for sg in (False, True):
        put("norm", wgsl.norm, sg)
        put("rope", wgsl.rope, sg)
        for f16 in (False, True):
            put("rope_kv", wgsl.rope_kv, f16, sg)
    for f16 in (False, True):
        put("kv_store", wgsl.kv_store, f16)
    heads = [(64, 64), (128, 128), (256, 256), (80, 80), (96, 64), (64, 96), (512, 512), (40, 40), (8, 8), (112, 112)]
    for kind, (dv, dk) in itertools.product(("f16", "f32", "act", "cross"), heads):
        put("attention", wgsl.attention, kind, dv, dk)
    for (dv, dk), sg, split, rotate in itertools.product(
        [h for h in heads if max(h) <= 256], (False, True), (1, 2, 4, 16), (0, 1, 2)
    ):
        put("attention_lanes", wgsl.attention_lanes, dv, dk, sg, split, rotate)
    for dv, dk in [h for h in heads if max(h) <= 256]:
        put("attention_tiles", wgsl.attention_tiles, dv, dk)
        for split in (2, 4, 16, 64):
            put("attention_combine", wgsl.attention_combine, dv, split)
    for n in (16, 64, 128, 256):
        put("ssm_scan", wgsl.ssm_scan, n)
    for name in (
        "elementwise",
        "softmax",
        "select_top",
        "select_partial",
        "select_combine",
        "gather",
        "seq_mean",
        "embedding_dense",
        "conv_causal",
        "moe_route",
        "im2col",
        "store_cross",
    ):
        put(name, getattr(wgsl, name))
    for t in types:
        with contextlib.suppress(Exception):
            put("upcast", wgsl.upcast, t)
    return out


# -- compiled executables ------------------------------------------------------------------------


def op_case_sweep(adapters, switches) -> dict:
    from cera.formats.gguf import GGUFFile
    from cera.graph.builder import Layout, WeightRef
    from cera.state import StateSpec
    from cera.testing import conformance
    from cera_backend_vulkan.capabilities import OPS, TENSOR_TYPES

    out = {}
    cases = [c for c in conformance.op_cases(TENSOR_TYPES, OPS) if c.kv_type in ("f16", "f32")]
    with tempfile.TemporaryDirectory(prefix="cera-fingerprint-") as tmp:
        for ci, case in enumerate(cases):
            path = Path(tmp) / f"w{ci}.gguf"
            conformance.write_weights(path, case.weights, np.random.default_rng(0))
            with GGUFFile(path) as gguf:
                refs = {n: WeightRef(n, i.type_name, i.shape) for n, i in gguf.tensors.items()}
                for ad in adapters:
                    ctx = FakeContext(*ad)
                    for tiled in (None, True):
                        b = _backend(ctx, tiled)
                        w = {n: b.upload(gguf, n) for n in refs}
                        spec = StateSpec()
                        srefs = [spec.add(d) for d in case.state]
                        n_seq = max(len(p) for p in case.passes)
                        n_batch = max(max(p) for p in case.passes)
                        try:
                            st = b.new_state(spec, case.n_ctx, n_slots=n_seq, kv_type=case.kv_type, n_batch=n_batch)
                        except Exception as e:  # noqa: BLE001
                            out[f"op {case.name} {ad[0]} tiled={tiled} state"] = f"error {type(e).__name__}: {e}"
                            continue
                        for sw in switches:
                            with _switches(sw):
                                for pi, seq_lens in enumerate(case.passes):
                                    graph = conformance._graph(case, Layout(seq_lens), refs, srefs)
                                    key = f"op {case.name} {ad[0]} tiled={tiled} {sorted(sw.items())} pass {pi}"
                                    out[key] = _digest(_compile(b, graph, w, st))
    return out


def _retype(w, t):
    from cera_backend_vulkan.backend import VulkanWeight
    from cera_backend_vulkan.wgsl import BLOCKS

    block, size = BLOCKS[t]
    if len(w.shape) < 2 or w.shape[0] % block:
        return w
    rows = int(np.prod(w.shape[1:]))
    nbytes = w.shape[0] // block * size * rows
    return VulkanWeight(w.name, t, w.shape, w._data, _Buffer(nbytes + 4), nbytes)


def model_sweep(adapters, switches, models) -> dict:
    from cera.engine import read_model
    from cera.formats.gguf import GGUFFile
    from cera.graph.builder import ALL_LOGITS, ARGMAX, Layout
    from cera.plugins.manager import get_manager

    out = {}
    manager = get_manager()
    layouts = [
        Layout((1,)),
        Layout((5,)),
        Layout((1, 1)),
        Layout((3, 2)),
        Layout((12,)),
        Layout((5,), exact_rows=True),
        Layout((3,), prompt_rows=True),
    ]
    for path in models:
        name = Path(path).stem
        with GGUFFile(path) as gguf:
            try:
                _family, model, weights = read_model(gguf, manager)
            except Exception as e:  # noqa: BLE001
                out[f"model {name}"] = f"error {type(e).__name__}: {e}"
                continue
            for ad in adapters:
                ctx = FakeContext(*ad)
                b = _backend(ctx)
                base = {n: b.upload(gguf, n) for n in sorted(weights.used)}
                for retype in ("F32", "Q8_0", "Q4_K"):
                    w = base if retype == "F32" else {n: _retype(v, retype) for n, v in base.items()}
                    try:
                        st = b.new_state(model.state, 40, n_slots=2, kv_type="f16", n_batch=16)
                    except Exception as e:  # noqa: BLE001
                        out[f"model {name} {ad[0]} state"] = f"error {type(e).__name__}: {e}"
                        continue
                    for sw in switches if ad[0] == "gpu32" else [s for s in switches if s in FEW]:
                        with _switches(sw):
                            for li, layout in enumerate(layouts):
                                for outputs in (ARGMAX, ALL_LOGITS) if li in (0, 1) else (ARGMAX,):
                                    key = f"model {name} {ad[0]} {retype} {sorted(sw.items())} {layout} {outputs}"
                                    try:
                                        graph = model.build(layout, outputs, n_ctx=st.n_ctx)
                                    except Exception as e:  # noqa: BLE001
                                        out[key] = f"build error {type(e).__name__}"
                                        continue
                                    out[key] = _digest(_compile(b, graph, w, st))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the hashes to this JSON file")
    ap.add_argument("--check", help="compare with the hashes of this JSON file; exit 1 on a difference")
    ap.add_argument("--quick", action="store_true", help="fewer switches and models (a smoke run)")
    ap.add_argument("--part", choices=("all", "wgsl", "ops", "models"), default="all")
    args = ap.parse_args(argv)
    switches = SWITCHES[:3] if args.quick else SWITCHES
    models = TINY[:3] if args.quick else TINY
    got = {}
    if args.part in ("all", "wgsl"):
        got.update(generator_sweep())
        print(f"generators: {len(got)} sources", file=sys.stderr)
    if args.part in ("all", "ops"):
        n = len(got)
        got.update(op_case_sweep(ADAPTERS, switches))
        print(f"op cases: {len(got) - n} executables", file=sys.stderr)
    if args.part in ("all", "models"):
        n = len(got)
        got.update(model_sweep(ADAPTERS, switches, models))
        print(f"models: {len(got) - n} executables", file=sys.stderr)
    total = _digest(got)
    errors = sum(1 for v in got.values() if "error" in v)
    print(f"{len(got)} entries ({errors} refusals), digest {total}")
    if args.out:
        Path(args.out).write_text(json.dumps(got, sort_keys=True, indent=0))
    if args.check:
        want = json.loads(Path(args.check).read_text())
        partial = args.quick or args.part != "all"
        keys = sorted(set(got) if partial else set(want) | set(got))
        diff = [k for k in keys if want.get(k) != got.get(k)]
        for k in diff[:40]:
            print(f"DIFF {k}: {want.get(k)} -> {got.get(k)}")
        print(f"{len(diff)} of {len(keys)} entries differ")
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
