"""The Vulkan backend's compiler: a graph becomes a fixed list of dispatches.

The core has planned the graph (`cera.graph.planning`): views, steps (products of one input
with their glu or residual epilogue), and an arena layout. Here:

- one device buffer, the *arena*, holds the per-run inputs (token ids, positions, the
  table of sequences: slots, starts, first rows, lengths), every activation at the
  planned offsets, and the constants a kernel reads (norm weights, biases, index tables),
  written once when the graph is compiled;
- every step becomes one dispatch (a few for a weight larger than one binding may be)
  with its parameters in a uniform buffer written once; bind groups are made once per
  state (they name the state's KV buffers);
- `run` writes the inputs with one `write_buffer`, records every dispatch into ONE compute
  pass, copies the declared outputs into a read-back buffer in the same command buffer,
  submits once and maps that buffer: a greedy decode step reads back one int32 per
  sequence.

Products: a few rows go through `wgsl.matvec` (one workgroup per output feature, each row
summed as a one-row product sums it, so a decode batch and ``exact_rows`` passes give
each row's one-token result bit for bit); many rows through the tiled `wgsl.matmul`.
"""

from __future__ import annotations

import math
import os
import threading
import time
import weakref

import numpy as np

from cera.backend import Executable, StepInputs
from cera.errors import ContextFull, SessionError, ShapeError, UnsupportedOperation
from cera.graph.builder import Graph, Tensor, WeightRef
from cera.graph.ops import OPS
from cera.graph.planning import Step, arena_layout, placements, plan_steps

from . import record, wgsl

EW = {"unary": 0, "glu": 1, "add": 2, "mul": 3, "scale": 4, "softcap": 5, "copy": 6}
MAX_GRID = 65535
# the tiled (prefill) kernels, by name (CERA_VULKAN_MATMUL): (rows x features a thread,
# rows a tile, depth split, skew) of wgsl.matmul; "auto-m32" takes 32-row tiles where
# 64-row ones would make fewer than MATMUL_SMALL_GRID workgroups (Qwen2.5 1.5B's
# 1536-feature products over 512 rows: 192 workgroups for the H200's 132
# multiprocessors), else 4x4
MATMUL_KERNELS = {
    "4x4": (4, 64, False, False),
    "4x8": (8, 64, False, False),
    "4x4-m32": (4, 32, False, False),
    "auto-m32": None,
    "4x4-split": (4, 64, True, False),
    "4x4-skew": (4, 64, False, True),
    "4x4-skew-split": (4, 64, True, True),
}
MATMUL_SMALL_GRID = 256
# split: the depth is cut (wgsl.matmul's splits, then wgsl.matmul_splits) where the grid
# has fewer than MATMUL_SPLIT_GRID workgroups (about 8 for each of the H200's 132
# multiprocessors), into as many spans as bring it there, at most MATMUL_SPLITS, each of
# MATMUL_SPLIT_STEPS steps of 32 columns or more. In the H200's sweep of the products
# shape by shape (tenth session, call 1, vulkan_matmul_sweep.py; the variants of a shape
# took turns, its absolute figures ran low: benchmarks/README.md), the products of 18-28
# steps in all, split in 2-3 spans of 8 or more (SmolLM2's and Gemma 3's q and gate/up,
# Qwen2.5 0.5B's q), were 10-30% slower than whole, and those of 48 steps or more (every
# down product, Qwen2.5 1.5B's q and o) 10-30% faster: hence spans of 16 steps or more. Over whole
# prompts (call 3) 4x4-skew-split against 4x4-skew was +4% to +16% on Qwen2.5 0.5B, -4% to
# 0% on Qwen2.5 1.5B, -8% to -13% on Gemma 3, -3% to +3% on SmolLM2: not the default.
# skew: the weights' shared tile skewed against bank conflicts (the same bits). Call 3,
# pp512, 4x4 -> 4x4-skew, two rounds: Qwen2.5 1.5B +8% and +15%, Gemma 3 +10% and +48%,
# SmolLM2 +6% and +6%, Qwen2.5 0.5B -4% and +11%: the default.
MATMUL_SPLIT_GRID = 1024
MATMUL_SPLITS = 8
MATMUL_SPLIT_STEPS = 16
# on the H200 4x4 took Qwen2.5 1.5B's and 0.5B's pp512 in 0.88 and 0.78 of 4x8's time,
# and auto-m32 / 4x4-m32 in 1.01 / 1.10 (before the kernel's loops were written out)
MATMUL_DEFAULT = "4x4-skew"
# the few-row (decode) kernels, by name (VulkanBackend.row_kernel, CERA_VULKAN_ROW_KERNEL):
# "workgroup*": wgsl.matvec, a workgroup of 128 threads per 4 features ("-1pass": one
# shared-memory pass for all its sums); "subgroup*": wgsl.matvec_sg, a subgroup per
# feature and no barrier, each lane taking 1, 2 or 4 consecutive groups of 8 columns a
# step (the value: that span; 0 for the workgroup ones)
# "subgroup-blk": wgsl.matvec_blk, a subgroup per feature, each lane decoding 32 columns
# at once with whole-word loads (K a multiple of 32; else "subgroup");
ROW_KERNELS = {
    "unit-auto": 1,
    "unit-auto-gx": 1,
    "unit-auto-sx": 1,
    "unit-auto-c32": 1,
    "unit-auto-c16": 1,
    "unit-auto-c8": 1,
    "unit-auto-c4": 1,
    "unit-auto-cfit": 1,
    "unit": 1,
    "unit-f1": 1,
    "unit-f4": 1,
    "unit-wg1": 1,
    "unit-wg2": 1,
    "unit-wg4": 1,
    "workgroup": 0,
    "workgroup-1pass": 0,
    "subgroup": 1,
    "subgroup-x2": 2,
    "subgroup-x4": 4,
    "subgroup-blk": 8,
    "subgroup-blk16": 8,
    "subgroup-blk8": 8,
    "subgroup-blk-v4": 8,
    "subgroup-blk16-v4": 8,
}
# "unit*": wgsl.matvec_unit, 32 weights a lane a step with x in 16-byte loads (with
# subgroups, for single products, gate/up and Q/K/V in one dispatch; else
# "workgroup-1pass"): "unit", "unit-f1", "unit-f4" a subgroup for 2 (1, 4) features;
# "unit-wg1/2/4" the whole workgroup for 1 (2, 4) features; "unit-auto" by the product's
# shape (unit_plan; "-gx": x never through shared memory, "-sx": always)
UNIT_FEATS = {"unit": 2, "unit-f1": 1, "unit-f4": 4, "unit-wg1": 1, "unit-wg2": 2, "unit-wg4": 4}
# "unit-auto-c<C>": "unit-auto" with groups of C lanes of a subgroup wherever it gives a
# subgroup's features ("sub<C>", wgsl.matvec_unit; "-c32": a whole subgroup, the plans
# before groups of fewer lanes); "unit-auto-cfit": the most lanes a group whose steps
# the row's units fill to UNIT_FIT or more (unit_cluster). "unit-auto" itself takes
# groups of fewer lanes for the wide products only (UNIT_WIDE_LANES)
UNIT_CLUSTERS = {"unit-auto-c32": 32, "unit-auto-c16": 16, "unit-auto-c8": 8, "unit-auto-c4": 4, "unit-auto-cfit": 0}
UNIT_FIT = 0.8
# the variants that plan per shape (unit_plan's "unit-auto" rules), and those of them
# that may pass x through shared memory
UNIT_AUTO = ("unit-auto", "unit-auto-gx", "unit-auto-sx", *UNIT_CLUSTERS)
UNIT_AUTO_SHARED_X = ("unit-auto", "unit-auto-sx", *UNIT_CLUSTERS)
# the wide products' (32768 weight rows or more: the outputs) groups: unit_cluster from
# 16 lanes. On the H200 (eighth session's sweep, alternated) the outputs took 129.9 us
# not 175.3 (Qwen2.5 1.5B, Q6_K, 48 units: 16 lanes), 21.6 not 31.0 (SmolLM2, Q8_0, 18
# units: 4), 135.7 not 145.0 (Gemma 3, Q8_0, 20 units: 8), 103.1 not 109.2 (Qwen2.5 0.5B,
# Q8_0, 28 units: 16); the narrower products were as fast or faster with whole subgroups
# (Qwen2.5 1.5B's q/o 7.4 us against 8.9 with 16 lanes), and so were whole tokens
UNIT_WIDE_LANES = 16


def unit_cluster(units: int, subgroup_size: int) -> int:
    """The most lanes a group (a power of two, at most the subgroup size) whose steps a
    row of ``units`` units fills to UNIT_FIT or more: 48 units take 16 lanes (three full
    steps, where 32 lanes idle half of theirs in the second), 28 take 32 (0.875)."""
    c = subgroup_size
    while c > 2 and units / (c * -(-units // c)) < UNIT_FIT:
        c //= 2
    return c


def unit_plan(variant: str, K: int, N: int, types: tuple[str, ...], subgroup_size: int, rows: int = 1,
              shared_bytes: int = 0, segments: bool = False) -> tuple[str, int, int, int] | None:  # fmt: skip
    """(group, features a group, features a workgroup, shared_k) of wgsl.matvec_unit for
    a product of ``rows`` rows of K values with weights of these types and N features
    under a "unit*" row kernel; None for other kernels. "unit-auto" takes the types with
    a unit decoder of their own (wgsl.UNIT_DECODERS: the K-quants and the 32-element
    block types; the others run faster through workgroup-1pass), gives long rows
    (128 units or more) a workgroup per feature group, so that each lane has few units,
    and the others a subgroup, with more features a group as the product widens (enough
    lanes in flight, x read fewer times); shared_k = K where rows x K values fit in
    ``shared_bytes`` ("unit-auto-gx": never): x may go through shared memory, which
    "unit-auto" takes only where the kernel computes x itself (a sandwich norm's add,
    wgsl.matvec_unit's ``pre_add``) and "unit-auto-sx" always (on the H200 the groups
    reading x themselves made SmolLM2's and Qwen2.5 1.5B's tokens 3-5% faster, Qwen2.5
    0.5B's the same: unit_shared_k). The widest products (the outputs) give a subgroup's
    features to groups of fewer lanes ("sub<C>", UNIT_WIDE_LANES), and "unit-auto-c*"
    (UNIT_CLUSTERS) every subgroup-wide product. ``segments``:
    the types are several products' (Q, K, V), N their features in all, one weight a
    feature."""
    n_w = 1 if segments else len(types)
    if variant in UNIT_AUTO:
        if not all(t in wgsl.UNIT_DECODERS for t in types):
            return None
        if K // 32 >= 128:
            group, F = "wg", 2 if N >= 1024 else 1
        else:
            width = N * n_w
            group, F = "sub", 4 if width >= 32768 else 2 if width >= 8192 else 1
            if variant in UNIT_CLUSTERS:
                c = UNIT_CLUSTERS[variant] or unit_cluster(K // 32, subgroup_size)
            else:
                c = unit_cluster(K // 32, min(UNIT_WIDE_LANES, subgroup_size)) if F == 4 else subgroup_size
            c = min(c, subgroup_size)
            group = f"sub{c}" if c < subgroup_size else "sub"
    elif variant in UNIT_FEATS:
        group, F = ("wg" if "-wg" in variant else "sub"), UNIT_FEATS[variant]
    else:
        return None
    lanes = wgsl.group_lanes(group) or subgroup_size
    per = F if group == "wg" else F * max(1, wgsl.MV_WG // lanes)
    x_bytes = rows * K * 4
    # the workgroup's sums (group "wg": 32 floats a sum, a fused norm's included) share
    # the adapter's workgroup memory with x
    sums_bytes = (n_w * rows * F + rows) * 32 * 4 if group == "wg" else 0
    fits = x_bytes <= SHARED_X_BYTES and x_bytes + sums_bytes <= shared_bytes
    shared_k = K if variant in UNIT_AUTO_SHARED_X and fits else 0
    return group, F, per, shared_k


def unit_shared_k(variant: str, shared_k: int, pre_add: bool = False, quant_k: int = 0) -> int:
    """The unit kernel's shared_k under row kernel ``variant`` for a plan that allows
    ``shared_k``: x through shared memory where the kernel computes it (``pre_add``) or
    under "unit-auto-sx" (not where the workgroup quantizes x, ``quant_k``: that reads
    x once a workgroup itself); else 0, each group reading x from memory itself."""
    return shared_k if pre_add or (variant == "unit-auto-sx" and not quant_k) else 0


# the cached attention's kernels (CERA_VULKAN_ATTENTION): "lanes" (wgsl.attention_lanes,
# f16 caches with heads of at most 256 values; the others take "chunked"), its cells split
# over ATT_SPLIT workgroups a (row, head) where the cache holds ATT_SPLIT_MIN_CAP cells or
# more on a GPU (flash-decoding: a decode step otherwise walks a long context's chunks in
# as many workgroups as it has heads); "lanes-whole" never split, "lanes-split" always
# (where the rows allow: VulkanExecutable._attention_split); "chunked" (wgsl.attention).
# A prompt pass's rows (those the tiled products take) go through wgsl.attention_tiles
# under "lanes" on a GPU; "tiles" takes it for every pass but the row-exact ones (the
# tests run it so on lavapipe, where "lanes" never picks it)
ATTENTION_KERNELS = ("lanes", "lanes-whole", "lanes-split", "tiles", "chunked")
ATT_SPLIT = 16
ATT_SPLIT_MIN_CAP = 1024


# the unit kernel's products (wgsl.matvec_unit's ``dot``): "f32", x as the pass holds it;
# "i8", x quantized to 8 bits a unit by each lane and multiplied with dot4I8Packed (other
# values than f32's, within the suite's tolerance, as llama.cpp's integer products round
# x too); "i8-shared" (the default), the same values, x quantized once a workgroup into
# shared memory where the workgroup has several groups and every weight type an integer
# decoder (unit_products), else as "i8". On the H200 (eleventh session, alternated, ms a
# decoded token) "i8" took Qwen2.5 1.5B from 2.50-2.63 to 2.07-2.18, SmolLM2 from
# 1.43-1.45 to 1.32-1.37, Qwen2.5 0.5B from 1.60 to 1.50, Gemma 3 from 1.37 to 1.38-1.45;
# "i8-shared" then Qwen2.5 1.5B 2.14-2.24 -> 2.05-2.08, Gemma 3 1.36-1.42 -> 1.26-1.30,
# SmolLM2 1.37-1.39 -> 1.27-1.31, Qwen2.5 0.5B 1.35 -> 1.34-1.36
UNIT_DOTS = ("f32", "i8", "i8-shared")


def unit_dot() -> str:
    """The unit kernel's products (UNIT_DOTS): ``CERA_VULKAN_UNIT_DOT``, else "i8-shared"."""
    name = os.environ.get("CERA_VULKAN_UNIT_DOT", "").strip() or "i8-shared"
    if name not in UNIT_DOTS:
        raise UnsupportedOperation(
            f"backend 'vulkan': CERA_VULKAN_UNIT_DOT={name!r} is not one of {', '.join(UNIT_DOTS)}"
        )
    return name


def unit_products(group: str, types: tuple[str, ...], K: int, shared_bytes: int,
                  segments: bool = False) -> tuple[str, int]:  # fmt: skip
    """wgsl.matvec_unit's (``dot``, ``quant_k``) under unit_dot's choice: "f32" or "i8",
    and K where "i8-shared" quantizes x once a workgroup, else 0. Once a workgroup only
    where the workgroup holds several groups (not ``group`` "wg": a workgroup of one group
    quantizes each unit once either way, and on the H200 the barrier and shared reads made
    Qwen2.5 1.5B's Q4_K downs take 316 us a token, against 243 with each lane quantizing
    and 261 in f32), every type has an integer decoder, and MV_ROWS rows of x's 8-bit
    units and their steps fit ``shared_bytes`` with a workgroup sum's slots. The choice
    does not depend on the rows of the pass: the two forms sum a fused norm's squares in
    different orders, and a batch row must be its one-row product bit for bit."""
    dot = unit_dot()
    if dot == "f32":
        return dot, 0
    if dot != "i8-shared" or group == "wg" or not wgsl.int_unit_types(types, segments):
        return "i8", 0
    return "i8", K if quant_bytes(wgsl.MV_ROWS, K) <= shared_bytes else 0


def quant_bytes(rows: int, K: int, shared_k: int = 0) -> int:
    """The workgroup memory of wgsl.matvec_unit's ``quant_k``: ``rows`` rows of K 8-bit
    values and their steps, a workgroup sum's slots, and a float x of ``shared_k``."""
    return rows * K + rows * K // 8 + 4 * wgsl.MV_WG + rows * shared_k * 4


def att_split() -> int:
    """ATT_SPLIT, or ``CERA_VULKAN_ATT_SPLIT`` (2-64: a diagnostic, for timing others)."""
    raw = os.environ.get("CERA_VULKAN_ATT_SPLIT", "").strip()
    if not raw:
        return ATT_SPLIT
    if not raw.isdigit() or not 2 <= int(raw) <= 64:
        raise UnsupportedOperation(
            f"backend 'vulkan': CERA_VULKAN_ATT_SPLIT={raw!r} is not a whole number from 2 to 64"
        )
    return int(raw)


# the most workgroups of a product that computes a sandwich norm's add itself (each
# workgroup does: see VulkanExecutable._products)
PRE_ADD_MAX_GROUPS = 4096

# the most bytes of x that unit-auto copies to a workgroup's shared memory (more would
# leave room for fewer workgroups on a multiprocessor)
SHARED_X_BYTES = 16384

# "subgroup-blk<L>": L lanes a feature (at most the subgroup's), 128 / L features a
# workgroup; "-v4": Q4_K weights read with 16-byte loads through a second, vec4 binding
BLK_LANES = {"subgroup-blk": 0, "subgroup-blk16": 16, "subgroup-blk8": 8, "subgroup-blk-v4": 0, "subgroup-blk16-v4": 16}


def grid(n: int) -> tuple[int, int]:
    """Workgroups for n linear items on a 2-D grid (kernels use wgsl.GRID's wg_linear)."""
    n = max(1, int(n))
    if n <= MAX_GRID:
        return n, 1
    x = MAX_GRID
    return x, -(-n // x)


def f32_bits(x: float) -> int:
    return int(np.array([x], np.float32).view(np.uint32)[0])


def state_geometry(state) -> tuple:
    if state is None:
        return ()
    caps = tuple((i, a.shape[2]) for i, a in sorted(state.k.items()))
    return (state.n_ctx, state.n_slots, state.kv_type, caps)


class Dispatch:
    """One kernel launch: pipeline, parameters, bindings after the arena (("w", weight,
    byte offset, size) or ("k"/"v", decl index) or ("pos",) or ("conv"/"ssm", decl index)
    or ("xk"/"xv", decl index): a cross-attention memory's keys or values), workgroups,
    and a label for the profile."""

    __slots__ = ("key", "pipe", "layout", "params", "binds", "groups", "label")

    def __init__(self, key, pipe, layout, params, binds, groups, label):
        self.key, self.pipe, self.layout = key, pipe, layout
        self.params, self.binds, self.groups, self.label = params, binds, groups, label


class VulkanExecutable(Executable):
    def __init__(self, backend, graph: Graph, weights: dict, state):
        self.backend = backend
        self.ctx = ctx = backend.ctx
        self.graph = graph
        self.weights = weights
        self.geometry = state_geometry(state)
        self.kv_type = getattr(state, "kv_type", "f16")
        self.template = state
        self.row_mode = graph.layout.row_mode
        self._lock = threading.Lock()
        self.place = placements(graph)
        steps = plan_steps(graph, fuse=True)
        self.consumers: dict[int, int] = {}
        for node in graph.nodes:
            for t in node.tensors:
                self.consumers[t.id] = self.consumers.get(t.id, 0) + 1
        for t in graph.outputs.values():
            self.consumers[t.id] = self.consumers.get(t.id, 0) + 1
        # rms_norms that move into the next step's products kernel: that kernel reads the
        # norm's input, so for the memory plan the two steps are one (the input must not
        # share memory with the products' outputs)
        self._fused_norm: dict[int, object] = {}  # products step index -> the rms_norm node it absorbs
        # and rope nodes that share the previous rope's dispatch (queries and keys)
        self._rope_pair: set[int] = set()
        # rms_norms whose output only an add reads: (norm node id) -> (add node, its other operand)
        self._norm_add: dict[int, tuple] = {}
        # products steps whose x a sandwich norm's add makes (see _sandwich_add): (products
        # step index) -> (that norm, the add, the add's other operand)
        self._pre_add: dict[int, tuple] = {}
        # a layer's per-head query and key norms, their rotations and the query's scale
        # (qwen3, gemma3): one rope dispatch (wgsl ROPE_BODY's norm and scale);
        # (rope node id) -> its rms_norm node, (first rope's id) -> the scale node
        self._rope_norm: dict[int, object] = {}
        self._rope_scale: dict[int, object] = {}
        # attention nodes that do their rope pair's work themselves (wgsl.attention_lanes'
        # rotating form): _rotating_attention
        self._rotating: set[int] = set()
        planned: list[Step] = []
        skip_until = 0
        for i, step in enumerate(steps):
            if i < skip_until:
                continue
            qk = self._qk_norm_rope(steps, i)
            if qk:
                planned.append(Step(tuple(n for st in steps[i : i + qk] for n in st.nodes)))
                skip_until = i + qk
                continue
            if i > 0 and self._can_fuse_norm(steps[i - 1], step):
                self._fused_norm[i] = steps[i - 1].nodes[0]
                pre = self._sandwich_add(planned, steps[i - 1])
                if pre is not None:
                    # the norm and add before join too: one step for the memory plan
                    self._pre_add[i] = pre
                    planned[-2] = Step(planned[-2].nodes + steps[i - 1].nodes + step.nodes, step.glu, step.residual)
                    planned.pop()
                    continue
                planned[-1] = Step(steps[i - 1].nodes + step.nodes, step.glu, step.residual)
                continue
            add = self._norm_then_add(steps[i - 1], step) if i > 0 else None
            if add is not None:
                # the add joins the norm's dispatch (wgsl.norm's residual): one step for
                # the memory plan, so the sum never lands on rows the norm still reads
                self._norm_add[id(steps[i - 1].nodes[0])] = add
                planned[-1] = Step(planned[-1].nodes + step.nodes)
                continue
            if i > 0 and id(steps[i - 1].nodes[0]) not in self._rope_pair and self._rope_pairs(steps[i - 1], step):
                self._rope_pair.add(id(step.nodes[0]))
                planned[-1] = Step(planned[-1].nodes + step.nodes)
                continue
            if planned and self._rotating_attention(planned[-1], step):
                # the attention reads the rotations' inputs: one step for the memory plan,
                # so its output never lands on them
                self._rotating.add(id(step.nodes[0]))
                planned[-1] = Step(planned[-1].nodes + step.nodes)
                continue
            planned.append(step)
        self.offsets, act_bytes = arena_layout(graph, planned, self.place)

        # the io region: inputs, then the sequence table
        layout = graph.layout
        self.n_seq = layout.n_seq
        self.io: dict[str, tuple[int, int]] = {}  # input name -> (element offset, count)
        at = 0
        for name, t in graph.inputs.items():
            self.io[name] = (at, t.size)
            at += -(-max(1, t.size) // 16) * 16
        self.seq_off = at
        at += -(-4 * self.n_seq // 16) * 16
        # per cross-attention memory the graph reads: the rows each slot holds, as they
        # will be after this pass's stores (the host keeps the record, HostState.cross_len,
        # and writes it here every run: the kernels read lengths, not positions)
        self.cross_off: dict[int, int] = {}
        n_slots = state.n_slots if state is not None else 1
        for node in graph.nodes:
            if node.op == "cross_attention" and node.args[1].index not in self.cross_off:
                self.cross_off[node.args[1].index] = at
                at += -(-n_slots // 16) * 16
        self.cross_stores: list[int] = []  # memories store_cross writes (decl indices)
        self.cross_reads: list[tuple[int, bool]] = []  # memories cross_attention reads, shared or not
        self.io_words = at
        self.act_base = at
        self.const_base = at + act_bytes // 4
        self._consts: list[np.ndarray] = []
        self._const_at = self.const_base
        self._split_at, self._split_words = 0, 0
        self._const_cache: dict = {}
        self.dispatches: list[Dispatch] = []
        self._wrote_pos = False
        # kv_store folded into the keys' rope dispatch (CERA_VULKAN_FOLD_KV=0: apart)
        self.fold_kv = os.environ.get("CERA_VULKAN_FOLD_KV", "1") != "0"

        absorbed = (
            {id(n) for n in self._fused_norm.values()}
            | {id(a) for a, _ in self._norm_add.values()}
            | {id(n) for n in self._rope_norm.values()}
            | {id(n) for n in self._rope_scale.values()}
            | {id(p[0]) for p in self._pre_add.values()}
        )
        for i, step in enumerate(steps):
            if id(step.nodes[0]) in absorbed:
                continue
            self._norm_now = self._fused_norm.get(i)
            self._pre_now = self._pre_add.get(i)
            self._pre_params = None  # set by _products where the sandwich add runs in its kernels
            self._lower(step)

        size_words = self._const_at
        self.arena_bytes = max(256, size_words * 4)
        if self.arena_bytes > ctx.max_binding:
            raise UnsupportedOperation(
                f"backend 'vulkan': this pass needs a {self.arena_bytes >> 20} MiB working buffer, more than the "
                f"adapter's largest binding ({ctx.max_binding >> 20} MiB); evaluate fewer tokens per pass (n_batch)"
            )
        self.arena = ctx.buffer(self.arena_bytes, label="arena")
        wgpu = ctx.wgpu
        # constants, once
        for off, arr in self._consts:
            ctx.queue.write_buffer(self.arena, off * 4, arr)
        # parameters, once
        stride = ctx.uniform_align
        params = np.zeros((max(1, len(self.dispatches)), stride // 4), np.uint32)
        for i, d in enumerate(self.dispatches):
            params[i, : len(d.params)] = np.asarray(d.params, np.int64).astype(np.uint32)
        self.params = ctx.device.create_buffer_with_data(data=params, usage=wgpu.BufferUsage.UNIFORM)
        self._stride = stride
        # outputs: copied into one read-back buffer
        self.out_spans = {}
        rb = 0
        for name, t in graph.outputs.items():
            first, count, shape, strides = self._span(t)
            self.out_spans[name] = (first, count, rb, shape, strides, np.int32 if t.dtype == "i32" else np.float32)
            rb += -(-count * 4 // 8) * 8
        self.readback_bytes = max(16, rb)
        self.readback = ctx.buffer(
            self.readback_bytes, wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST, "outputs"
        )
        self._static_bgs = None
        self._vocab: int | None = None  # rows of the token embedding table (_check)
        self.record_mode = record.default_mode()  # how run records the pass (record.py)
        self._state_bgs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.last_profile: list[tuple[str, float]] = []
        self.timing = (0.0, 0.0)
        self._ready = None  # (plan, command buffer): the next run's commands, recorded ahead

    # -- memory ----------------------------------------------------------------------------------

    def off(self, t: Tensor) -> int:
        """Element offset of tensor t in the arena."""
        p = self.place[t.id]
        for name, it in self.graph.inputs.items():
            if it.id == p.root:
                return self.io[name][0] + p.offset // 4
        return self.act_base + (self.offsets[p.root] + p.offset) // 4

    def stride(self, t: Tensor) -> int:
        return self.place[t.id].row_stride

    def contiguous(self, t: Tensor) -> bool:
        return len(t.shape) < 2 or t.shape[-1] == self.stride(t) or math.prod(t.shape[:-1]) == 1

    def _span(self, t: Tensor):
        shape = t.shape or (1,)
        last = shape[-1]
        rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
        s = self.stride(t) if len(shape) > 1 else last
        count = (rows - 1) * s + last if rows else 0
        return self.off(t), max(1, count), shape, (s, last)

    def const(self, values, dtype=np.float32, key=None) -> int:
        """Element offset of constant values placed after the activations."""
        if key is not None and key in self._const_cache:
            return self._const_cache[key]
        arr = np.ascontiguousarray(np.asarray(values, dtype).reshape(-1))
        if arr.dtype.itemsize != 4:
            raise ShapeError("arena constants are 32-bit values")
        at = self._const_at
        self._consts.append((at, arr))
        self._const_at += -(-max(1, arr.size) // 16) * 16
        if key is not None:
            self._const_cache[key] = at
        return at

    def operand(self, a) -> int:
        """Element offset of an operand: a tensor's, or a weight's values as a constant."""
        if isinstance(a, WeightRef):
            return self.const(self.weights[a.name].dense(), key=("w", a.name))
        return self.off(a)

    # -- dispatches ------------------------------------------------------------------------------

    def _emit(self, key, source, params, groups, binds=(), read_only=(), label="?") -> None:
        n_bindings = 2 + len(binds)
        pipe, layout = self.ctx.pipeline(key, source, n_bindings, read_only)
        if len(params) > 64:
            raise ShapeError("too many kernel parameters")
        gx, gy = groups if isinstance(groups, tuple) else grid(groups)
        self.dispatches.append(Dispatch(key, pipe, layout, list(params), list(binds), (gx, gy), label))

    def _weight_chunks(self, w, n_rows: int, row_bytes: int | None = None):
        """Row ranges of a weight (rows of ``row_bytes``, by default the file's rows),
        each bindable at once: [(first row, rows, byte offset, byte size)]."""
        row_bytes = row_bytes or w.row_bytes
        limit = self.ctx.max_binding
        total = row_bytes * n_rows
        buf_size = w.buffer.size
        if total + 4 <= limit:
            return [(0, n_rows, 0, buf_size)]
        align = self.ctx.storage_align
        step = align // math.gcd(row_bytes, align)
        per = (limit - 8) // row_bytes // step * step
        if per < 1:
            raise UnsupportedOperation(f"backend 'vulkan': a row of weight {w.name!r} exceeds one binding")
        out = []
        for r0 in range(0, n_rows, per):
            n = min(per, n_rows - r0)
            start = r0 * row_bytes
            size = min(buf_size - start, -(-(n * row_bytes + 4) // 4) * 4)
            out.append((r0, n, start, size))
        return out

    # -- lowering ----------------------------------------------------------------------------------

    def _lower(self, step: Step) -> None:
        node = step.nodes[0]
        op = node.op
        if step.is_products:
            self._products(step)
            return
        lower = getattr(self, f"_op_{op}", None)
        if lower is None:
            raise UnsupportedOperation(f"backend 'vulkan' has no kernel for op {op!r}")
        lower(node)

    def _need_contiguous(self, node, *tensors):
        for t in tensors:
            if t is not None and isinstance(t, Tensor) and not self.contiguous(t):
                raise ShapeError(f"backend 'vulkan': {node.op} got a row-strided view {t!r}")

    def _op_embedding(self, node) -> None:
        table, ids = node.args
        w = self.weights[table.name]
        K, n_rows = w.shape[0], w.shape[1]
        if K % 8:
            self._embedding_dense(node, w)
            return
        n = ids.size
        for r0, rows, boff, bsize in self._weight_chunks(w, n_rows):
            self._emit(("embedding", w.ggml_type), lambda t=w.ggml_type: wgsl.embedding(t),
                       [self.off(ids), n, K, self.off(node.out), w.row_bytes, r0, rows], n,
                       binds=[("w", w, boff, bsize)], read_only=(2,), label=f"embedding {w.ggml_type}")  # fmt: skip

    def _tiled(self, M: int, K: int) -> bool:
        # A software adapter (lavapipe) runs a workgroup barrier as a switch between
        # fibres: the barrier-free matvec, 8 rows per pass over the weights, is faster
        # there, and computes every row as a one-row product (so any row mode holds).
        if K % wgsl.TK:
            return False
        force = self.backend.tiled
        if force is not None:
            return force and self.row_mode != 1
        if self.ctx.software:
            return False
        if self.row_mode == 1:
            return False
        if self.row_mode == 2:
            return True
        return M > wgsl.MV_ROWS

    def _rope_pairs(self, step: Step, nxt: Step) -> bool:
        """Two rotations in a row at the same positions with the same spec and head size
        (a layer's queries and keys): one dispatch."""
        a, b = step.nodes[0], nxt.nodes[0]
        if len(step.nodes) != 1 or len(nxt.nodes) != 1 or a.op != "rope" or b.op != "rope":
            return False
        if step.glu or step.residual or a.args[1] is not b.args[1] or a.attrs["spec"] != b.attrs["spec"]:
            return False
        return (
            a.args[0].shape[2] == b.args[0].shape[2]
            and b.args[0] is not a.out
            and self.contiguous(a.args[0])
            and self.contiguous(b.args[0])
        )

    def _rotating_attention(self, rotations: Step, step: Step) -> bool:
        """Whether step, an attention over the f16 cache, takes the rope pair just before
        it (rotations: the planned step of the pair, with its norms and scale) into its own
        kernel (wgsl.attention_lanes' rotating form, a dispatch a layer fewer): in a pass of
        one row per sequence (a decode step), where nothing else reads the rotated queries
        and keys and the kernel is attention_lanes (``CERA_VULKAN_ROPE_ATTENTION=0``: never,
        for comparison)."""
        if os.environ.get("CERA_VULKAN_ROPE_ATTENTION", "1") == "0":
            return False
        if len(step.nodes) != 1 or step.nodes[0].op != "attention" or step.glu or step.residual:
            return False
        if any(n != 1 for n in self.graph.layout.seq_lens) or self._attention_kernel in ("tiles", "chunked"):
            return False
        ropes = [n for n in rotations.nodes if n.op == "rope"]
        if len(ropes) != 2 or id(ropes[1]) not in self._rope_pair:
            return False
        node = step.nodes[0]
        q, k, v = node.args[:3]
        scale = self._rope_scale.get(id(ropes[0]))
        q_rot = scale.out if scale is not None else ropes[0].out
        return (
            q is q_rot
            and k is ropes[1].out
            and self.consumers.get(q.id, 0) == 1
            and self.consumers.get(k.id, 0) == 1
            and self._lanes_fit(q.shape[2], v.shape[2])
            and self.contiguous(v)
        )

    def _qk_norm_rope(self, steps: list[Step], i: int) -> int:
        """How many steps from i form [rms_norm(q), rms_norm(k)] + [rope(q), rope(k)] +
        [scale(q)], the norms (each over a head, read only by its rope) or the scale (read
        only the query's rotation) or both there (0: not so); records them for _op_rope,
        which runs them all as one dispatch."""

        def single(k):
            return k < len(steps) and len(steps[k].nodes) == 1 and not steps[k].glu and not steps[k].residual

        if not (single(i) and single(i + 1)):
            return 0
        first = steps[i].nodes[0]
        j = i + 2 if first.op == "rms_norm" else i  # the rotations' first step
        if not (single(j) and single(j + 1) and self._rope_pairs(steps[j], steps[j + 1])):
            return 0
        ra, rb = steps[j].nodes[0], steps[j + 1].nodes[0]
        norms = ()
        if j == i + 2:
            norms = (first, steps[i + 1].nodes[0])
            for norm, rope in zip(norms, (ra, rb), strict=True):
                x, w = norm.args[0], norm.args[1]
                if norm.op != "rms_norm" or rope.args[0] is not norm.out or self.consumers.get(norm.out.id, 0) != 1:
                    return 0
                if isinstance(w, Tensor) or x.shape != norm.out.shape or not self.contiguous(x):
                    return 0
        sc = steps[j + 2].nodes[0] if single(j + 2) else None
        if not (sc is not None and sc.op == "scale" and sc.args[0] is ra.out
                and self.consumers.get(ra.out.id, 0) == 1 and self.contiguous(sc.out)):  # fmt: skip
            sc = None
        if not norms and sc is None:
            return 0
        for rope, norm in zip((ra, rb), norms, strict=False):
            self._rope_norm[id(rope)] = norm
        if sc is not None:
            self._rope_scale[id(ra)] = sc
        self._rope_pair.add(id(rb))
        return j + 2 + (sc is not None) - i

    def _norm_then_add(self, step: Step, nxt: Step):
        """(the add, its other operand) when step is an rms_norm whose output only nxt, an
        add of a contiguous tensor of the same shape, reads (a sandwich norm's residual:
        gemma 2/3, olmo2); else None."""
        node = step.nodes[0]
        if node.op != "rms_norm" or len(step.nodes) != 1 or len(nxt.nodes) != 1 or nxt.is_products:
            return None
        add = nxt.nodes[0]
        if add.op != "add" or self.consumers.get(node.out.id, 0) != 1:
            return None
        a, b = add.args
        other = b if a is node.out else a if b is node.out else None
        if other is None or not isinstance(other, Tensor) or other.shape != node.out.shape:
            return None
        if not (self.contiguous(other) and self.contiguous(node.args[0]) and self.contiguous(add.out)):
            return None
        return add, other

    def _sandwich_add(self, planned: list, norm_step: Step) -> tuple | None:
        """(norm, add, the add's other operand) where the rms_norm of ``norm_step`` (fused
        into the products after it) reads the sum that the step before it makes, a norm
        and its residual add in one dispatch (`_norm_then_add`: Gemma 2/3's norms after
        attention and the FFN). The unit kernel can compute that sum itself
        (wgsl.matvec_unit's ``pre_add``): one dispatch less. Decode-sized passes whose rows
        fit its shared memory; CERA_VULKAN_FUSE_SANDWICH=0 (a diagnostic) turns it off."""
        if os.environ.get("CERA_VULKAN_FUSE_SANDWICH", "1") == "0" or len(planned) < 2:
            return None
        if len(planned[-2].nodes) != 2 or len(planned[-1].nodes) != 1:
            return None
        norm, add = planned[-2].nodes
        if self._norm_add.get(id(norm), (None,))[0] is not add or norm_step.nodes[0].args[0] is not add.out:
            return None
        if isinstance(norm.args[1], Tensor):
            return None
        K = add.out.shape[-1]
        M = add.out.size // K
        if self._tiled(M, K) or self._mv_rows(M) * K * 4 > SHARED_X_BYTES or K % 32:
            return None
        return norm, add, self._norm_add[id(norm)][1]

    def _can_fuse_norm(self, step: Step, nxt: Step) -> bool:
        """An rms_norm whose output only the next step's products read, run by the
        row kernel: its normalisation moves into that kernel (wgsl.matvec's ``norm``)."""
        node = step.nodes[0]
        if node.op != "rms_norm" or len(step.nodes) != 1 or not nxt.is_products:
            return False
        x, w = node.args[0], node.args[1]
        if isinstance(w, Tensor) or not self.contiguous(x) or nxt.nodes[0].args[0] is not node.out:
            return False
        if self.consumers.get(node.out.id, 0) != len(nxt.nodes) or node.out.id in {
            t.id for t in self.graph.outputs.values()
        }:
            return False
        K = x.shape[-1]
        return not self._tiled(x.size // K, K) and K % 8 == 0

    @property
    def _row_kernel(self) -> tuple[str, str]:
        """The few-row kernel (ROW_KERNELS): the backend's ``row_kernel``, else
        ``CERA_VULKAN_ROW_KERNEL``, else "subgroup" on software adapters and "unit-auto"
        on GPUs (on the H200 the fastest decode step of the four real files' layouts
        among the kernels, benchmarks/README.md: the products of types with a unit
        decoder through the unit kernel, the others through workgroup-1pass); (family,
        variant)."""
        name = self.backend.row_kernel or os.environ.get("CERA_VULKAN_ROW_KERNEL", "").strip() or None
        if name is None:
            name = "subgroup" if self.ctx.software else "unit-auto"
        if name not in ROW_KERNELS:
            raise UnsupportedOperation(f"backend 'vulkan': row kernel {name!r} is not one of {', '.join(ROW_KERNELS)}")
        return name.partition("-")[0], name

    @property
    def _mv_sg(self) -> int:
        """With subgroups and a "subgroup" row kernel: features per workgroup of the
        barrier-free matvec (a subgroup each); else 0 (a workgroup per feature)."""
        if not self.ctx.subgroups or self._row_kernel[0] != "subgroup":
            return 0
        return max(1, wgsl.MV_WG // self.ctx.subgroup_size)

    def _unit(self, x_off: int, xs: int, K: int, N: int, types: tuple[str, ...], R: int,
              segments: bool = False) -> tuple | None:  # fmt: skip
        """unit_plan's (group, features a group, features a workgroup, shared_k) of
        wgsl.matvec_unit for a product of R rows of x (K values each, at x_off, xs apart)
        with weights of these types and N features under the row kernel; None where it
        does not apply: not a "unit*" kernel, no subgroups, or x not at a multiple of 4
        values (a fused norm's weight always is: a constant, placed at a multiple of 16)."""
        if not self.ctx.subgroups or K % 32 or x_off % 4 or xs % 4:
            return None
        if segments and os.environ.get("CERA_VULKAN_UNIT_SEGMENTS", "1") == "0":
            return None  # a diagnostic: Q, K and V through the workgroup kernel's segments
        return unit_plan(self._row_kernel[1], K, N, types, self.ctx.subgroup_size, R, self._shared_bytes, segments)

    @property
    def _shared_bytes(self) -> int:
        """The adapter's workgroup memory, in bytes."""
        return int(self.ctx.limits["max-compute-workgroup-storage-size"])

    @property
    def _mv_span(self) -> int:
        """Groups of 8 columns a lane of the subgroup kernel takes per step (8: the
        block-wise kernel, wgsl.matvec_blk)."""
        return ROW_KERNELS[self._row_kernel[1]]

    def _blk(self, K: int) -> bool:
        """Products of rows of K values take the block-wise kernel (wgsl.matvec_blk)."""
        return bool(self._mv_sg) and self._mv_span == 8 and K % 32 == 0

    @property
    def _mv_blk(self) -> tuple[int, int]:
        """The block-wise kernel's (lanes a feature, 0: a subgroup; features a workgroup)."""
        lanes = BLK_LANES.get(self._row_kernel[1], 0)
        if lanes:
            lanes = min(lanes, self.ctx.subgroup_size)
            return lanes, wgsl.MV_WG // lanes
        return 0, self._mv_sg

    @property
    def _mv_vec(self) -> bool:
        """The block-wise kernel reads Q4_K through a vec4 view (wgsl.DQ32_VEC)."""
        return self._row_kernel[1].endswith("-v4")

    def _vec_binds(self, binds: list) -> tuple[list, tuple]:
        """matvec_blk(vec=True): binds with each vec4-viewed weight bound again, and the
        read-only bindings."""
        extra = [b for b in binds if wgsl.vec_view(b[1].ggml_type)] if self._mv_vec else []
        out = list(binds) + extra
        return out, tuple(range(2, 2 + len(out)))

    @property
    def _mv_onepass(self) -> bool:
        """The workgroup kernel's sums all at once (wgsl.products._reduce_onepass)."""
        family, name = self._row_kernel
        return (name == "workgroup-1pass" or family == "unit") and bool(self.ctx.subgroups)

    @staticmethod
    def _matmul_name() -> str:
        name = os.environ.get("CERA_VULKAN_MATMUL", "").strip() or MATMUL_DEFAULT
        if name not in MATMUL_KERNELS:
            raise UnsupportedOperation(
                f"backend 'vulkan': CERA_VULKAN_MATMUL={name!r} is not one of {', '.join(MATMUL_KERNELS)}"
            )
        return name

    def _matmul_kernel(self, N: int, M: int, K: int) -> tuple[int, int, int, bool]:
        """(features a thread, rows a tile, spans of the depth, skew) of the tiled kernel
        (wgsl.matmul) for N features of M rows of depth K: ``CERA_VULKAN_MATMUL``
        (MATMUL_KERNELS), else MATMUL_DEFAULT."""
        name = self._matmul_name()
        if name == "auto-m32":
            small = -(-N // wgsl.MATMUL_TILES[4]) * -(-M // wgsl.TM) < MATMUL_SMALL_GRID
            return (4, 32, 1, False) if small else (4, wgsl.TM, 1, False)
        fn, tm, split, skew = MATMUL_KERNELS[name]
        splits = self.matmul_splits(N, M, K, fn, tm) if split else 1
        return fn, tm, splits, skew

    @staticmethod
    def matmul_splits(N: int, M: int, K: int, feats: int, tile_rows: int) -> int:
        """Spans of the depth a tiled product of N features, M rows and depth K is split
        into under the split kernels (1: none)."""
        groups = -(-N // wgsl.MATMUL_TILES[feats]) * -(-M // tile_rows)
        if groups >= MATMUL_SPLIT_GRID:
            return 1
        s = min(MATMUL_SPLITS, -(-MATMUL_SPLIT_GRID // groups), K // wgsl.TK // MATMUL_SPLIT_STEPS)
        return s if s >= 2 else 1

    def _split_scratch(self, words: int) -> int:
        """Scratch for a split product's partial sums, shared by all of them (the dispatches
        of a pass run one after another): grown when a product needs more."""
        if words > self._split_words:
            self._split_at, self._split_words = self._scratch(words), words
        return self._split_at

    @staticmethod
    def _mv_feats(R: int) -> int:
        """Output features a workgroup of the GPU row kernel computes (sharing x's loads):
        4 for one or two rows, 1 beyond (registers: rows x features sums)."""
        return 4 if R <= 2 else 1

    @staticmethod
    def _mv_rows(M: int) -> int:
        return 1 if M == 1 else 2 if M == 2 else 4 if M <= 4 else wgsl.MV_ROWS

    def _products(self, step: Step) -> None:
        first = step.nodes[0]
        x = first.args[0]
        norm = getattr(self, "_norm_now", None)
        nparams: list = []
        if norm is not None:
            x = norm.args[0]
            w = norm.args[1]
            nparams = [self.operand(w) + 1 if w is not None else 0, f32_bits(norm.attrs["eps"])]
        K = x.shape[-1]
        M = x.size // K
        xs = self.stride(x)
        fuse = norm is not None
        if K % 8:
            raise UnsupportedOperation(
                f"backend 'vulkan': products with rows of {K} values (a multiple of 8 is needed)"
            )
        tiled = self._tiled(M, K)
        glu = step.glu
        residual = step.residual
        if residual is not None:
            add, k, other = residual
            member = step.nodes[k]
            if self.consumers.get(member.out.id, 0) > 1 or not self.contiguous(other) or glu is not None:
                residual = None
        fuse_glu = (
            glu is not None and not tiled and all(n.args[2] is None for n in step.nodes)
            and self.consumers.get(step.nodes[0].out.id, 0) == 1 and self.consumers.get(step.nodes[1].out.id, 0) == 1
        )  # fmt: skip
        blk = self._blk(K)
        wts = [self.weights[n.args[1].name] for n in step.nodes]
        unit_seg = self._unit(self.off(x), xs, K, sum(w.shape[1] for w in wts), tuple(w.ggml_type for w in wts),
                              self._mv_rows(M), segments=True)  # fmt: skip
        segments = (
            glu is None and not tiled and (blk or not self._mv_sg) and 1 < len(step.nodes) <= 4
            and (blk or self._mv_feats(self._mv_rows(M)) > 1 or unit_seg is not None)
            and all(len(self.weights[n.args[1].name].shape) == 2
                    and len(self._weight_chunks(self.weights[n.args[1].name], self.weights[n.args[1].name].shape[1])) == 1
                    for n in step.nodes)
        )  # fmt: skip
        self._pre_params = None
        pre = getattr(self, "_pre_now", None)
        if pre is not None:
            R = self._mv_rows(M)

            def takes_pre(plan, N, types, seg=False) -> bool:
                # x in shared memory, and not so many workgroups that each one's norm and
                # add cost more than their dispatch (Gemma 3's output, 16384 workgroups:
                # 200 us fused against 168 apart on the H200); with the products' 8-bit x
                # in shared memory too where they take it
                if plan is None or plan[3] == 0 or -(-N // plan[2]) > PRE_ADD_MAX_GROUPS:
                    return False
                qk = unit_products(plan[0], types, K, self._shared_bytes, seg)[1]
                return not qk or quant_bytes(R, K, plan[3]) <= self._shared_bytes

            def one_chunk(w) -> bool:
                return len(self._weight_chunks(w, w.shape[1])) == 1

            if segments:
                ok = takes_pre(unit_seg, sum(w.shape[1] for w in wts), tuple(w.ggml_type for w in wts), True)
            elif fuse_glu:
                types = (wts[0].ggml_type, wts[1].ggml_type)
                N = wts[0].shape[1]
                ok = one_chunk(wts[0]) and takes_pre(self._unit(self.off(x), xs, K, N, types, R), N, types)
            else:
                ok = not tiled and all(
                    one_chunk(w)
                    and takes_pre(
                        self._unit(self.off(x), xs, K, w.shape[1], (w.ggml_type,), R), w.shape[1], (w.ggml_type,)
                    )
                    for w in wts
                )
            if ok:  # P 15..18 of the unit kernel's pre_add
                norm_w = pre[0].args[1]
                self._pre_params = [self.off(pre[0].args[0]), self.off(pre[2]),
                                    self.operand(norm_w) + 1 if norm_w is not None else 0,
                                    f32_bits(pre[0].attrs["eps"])]  # fmt: skip
            else:  # the norm and its add in their own dispatch first, as without the fusion
                self._op_rms_norm(pre[0])
        if segments:
            self._segments(step, x, K, M, xs, residual, nparams, fuse, unit_seg)
            return
        if fuse_glu:
            g, u = (self.weights[n.args[1].name] for n in step.nodes)
            N = g.shape[1]
            kind = glu.attrs["kind"]
            types = (g.ggml_type, u.ggml_type)
            for (r0, rows, bo, bs), (_, _, uo, us) in zip(
                self._weight_chunks(g, N), self._weight_chunks(u, N), strict=True
            ):
                params = [K, rows, M, self.off(x), xs, self.off(glu.out), N, 0, 0, 0, r0, g.row_bytes,
                          u.row_bytes] + nparams  # fmt: skip
                self._row_product(types, kind, [("w", g, bo, bs), ("w", u, uo, us)], params, K, M, rows,
                                  self.off(x), xs, fuse, f"matvec+{kind} {types[0]} {K}x{N}")  # fmt: skip
        else:
            for i, node in enumerate(step.nodes):
                _, wref, bias = node.args
                w = self.weights[wref.name]
                if len(w.shape) != 2:
                    raise ShapeError(f"linear: weight {w.name!r} has shape {w.shape}; a 2-D matrix is needed")
                out, res, res_stride = node.out, 0, 0
                if residual is not None and residual[1] == i:
                    out = residual[0].out
                    res, res_stride = self.off(residual[2]) + 1, residual[2].shape[-1]
                b = self.operand(bias) + 1 if bias is not None else 0
                self._product(w, w.row_bytes, w.shape[1], K, M, self.off(x), xs, self.off(out), b, res, res_stride,
                              nparams, fuse, tiled)  # fmt: skip
            if glu is not None:
                self._op_glu(glu)
            if step.residual is not None and residual is None:
                self._op_add(step.residual[0])

    def _product(self, w, row_bytes: int, N: int, K: int, M: int, x_off: int, xs: int, out_off: int, b: int,
                 res: int, res_stride: int, nparams: list, fuse: bool, tiled: bool) -> None:  # fmt: skip
        """y = x W^T (+ bias, + residual) for M rows of K values and the N rows of W, each
        ``row_bytes`` long: a dispatch per bindable chunk of W, through the tiled kernel or
        the row kernel (products steps, and conv1d's product of its columns)."""
        for r0, rows, bo, bs in self._weight_chunks(w, N, row_bytes):
            params = [K, rows, M, x_off, xs, out_off, N, b, res, res_stride, r0, row_bytes, 0] + nparams
            if tiled:
                fn, tm, splits, skew = self._matmul_kernel(rows, M, K)
                gx, gy = -(-rows // wgsl.MATMUL_TILES[fn]), -(-M // tm)
                if splits > 1:
                    params[12] = self._split_scratch(splits * M * rows)
                self._emit(("matmul", w.ggml_type, fn, tm, splits, skew),
                           lambda t=w.ggml_type, fn=fn, tm=tm, s=splits, k=skew: wgsl.matmul(t, fn, tm, s, k), params,
                           (gx * splits, gy), binds=[("w", w, bo, bs)], read_only=(2,), label=f"matmul {w.ggml_type} {K}x{N}")  # fmt: skip
                if splits > 1:
                    self._emit(("matmul_splits", splits), lambda s=splits: wgsl.matmul_splits(s), params,
                               -(-(rows * M) // 64), label="matmul (splits)")  # fmt: skip
                continue
            self._row_product((w.ggml_type,), None, [("w", w, bo, bs)], params, K, M, rows, x_off, xs, fuse,
                              f"matvec {w.ggml_type} {K}x{N}")  # fmt: skip

    def _row_product(self, types: tuple, kind: str | None, binds: list, params: list, K: int, M: int, rows: int,
                     x_off: int, xs: int, fuse: bool, label: str) -> None:  # fmt: skip
        """One dispatch of the row kernel (ROW_KERNELS) for ``rows`` features of a product
        of M rows of K values: one weight, or gate and up (``kind``: their glu) bound in
        ``binds``. Which kernel: the block-wise one ("subgroup-blk*"), else the unit kernel
        where unit_plan takes the product, else the subgroup kernel ("subgroup*"), else the
        workgroup kernel."""
        R, sg = self._mv_rows(M), self.ctx.subgroups
        ro = tuple(range(2, 2 + len(binds)))
        if self._blk(K):
            lanes, per = self._mv_blk
            vec = self._mv_vec
            binds, ro = self._vec_binds(binds)
            self._emit(("matvec_blk", types, kind, R, per, fuse, lanes, vec),
                       lambda: wgsl.matvec_blk(types, kind, R, per, fuse, lanes, vec=vec),
                       params, -(-rows // per), binds=binds, read_only=ro, label=label)  # fmt: skip
            return
        plan = self._unit(x_off, xs, K, rows, types, R)
        pre = self._pre_params is not None
        if pre:
            assert plan and plan[3], "a sandwich add fused where the unit kernel does not take x in shared memory"
            params = params + [0] * (15 - len(params)) + self._pre_params
        if plan:
            grp, UF, per, sk = plan
            dt, qk = unit_products(grp, types, K, self._shared_bytes)
            sk = unit_shared_k(self._row_kernel[1], sk, pre, qk)
            self._emit(("matvec_unit", types, kind, R, per, UF, fuse, grp, sk, pre, dt, qk),
                       lambda: wgsl.matvec_unit(types, kind, R, per, UF, fuse, grp, sk, pre_add=pre, dot=dt, quant_k=qk),
                       params, -(-rows // per), binds=binds, read_only=ro,
                       label=f"rms_norm+add+{label}" if pre else label)  # fmt: skip
            return
        if self._mv_sg:
            per, span = self._mv_sg, min(4, self._mv_span)
            self._emit(("matvec_sg", types, kind, R, per, fuse, span),
                       lambda: wgsl.matvec_sg(types, kind, True, R, per, fuse, span),
                       params, -(-rows // per), binds=binds, read_only=ro, label=label)  # fmt: skip
            return
        F, one = self._mv_feats(R), self._mv_onepass
        self._emit(("matvec", types, kind, R, sg, fuse, F, one), lambda: wgsl.matvec(types, kind, sg, R, fuse, F, one),
                   params, -(-rows // F), binds=binds, read_only=ro, label=label)  # fmt: skip

    def _segments(self, step, x, K, M, xs, residual, nparams, fuse, unit) -> None:
        """The products of one input (Q, K, V) as one dispatch: wgsl.matvec_segments, or
        wgsl.matvec_blk's segments under the block-wise row kernel, or wgsl.matvec_unit's
        where ``unit`` (the unit kernel's plan for them) is given."""
        R = self._mv_rows(M)
        F = self._mv_feats(R)
        blk = bool(self._mv_sg) and self._mv_span == 8
        if blk:
            lanes, F = self._mv_blk
            unit = None
        if unit:
            F = unit[2]  # each product's features start at a multiple of a workgroup's
        params = [K, 0, M, self.off(x), xs, 0, 0, 0, 0, 0, 0, 0, 0] + (nparams or [0, 0])
        pre = self._pre_params is not None
        if pre:
            params += self._pre_params
        params += [0] * (wgsl.SEG_BASE - len(params))
        binds, types, at, n_all = [], [], 0, 0
        for i, node in enumerate(step.nodes):
            _, wref, bias = node.args
            w = self.weights[wref.name]
            N = w.shape[1]
            n_all += N
            out, res, res_stride = node.out, 0, 0
            if residual is not None and residual[1] == i:
                out = residual[0].out
                res, res_stride = self.off(residual[2]) + 1, residual[2].shape[-1]
            b = self.operand(bias) + 1 if bias is not None else 0
            params += [at, N, self.off(out), N, b, w.row_bytes, res, res_stride]
            binds.append(("w", w, 0, w.buffer.size))
            types.append(w.ggml_type)
            at += -(-N // F) * F
        params[1] = at
        types = tuple(types)
        shape = f"{K}x{n_all}"
        if blk:
            vec = self._mv_vec
            binds, ro = self._vec_binds(binds)
            self._emit(("matvec_blk_seg", types, R, F, fuse, lanes, vec), lambda: wgsl.matvec_blk(types, None, R, F, fuse, lanes, True, vec),
                       params, at // F, binds=binds, read_only=ro,
                       label=f"matvec x{len(types)} {'/'.join(sorted(set(types)))} {shape}")  # fmt: skip
            if residual is None and step.residual is not None:
                self._op_add(step.residual[0])
            return
        label = f"matvec x{len(types)} {'/'.join(sorted(set(types)))} {shape}"
        if unit:
            grp, UF, per, sk = unit
            dt, qk = unit_products(grp, types, K, self._shared_bytes, segments=True)
            sk = unit_shared_k(self._row_kernel[1], sk, pre, qk)
            self._emit(("matvec_unit_seg", types, R, per, UF, fuse, grp, sk, pre, dt, qk),
                       lambda: wgsl.matvec_unit(types, None, R, per, UF, fuse, grp, sk, segments=True, pre_add=pre,
                                                dot=dt, quant_k=qk),
                       params,
                       at // per, binds=binds, read_only=tuple(range(2, 2 + len(binds))),
                       label=f"rms_norm+add+{label}" if pre else label)  # fmt: skip
            if residual is None and step.residual is not None:
                self._op_add(step.residual[0])
            return
        sg, one = self.ctx.subgroups, self._mv_onepass
        self._emit(("matvec_seg", types, R, sg, fuse, F, one), lambda: wgsl.matvec_segments(types, sg, R, fuse, F, one), params,
                   at // F, binds=binds, read_only=tuple(range(2, 2 + len(binds))),
                   label=f"matvec x{len(types)} {'/'.join(sorted(set(types)))} {shape}")  # fmt: skip
        if residual is None and step.residual is not None:
            self._op_add(step.residual[0])

    def _elementwise(self, node, code: int, count: int, a_off: int, b_off: int = 0, b_len: int = 1, kind: int = 0,
                     f: float = 0.0, row: int = 1, a_stride: int = 1) -> None:  # fmt: skip
        params = [code, count, self.off(node.out), a_off, b_off, max(1, b_len), kind, f32_bits(f), row, a_stride]
        self._emit(("ew",), wgsl.elementwise, params, -(-count // 256), label=node.op)

    def _op_unary(self, node) -> None:
        x = node.args[0]
        self._need_contiguous(node, x)
        self._elementwise(node, EW["unary"], x.size, self.off(x), kind=OPS["unary"].code("kind", node.attrs["kind"]))

    def _op_glu(self, node) -> None:
        g, u = node.args
        self._need_contiguous(node, g, u)
        self._elementwise(node, EW["glu"], g.size, self.off(g), self.off(u), g.size, kind=OPS["glu"].code("kind", node.attrs["kind"]))

    def _binary(self, node, code: int) -> None:
        a, b = node.args
        self._need_contiguous(node, a)
        if isinstance(b, WeightRef):
            wide = self._broadcast_weight(a, b)
            if wide is not None:
                self._elementwise(node, code, a.size, self.off(a), *wide)
                return
            vals = self.weights[b.name].dense().reshape(-1)
            self._elementwise(node, code, a.size, self.off(a), self.operand(b), vals.size)
            return
        self._need_contiguous(node, b)
        if b.size not in (a.size, a.shape[-1]) and tuple(b.shape) != tuple(a.shape):
            # a general broadcast: expand the operand into a constant index table is not
            # needed by any family; refuse rather than guess
            raise UnsupportedOperation(f"backend 'vulkan': {node.op} broadcasting {b.shape} over {a.shape}")
        self._elementwise(node, code, a.size, self.off(a), self.off(b), b.size)

    def _op_add(self, node) -> None:
        self._binary(node, EW["add"])

    def _op_mul(self, node) -> None:
        self._binary(node, EW["mul"])

    def _op_scale(self, node) -> None:
        x = node.args[0]
        self._need_contiguous(node, x)
        self._elementwise(node, EW["scale"], x.size, self.off(x), f=node.attrs["s"])

    def _op_softcap(self, node) -> None:
        x = node.args[0]
        self._need_contiguous(node, x)
        self._elementwise(node, EW["softcap"], x.size, self.off(x), f=node.attrs["cap"])

    def _op_copy(self, node) -> None:
        x = node.args[0]
        last = x.shape[-1] if x.shape else 1
        self._elementwise(node, EW["copy"], x.size, self.off(x), row=last, a_stride=self.stride(x))

    def _op_rms_norm(self, node, layer: bool = False) -> None:
        x = node.args[0]
        self._need_contiguous(node, x)
        n = x.shape[-1]
        rows = x.size // n
        w = node.args[1]
        b = node.args[2] if layer else None
        for p in (w, b):
            if isinstance(p, Tensor) and p.size != n:
                raise UnsupportedOperation(f"backend 'vulkan': {node.op} with a per-row operand of shape {p.shape}")
        out, res, label = node.out, 0, node.op
        if id(node) in self._norm_add:  # the residual add that follows, in the same dispatch
            add, other = self._norm_add[id(node)]
            out, res, label = add.out, self.off(other) + 1, f"{node.op}+add"
        params = [int(layer), rows, n, self.off(x), self.off(out), self.operand(w) + 1 if w is not None else 0,
                  self.operand(b) + 1 if b is not None else 0, f32_bits(node.attrs["eps"]), res]  # fmt: skip
        sg = self.ctx.subgroups
        self._emit(("norm", sg), lambda: wgsl.norm(sg), params, rows, label=label)

    def _op_layer_norm(self, node) -> None:
        self._op_rms_norm(node, layer=True)

    def _op_rope(self, node) -> None:
        x, pos = node.args
        out = node.out
        # a per-head rms_norm before (its input is read) and a scale after (its output
        # written): _qk_norm_rope; P 32/34 the norm weight + 1, 33/35 eps (first/second
        # tensor), 36 the first tensor's output scale (0: none), 37 norm flags (1, 2)
        norm = self._rope_norm.get(id(node))
        norm_w = norm_eps = out_scale = 0
        if norm is not None:
            x, w = norm.args[0], norm.args[1]
            norm_w, norm_eps = self.operand(w) + 1 if w is not None else 0, f32_bits(norm.attrs["eps"])
        scale = self._rope_scale.get(id(node))
        if scale is not None:
            out, out_scale = scale.out, f32_bits(scale.attrs["s"])
        self._need_contiguous(node, x)
        spec = node.attrs["spec"]
        n, heads, dim = x.shape
        ff = 0
        if spec.freq_factors is not None:
            ff = self.const(np.asarray(spec.freq_factors, np.float32), key=("ff", spec.freq_factors)) + 1
        params = [n * heads, heads, dim, self.off(x), self.off(out), self.off(pos), spec.n_dims, int(spec.neox),
                  f32_bits(spec.base), f32_bits(spec.freq_scale), f32_bits(spec.ext_factor), f32_bits(spec.attn_factor),
                  f32_bits(spec.beta_fast), f32_bits(spec.beta_slow), spec.n_ctx_orig, ff, n * heads, 1, 0, 0]  # fmt: skip
        params += [0] * 12 + [norm_w, norm_eps, 0, 0, out_scale, int(norm is not None)]
        if id(node) in self._rope_pair:
            # the second of a pair (see _rope_pairs): it joins the previous dispatch
            last = self.dispatches[-1]
            assert last.key[0] == "rope" and last.params[0] == last.params[16]
            last.params[0] += n * heads
            last.params[17:20] = [heads, self.off(x), self.off(out)]
            if norm is not None:
                last.params[34:36] = [norm_w, norm_eps]
                last.params[37] |= 2
            last.groups = grid(last.params[0])
            return
        label = ("norm+" if norm is not None else "") + "rope" + ("+scale" if scale is not None else "")
        sg = self._rope_subgroups
        self._emit(("rope", sg), lambda: wgsl.rope(sg), params, n * heads, label=label)

    @property
    def _rope_subgroups(self) -> bool:
        """Whether rope's norm sums through subgroups (where the adapter has them, of 32
        threads or fewer; ``CERA_VULKAN_ROPE_TREE=1``: the shared-memory tree everywhere,
        for comparison)."""
        sgs = self.ctx.subgroup_size or 0
        return bool(self.ctx.subgroups) and 0 < sgs <= 32 and os.environ.get("CERA_VULKAN_ROPE_TREE", "") != "1"

    def _op_attention(self, node) -> None:
        q, k, v, ref = node.args
        self._need_contiguous(node, q, k, v)
        st = self.template
        if st is None:
            raise ShapeError("attention needs a state to compile against")
        n, heads, dk = q.shape
        nkv, dv = k.shape[1], v.shape[2]
        cap = st.k[ref.index].shape[2]
        f16 = self.kv_type == "f16"
        kvb = [("k", ref.index), ("v", ref.index), ("pos",)]
        first = not self._wrote_pos
        self._wrote_pos = True
        if id(node) in self._rotating:
            # the rope pair's dispatch (the last one) joins the attention: its norms,
            # rotations and scale, and the cache stores (wgsl.attention_lanes' rotating form)
            rot = self.dispatches.pop()
            assert rot.key[0] == "rope" and rot.params[4] == self.off(q) and rot.params[19] == self.off(k)
            assert rot.params[16] == n * heads and rot.params[0] == n * (heads + nkv) and rot.params[2] == dk
            params = self._attention_params(node, cap, rot.params[3]) + [rot.params[18], self.off(v)]
            params += rot.params[6:16] + rot.params[32:38] + [int(first)]
            rotate = 2 if self._rope_subgroups else 1
            self._attention_lanes(node, params, kvb, cap, rotate, f"{rot.label}+kv_store+attention", ())
            return
        params = [n, nkv, dk, dv, self.off(k), self.off(v), cap, self.seq_off, self.n_seq,
                  self.off(self.graph.inputs["positions"]), st.n_ctx, int(first)]  # fmt: skip
        last = self.dispatches[-1] if self.dispatches else None
        if (
            self.fold_kv
            and last is not None
            and last.key[0] == "rope"
            and last.params[0] != last.params[16]
            and last.params[19] == self.off(k)
            and last.params[17] == nkv
            and last.params[2] == dk
            and last.params[16] + n * nkv == last.params[0]
        ):
            # the keys' rotation is the previous dispatch (the second of a rope pair):
            # the cache stores join it (wgsl.rope_kv)
            self.dispatches.pop()
            sg = self._rope_subgroups
            self._emit(("rope_kv", f16, sg), lambda: wgsl.rope_kv(f16, sg), last.params[:20] + params + last.params[32:],
                       last.params[0] + n * nkv, binds=kvb, label=f"{last.label}+kv_store")  # fmt: skip
        else:
            self._emit(("kv_store", f16), lambda: wgsl.kv_store(f16), params, n * nkv, binds=kvb, label="kv_store")
        if dk > 512:
            raise UnsupportedOperation(f"backend 'vulkan': attention heads of {dk} values (at most 512)")
        params = self._attention_params(node, cap, self.off(q))
        kind = self.kv_type
        name = self._attention_kernel
        if name != "chunked" and self._lanes_fit(dk, dv):
            if self._attention_tiles(name, n):
                tiles = -(-n // wgsl.ATT_TILE_ROWS)
                self._emit(("attention_tiles", dv, dk), lambda: wgsl.attention_tiles(dv, dk), params,
                           self.n_seq * tiles * heads, binds=kvb, read_only=(2, 3, 4), label="attention (tiles)")  # fmt: skip
                return
            self._attention_lanes(node, params, kvb, cap, 0, "attention", (2, 3, 4))
            return
        self._emit(("attention", kind, dv, dk), lambda: wgsl.attention(kind, dv, dk), params, n * heads, binds=kvb,
                   label="attention")  # fmt: skip

    def _lanes_fit(self, dk: int, dv: int) -> bool:
        """Whether wgsl.attention_lanes (and attention_tiles) take heads of dk, dv values
        over this state's cache: f16, multiples of 8, at most 256."""
        return self.kv_type == "f16" and dk % 8 == dv % 8 == 0 and max(dk, dv) <= 256

    def _attention_params(self, node, cap: int, q_off: int) -> list[int]:
        """wgsl.attention's parameters (0..17) for this attention node, its queries at q_off."""
        spec = node.attrs["spec"]
        q, k, v = node.args[:3]
        n, heads, dk = q.shape
        return [n, heads, k.shape[1], dk, v.shape[2], q_off, self.off(node.out), cap, self.seq_off, self.n_seq,
                self.off(self.graph.inputs["positions"]), self.template.n_ctx, f32_bits(spec.scale),
                f32_bits(spec.softcap or 0.0), int(spec.window or 0), 1, 0, 0]  # fmt: skip

    def _attention_lanes(self, node, params: list[int], kvb: list, cap: int, rotate: int, label: str,
                         read_only: tuple[int, ...]) -> None:  # fmt: skip
        """wgsl.attention_lanes for this attention node (``rotate``: its rotating form), and
        where its cells are split (_attention_split) the join of the parts."""
        n, heads, dk = node.args[0].shape
        dv = node.args[2].shape[2]
        sg = self.ctx.subgroups
        S = self._attention_split(self._attention_kernel, n, cap)
        if S > 1:
            params[16] = self.const(np.zeros(n * heads * S * (dv + 2), np.uint32), np.uint32)
        self._emit(("attention_lanes", dv, dk, sg, S, rotate), lambda: wgsl.attention_lanes(dv, dk, sg, S, rotate),
                   params, n * heads * S, binds=kvb, read_only=read_only, label=label + (" (split)" if S > 1 else ""))  # fmt: skip
        if S > 1:
            self._emit(("attention_combine", dv, S), lambda: wgsl.attention_combine(dv, S),
                       [n * heads, params[16], self.off(node.out)], n * heads, label="attention (combine)")  # fmt: skip

    @property
    def _attention_kernel(self) -> str:
        """The cached attention's kernel, from ``CERA_VULKAN_ATTENTION`` (ATTENTION_KERNELS;
        default "lanes")."""
        name = os.environ.get("CERA_VULKAN_ATTENTION", "").strip() or "lanes"
        if name not in ATTENTION_KERNELS:
            raise UnsupportedOperation(
                f"backend 'vulkan': attention kernel {name!r} is not one of {', '.join(ATTENTION_KERNELS)}"
            )
        return name

    def _attention_tiles(self, name: str, n: int) -> bool:
        """Whether a pass of ``n`` rows takes wgsl.attention_tiles: under "tiles" unless
        its rows are row-exact; under "lanes" where the products are tiled for its rows
        (a prompt pass on a GPU: VulkanExecutable._tiled's rule without the depth)."""
        if name == "tiles":
            return self.row_mode != 1
        if name != "lanes" or self.ctx.software or self.row_mode == 1:
            return False
        return self.row_mode == 2 or n > wgsl.MV_ROWS

    def _attention_split(self, name: str, n: int, cap: int) -> int:
        """Workgroups a (query row, head) of wgsl.attention_lanes splits its cells over:
        ATT_SPLIT where the kernel is "lanes-split", or "lanes" on a GPU with a cache of
        ATT_SPLIT_MIN_CAP cells or more, for the passes whose rows are computed as one-token
        steps compute them (a few rows, or row-exact ones), so that a row's result does not
        depend on the pass it is in; else 1."""
        if name == "lanes-whole" or self.row_mode == 2 or (self.row_mode == 0 and n > wgsl.MV_ROWS):
            return 1
        if name == "lanes" and (self.ctx.software or cap < ATT_SPLIT_MIN_CAP):
            return 1
        return att_split()

    def _op_attention_full(self, node) -> None:
        q, k, v = node.args
        self._need_contiguous(node, q, k, v)
        spec = node.attrs["spec"]
        n, heads, dk = q.shape
        nkv, dv = k.shape[1], v.shape[2]
        if dk > 512:
            raise UnsupportedOperation(f"backend 'vulkan': attention heads of {dk} values (at most 512)")
        params = [n, heads, nkv, dk, dv, self.off(q), self.off(node.out), 0, self.seq_off, self.n_seq,
                  self.off(self.graph.inputs["positions"]), 0, f32_bits(spec.scale), f32_bits(spec.softcap or 0.0),
                  int(spec.window or 0), int(spec.causal), self.off(k), self.off(v)]  # fmt: skip
        self._emit(
            ("attention", "act", dv, dk),
            lambda: wgsl.attention("act", dv, dk),
            params,
            n * heads,
            label="attention_full",
        )

    def _op_softmax(self, node) -> None:
        x = node.args[0]
        self._need_contiguous(node, x)
        n = x.shape[-1]
        rows = x.size // n
        self._emit(("softmax",), wgsl.softmax, [rows, n, self.off(x), self.off(node.out)], rows, label="softmax")

    # argmax over rows longer than this: two stages (wgsl.select_partial / select_combine),
    # chunks of SELECT_CHUNK values each read by their own workgroup
    SELECT_SPLIT = 8192
    SELECT_CHUNK = 2048

    def _select(self, node, k: int, values_off: int = 0) -> None:
        x = node.args[0]
        self._need_contiguous(node, x)
        n = x.shape[-1]
        rows = x.size // n
        if k == 1 and n > self.SELECT_SPLIT:
            chunk = max(self.SELECT_CHUNK, -(-n // 1024))
            chunks = -(-n // chunk)
            scratch = self.const(np.zeros(2 * rows * chunks, np.uint32), np.uint32)
            self._emit(("select_partial",), wgsl.select_partial, [rows, n, self.off(x), scratch, chunk, chunks],
                       rows * chunks, label=f"{node.op} (chunks)")  # fmt: skip
            self._emit(("select_combine",), wgsl.select_combine, [rows, chunks, scratch, self.off(node.out), 0, values_off],
                       rows, label=f"{node.op} (combine)")  # fmt: skip
            return
        params = [rows, n, self.off(x), self.off(node.out), k, values_off]
        self._emit(("select",), wgsl.select_top, params, rows, label=node.op)

    def _op_argmax(self, node) -> None:
        self._select(node, 1)

    def _op_top_k(self, node) -> None:
        self._select(node, node.attrs["k"])

    def _gather(self, node, table: np.ndarray, src_off: int = 0) -> None:
        t = self.const(table.astype(np.uint32), np.uint32)
        count = table.size
        self._emit(
            ("gather",), wgsl.gather, [count, self.off(node.out), src_off, t, 0], -(-count // 256), label=node.op
        )

    def _indices(self, t: Tensor) -> np.ndarray:
        """Arena element index of every value of t, row-major."""
        shape = t.shape or (1,)
        last = shape[-1]
        rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
        base = self.off(t) + np.arange(rows)[:, None] * (self.stride(t) if len(shape) > 1 else last)
        return (base + np.arange(last)[None, :]).reshape(-1)

    def _op_take(self, node) -> None:
        x, ids = node.args
        self._need_contiguous(node, x, ids)
        k = ids.shape[-1]
        count = ids.size
        params = [count, self.off(node.out), self.off(x), self.off(ids), 1, x.shape[-1], k]
        self._emit(("gather",), wgsl.gather, params, -(-count // 256), label="take")

    def _op_concat(self, node) -> None:
        a, b = node.args
        ax = node.attrs.get("axis", -1) % len(a.shape)
        ia = self._indices(a).reshape(a.shape)
        ib = self._indices(b).reshape(b.shape)
        self._gather(node, np.concatenate([ia, ib], axis=ax).reshape(-1))

    def _op_rows(self, node) -> None:
        x = node.args[0]
        idx = self._indices(x).reshape(x.shape[0], -1)[list(node.attrs["index"])]
        self._gather(node, idx.reshape(-1))

    def _op_seq_mean(self, node) -> None:
        x = node.args[0]
        self._need_contiguous(node, x)
        groups = np.asarray(node.attrs["groups"], np.uint32).reshape(-1)
        t = self.const(groups, np.uint32)
        d = x.shape[-1]
        count = len(node.attrs["groups"]) * d
        self._emit(("seq_mean",), wgsl.seq_mean, [count, d, self.off(x), self.off(node.out), t], -(-count // 256),
                   label="seq_mean")  # fmt: skip

    def _op_reshape(self, node) -> None:  # views: placements share storage
        pass

    _op_slice = _op_reshape

    def _embedding_dense(self, node, w) -> None:
        """An embedding whose rows are no multiple of 8 values: the table's f32 values as
        a constant (small tables only: these are per-head inputs, not vocabularies)."""
        table, ids = node.args
        K, n_rows = w.shape[0], w.shape[1]
        if K * n_rows > 1 << 20:
            raise UnsupportedOperation(f"backend 'vulkan': embedding rows of {K} values (a multiple of 8 is needed)")
        count = ids.size * K
        params = [self.off(ids), count, K, self.off(node.out), self.operand(table), n_rows]
        self._emit(("embedding_dense",), wgsl.embedding_dense, params, -(-count // 64), label="embedding f32")

    def _broadcast_weight(self, a: Tensor, b: WeightRef):
        """A weight operand that broadcasts over a's trailing axes other than as a tail of
        them (Mamba-2's D, one value per head of [n, heads, head_dim]): (offset, length)
        of it spelled out as one row of a's trailing size, as a constant; None when its
        values, repeated, already are (the elementwise kernel's ``i % length``)."""
        vals = self.weights[b.name].dense()
        if a.ndim < 2 or vals.ndim < 2 or vals.shape[-1] == a.shape[-1]:
            return None
        try:
            row = np.broadcast_to(vals.reshape(b.numpy_shape), tuple(a.shape[1:]))
        except ValueError:
            return None
        row = np.ascontiguousarray(row, np.float32).ravel()
        return self.const(row, key=("bcast", b.name, tuple(a.shape[1:]))), row.size

    # -- recurrent state ---------------------------------------------------------------------------

    def _recurrent_state(self, node, ref, store: str):
        st = self.template
        if st is None or ref.index not in getattr(st, store, {}):
            raise ShapeError(f"{node.op} needs a state holding its {store.split('_')[0]} state to compile against")
        return getattr(st, store)[ref.index]

    def _op_conv1d_causal(self, node) -> None:
        """A thread per (sequence, channel), reading and advancing the slot's carried
        inputs in the state's device buffer (wgsl.conv_causal)."""
        x, w, ref = node.args
        self._recurrent_state(node, ref, "conv_state")
        ch = x.shape[1]
        kernel = self.weights[w.name].shape[0]
        if kernel > wgsl.CONV_MAX or kernel < 2:
            raise UnsupportedOperation(
                f"backend 'vulkan': conv1d_causal with a kernel of {kernel} (2 to {wgsl.CONV_MAX})"
            )
        wt = self.operand(w)  # numpy [channels, kernel]
        count = self.n_seq * ch
        params = [count, ch, kernel, self.off(x), self.stride(x), self.off(node.out), wt,
                  self.seq_off, self.n_seq]  # fmt: skip
        self._emit(("conv_causal",), wgsl.conv_causal, params, -(-count // 64), binds=[("conv", ref.index)],
                   label="conv1d_causal")  # fmt: skip

    def _op_ssm_scan(self, node) -> None:
        """A thread per (sequence, head, head element) with its row of the slot's state in
        registers (wgsl.ssm_scan, one variant per state size)."""
        x, dt, A, B, C, ref = node.args
        self._need_contiguous(node, x, dt, B, C)
        self._recurrent_state(node, ref, "ssm_state")
        H, hd = x.shape[1], x.shape[2]
        G, N = B.shape[1], B.shape[2]
        if N > 256:
            raise UnsupportedOperation(f"backend 'vulkan': ssm_scan with a state of {N} values a row (at most 256)")
        count = self.n_seq * H * hd
        params = [count, H, hd, G, self.off(x), self.off(dt), self.operand(A), self.off(B), self.off(C),
                  self.off(node.out), self.seq_off, self.n_seq]  # fmt: skip
        self._emit(("ssm_scan", N), lambda: wgsl.ssm_scan(N), params, -(-count // 64), binds=[("ssm", ref.index)],
                   label="ssm_scan")  # fmt: skip

    # -- encoder-decoder families ------------------------------------------------------------------

    def _op_conv1d(self, node) -> None:
        """The convolution's columns into scratch memory (wgsl.im2col), then their product
        with the weight as the file holds it: ``out`` rows of in * kernel values (GGML
        shape [kernel, in, out]), read in its own blocks by the products' kernels."""
        x, wref, bias = node.args
        w = self.weights[wref.name]
        kernel, c_in, c_out = w.shape
        n_out = node.out.shape[0]
        K = c_in * kernel
        if K % 8:
            raise UnsupportedOperation(
                f"backend 'vulkan': conv1d with {c_in} channels x a kernel of {kernel} ({K} values per output; "
                f"a multiple of 8 is needed)"
            )
        cols = self._scratch(n_out * K)
        count = n_out * K
        params = [count, K, kernel, node.attrs["stride"], node.attrs["padding"], x.shape[0], self.off(x),
                  self.stride(x), cols]  # fmt: skip
        self._emit(("im2col",), wgsl.im2col, params, -(-count // 256), label="conv1d columns")
        b = self.operand(bias) + 1 if bias is not None else 0
        self._product(w, c_in * w.row_bytes, c_out, K, n_out, cols, K, self.off(node.out), b, 0, 0, [], False,
                      self._tiled(n_out, K))  # fmt: skip

    def _cross_memory(self, node, ref):
        st = self.template
        if st is None or ref.index not in getattr(st, "cross_k", {}):
            raise ShapeError(f"{node.op} needs a state holding its cross-attention memory to compile against")
        return st.cross_k[ref.index]

    def _op_store_cross(self, node) -> None:
        """A thread per (row, element) copies each sequence's keys and values into its
        slot's memory (wgsl.store_cross); the rows stored are recorded by the host after
        the run (`run`), as HostState's CrossView.store records them."""
        k, v, ref = node.args
        self._need_contiguous(node, k, v)
        mem = self._cross_memory(node, ref)
        decl = ref.decl
        max_len = mem.shape[1]
        if tuple(k.shape[1:]) != (decl.n_kv_heads, decl.k_dim) or tuple(v.shape[1:]) != (decl.n_kv_heads, decl.v_dim):
            raise ShapeError(f"store_cross: k {k.shape} and v {v.shape} for a memory of {decl.n_kv_heads} heads x "
                             f"{decl.k_dim}/{decl.v_dim}")  # fmt: skip
        for _r0, n in self.graph.layout.groups:
            if n > max_len:
                raise ContextFull(f"cross-attention memory of {n} rows exceeds its size of {max_len}")
        kw, vw = decl.n_kv_heads * decl.k_dim, decl.n_kv_heads * decl.v_dim
        count = k.shape[0] * max(kw, vw)
        params = [count, kw, vw, self.off(k), self.off(v), max_len, self.seq_off, self.n_seq]
        self._emit(("store_cross",), wgsl.store_cross, params, -(-count // 64),
                   binds=[("xk", ref.index), ("xv", ref.index)], label="store_cross")  # fmt: skip
        self.cross_stores.append(ref.index)

    def _op_cross_attention(self, node) -> None:
        """wgsl.attention over the slot's memory (kv "cross"): a workgroup per (query row,
        head), every stored row visible; the rows stored per slot come from the io region
        (``cross_off``)."""
        q, ref = node.args
        self._need_contiguous(node, q)
        mem = self._cross_memory(node, ref)
        spec = node.attrs["spec"]
        shared = bool(node.attrs.get("shared", False))
        decl = ref.decl
        n, heads, dk = q.shape
        nkv, dv = decl.n_kv_heads, decl.v_dim
        if dk > 512:
            raise UnsupportedOperation(f"backend 'vulkan': cross_attention heads of {dk} values (at most 512)")
        params = [n, heads, nkv, dk, dv, self.off(q), self.off(node.out), mem.shape[1], self.seq_off, self.n_seq,
                  0, 0, f32_bits(spec.scale), f32_bits(spec.softcap or 0.0), 0, int(shared),
                  self.cross_off[ref.index], 0]  # fmt: skip
        self._emit(("attention", "cross", dv, dk), lambda: wgsl.attention("cross", dv, dk), params, n * heads,
                   binds=[("xk", ref.index), ("xv", ref.index)], label="cross_attention")  # fmt: skip
        self.cross_reads.append((ref.index, shared))

    # -- experts ---------------------------------------------------------------------------------

    def _scratch(self, words: int) -> int:
        """Element offset of ``words`` of per-run working memory after the constants (a
        kernel writes them before another reads them in the same run; nothing is uploaded)."""
        at = self._const_at
        self._const_at += -(-max(1, words) // 16) * 16
        return at

    def _whole(self, node, w) -> tuple:
        """A weight bound whole (an expert tensor: its rows are indexed by expert at run
        time, so it cannot be split into chunks as a product's rows are)."""
        n_rows = math.prod(w.shape[1:])
        if len(self._weight_chunks(w, n_rows)) > 1:
            raise UnsupportedOperation(
                f"backend 'vulkan': {node.op} weight {w.name!r} ({w.nbytes} bytes) exceeds one binding"
            )
        if w.shape[0] % 8:
            raise UnsupportedOperation(f"backend 'vulkan': {node.op} with rows of {w.shape[0]} values (8k needed)")
        return ("w", w, 0, w.buffer.size)

    def _op_moe(self, node) -> None:
        """Router logits, routing, the chosen experts' gated products, their weighted down
        projections: four dispatches of the wgsl.moe_* kernels, each expert weight read in
        its GGUF blocks; the routing's ids, weights and the products live in scratch
        memory after the constants."""
        x, router, gate, up, down, bias = node.args
        a = node.attrs
        r, g, u, d = (self.weights[w.name] for w in (router, gate, up, down))
        K = x.shape[-1]
        M = x.size // K
        E, F, D, k = r.shape[1], g.shape[1], d.shape[1], a["k"]
        if len(g.shape) != 3 or g.shape != u.shape or g.shape != (K, F, E) or d.shape != (F, D, E):
            raise ShapeError(f"moe: expert tensors {g.shape}, {u.shape}, {d.shape} do not fit together")
        if a["activation"] not in ("silu", "gelu"):
            raise UnsupportedOperation(f"backend 'vulkan': moe with {a['activation']!r} experts")
        bind_r, bind_g, bind_u, bind_d = (self._whole(node, w) for w in (r, g, u, d))
        xo, xs = self.off(x), self.stride(x)
        logits, ids, wts, h = self._scratch(M * E), self._scratch(M * k), self._scratch(M * k), self._scratch(M * k * F)
        self._emit(("moe_logits", r.ggml_type), lambda: wgsl.moe_logits(r.ggml_type),
                   [M * E, E, K, xo, xs, logits, r.row_bytes], -(-M * E // 64), binds=[bind_r], read_only=(2,),
                   label=f"moe router {r.ggml_type}")  # fmt: skip
        b = self.operand(bias) + 1 if bias is not None else 0
        scale = a["weight_scale"] if a["weight_scale"] is not None else 1.0
        self._emit(("moe_route",), wgsl.moe_route,
                   [M, E, k, logits, ids, wts, int(a["gating"] == "sigmoid"), b, int(bool(a["norm_topk"])),
                    f32_bits(scale)], -(-M // 64), label="moe route")  # fmt: skip
        types = (g.ggml_type, u.ggml_type)
        act = OPS["unary"].code("kind", a["activation"])
        self._emit(("moe_up", types), lambda: wgsl.moe_up(*types),
                   [M * k * F, F, K, xo, xs, ids, h, g.row_bytes, u.row_bytes, act, k], -(-M * k * F // 64),
                   binds=[bind_g, bind_u], read_only=(2, 3), label=f"moe experts {g.ggml_type}")  # fmt: skip
        self._emit(("moe_down", d.ggml_type), lambda: wgsl.moe_down(d.ggml_type),
                   [M * D, D, F, k, ids, wts, h, self.off(node.out), d.row_bytes], -(-M * D // 64),
                   binds=[bind_d], read_only=(2,), label=f"moe down {d.ggml_type}")  # fmt: skip

    # -- bind groups ---------------------------------------------------------------------------

    def _plan(self, state) -> record.Plan:
        """The bind groups of state (or of no state) with their raw handles, made once."""
        cached = self._state_bgs.get(state) if state is not None else self._static_bgs
        if cached is None:
            bgs = self._bind_groups(state)
            cached = record.Plan([d.pipe for d in self.dispatches], bgs, [d.groups for d in self.dispatches])
            if state is not None:
                self._state_bgs[state] = cached
            else:
                self._static_bgs = cached
        return cached

    def _bind_groups(self, state) -> list:
        dev = self.ctx.device
        out = []
        for i, d in enumerate(self.dispatches):
            entries = [
                {"binding": 0, "resource": {"buffer": self.params, "offset": i * self._stride, "size": 256}},
                {"binding": 1, "resource": {"buffer": self.arena, "offset": 0, "size": self.arena_bytes}},
            ]
            for j, b in enumerate(d.binds):
                if b[0] == "w":
                    res = {"buffer": b[1].buffer, "offset": b[2], "size": b[3]}
                elif b[0] in ("k", "v"):
                    kv = (state.k if b[0] == "k" else state.v)[b[1]]
                    res = {"buffer": kv.buffer, "offset": 0, "size": kv.buffer.size}
                elif b[0] in ("conv", "ssm"):
                    rec = (state.conv_state if b[0] == "conv" else state.ssm_state)[b[1]]
                    res = {"buffer": rec.buffer, "offset": 0, "size": rec.buffer.size}
                elif b[0] in ("xk", "xv"):
                    mem = (state.cross_k if b[0] == "xk" else state.cross_v)[b[1]]
                    res = {"buffer": mem.buffer, "offset": 0, "size": mem.buffer.size}
                else:
                    res = {"buffer": state.pos_buffer, "offset": 0, "size": state.pos_buffer.size}
                entries.append({"binding": 2 + j, "resource": res})
            out.append(dev.create_bind_group(layout=d.layout, entries=entries))
        return out

    # -- running ---------------------------------------------------------------------------------

    def _io(self, inputs: StepInputs, cross: dict) -> np.ndarray:
        io = np.zeros(self.io_words, np.uint32)
        for name, (at, count) in self.io.items():
            if name == "tokens":
                value = inputs.tokens
            elif name == "positions":
                value = inputs.positions
            elif name in inputs.extra:
                value = inputs.extra[name]
            else:
                raise ShapeError(f"graph input {name!r} was not supplied")
            t = self.graph.inputs[name]
            arr = np.asarray(value, np.int32 if t.dtype == "i32" else np.float32).reshape(-1)
            if arr.size != count:
                raise ShapeError(f"graph input {name!r} has {arr.size} values, the graph was built for {count}")
            io[at : at + count] = arr.view(np.uint32)
        n = self.n_seq
        groups = self.graph.layout.groups
        s = self.seq_off
        io[s : s + n] = np.asarray(inputs.slots, np.int64)
        io[s + n : s + 2 * n] = np.asarray(inputs.starts, np.int64)
        io[s + 2 * n : s + 3 * n] = [g[0] for g in groups]
        io[s + 3 * n : s + 4 * n] = [g[1] for g in groups]
        for i, at in self.cross_off.items():
            io[at : at + len(cross[i])] = cross[i]
        return io

    def _cross_lengths(self, state, inputs: StepInputs) -> dict:
        """The rows of cross-attention memory each slot holds after this pass, per memory
        the graph touches: the host's record with this pass's stores (each sequence's rows
        into its slot). A memory read from a slot that holds none is refused, as the CPU
        backend refuses it."""
        if not self.cross_stores and not self.cross_reads:
            return {}
        slots = np.asarray(inputs.slots)
        used = {*self.cross_stores, *(i for i, _ in self.cross_reads)}
        out = {i: state.cross_len[i].copy() for i in used}
        for i in self.cross_stores:
            for s, (_r0, n) in enumerate(self.graph.layout.groups):
                out[i][slots[s]] = n
        for i, shared in self.cross_reads:
            for slot in slots[:1] if shared else slots:
                if out[i][slot] <= 0:
                    raise SessionError(
                        f"cross_attention: sequence slot {int(slot)} holds no cross-attention memory (state {i}); "
                        f"store one first (an encoder pass)"
                    )
        return out

    def _check(self, state, inputs: StepInputs) -> None:
        if state_geometry(state) != self.geometry:
            raise SessionError(
                "this compiled graph was made for a state of another shape (context, slots or cache type)"
            )
        if self._vocab is None:
            # only the tables the token ids index (an encoder also looks up token types and
            # positions, whose tables are smaller than the vocabulary); 0: no such table
            self._vocab = min((self.weights[n.args[0].name].shape[1] for n in self.graph.nodes
                               if n.op == "embedding" and getattr(n.args[1], "name", None) == "tokens"),
                              default=0)  # fmt: skip
        if self._vocab:
            vocab = self._vocab
            toks = np.asarray(inputs.tokens)
            if toks.size and (toks.min() < 0 or toks.max() >= vocab):
                raise ShapeError(f"a token id of {toks.tolist()[:8]} is outside the embedding table of {vocab} rows")
        if state is not None:
            slots = np.asarray(inputs.slots)
            if slots.size and (slots.min() < 0 or slots.max() >= state.n_slots):
                raise ShapeError(f"a sequence slot of {slots.tolist()} is outside the state's {state.n_slots}")

    def run(self, state, inputs: StepInputs, profile: bool | None = None) -> dict[str, np.ndarray]:
        self._check(state, inputs)
        cross = self._cross_lengths(state, inputs)
        profile = self.backend.profile if profile is None else profile
        ctx = self.ctx
        with ctx.lock, self._lock:
            t0 = time.perf_counter()
            plan = self._plan(state)
            ready, self._ready = self._ready, None
            qs = None
            if profile and ctx.timestamps:
                enc = ctx.device.create_command_encoder()
                qs = self._record_profiled(enc, plan.bgs)
                commands = self._finish(enc)
            elif ready is not None and ready[0] is plan:
                commands = ready[1]
            else:
                commands = self._commands(plan)
            # written before the commands run, whenever they were recorded (queue order)
            ctx.queue.write_buffer(self.arena, 0, self._io(inputs, cross))
            t1 = time.perf_counter()
            ctx.queue.submit([commands])
            ctx.n_dispatch += len(self.dispatches)
            if qs is None:
                # the next run's commands, recorded while the device runs these: a decode
                # loop calls again with the same state, and the inputs are data
                self._ready = (plan, self._commands(plan))
            self.readback.map_sync(ctx.wgpu.MapMode.READ)
            try:
                # the outputs are copied once, out of the mapped memory itself (a copy of the
                # whole read-back first, then of each output, cost 3x as much: 195 against
                # 60 us for a 262k-value logits row on the development machine)
                out = self._outputs(self.readback.read_mapped(copy=False))
            finally:
                self.readback.unmap()
            if qs is not None:
                self._read_profile(qs)
            # host time recording the pass, and from the submission to the read-back
            self.timing = (t1 - t0, time.perf_counter() - t1)
            for i in self.cross_stores:  # the memories now hold this pass's rows
                state.cross_len[i][...] = cross[i]
        return out

    def _outputs(self, raw) -> dict[str, np.ndarray]:
        """Each declared output, copied out of the read-back bytes ``raw``."""
        out = {}
        for name, (_first, count, at, shape, (s, last), dtype) in self.out_spans.items():
            flat = np.frombuffer(raw, dtype, count=count, offset=at)
            rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
            if rows > 1 and s != last:
                flat = np.lib.stride_tricks.as_strided(flat, (rows, last), (s * 4, 4))
            out[name] = np.array(flat, copy=True).reshape(shape if self.graph.outputs[name].shape else ())
        return out

    def _commands(self, plan):
        """The command buffer of one run over plan's bind groups: the pass, then the
        outputs' copies into the read-back buffer."""
        enc = self.ctx.device.create_command_encoder()
        cp = enc.begin_compute_pass()
        plan.record(cp, self.record_mode)
        cp.end()
        return self._finish(enc)

    def _finish(self, enc):
        for _name, (first, count, at, *_rest) in self.out_spans.items():
            enc.copy_buffer_to_buffer(self.arena, first * 4, self.readback, at, count * 4)
        return enc.finish()

    # -- profiling ---------------------------------------------------------------------------------

    def _record_profiled(self, enc, bgs):
        """The dispatches with a timestamp before the first and after each: in the one
        pass of a run where the adapter allows timestamps inside passes (each dispatch's
        time is then the gap between its neighbours' stamps, barriers included, as in a
        run), else each dispatch in a pass of its own (which adds the cost of a pass)."""
        wgpu = self.ctx.wgpu
        n = len(self.dispatches)
        # every query of the set is written: resolving one never written waits for it
        chain = self.ctx.timestamps_in_pass
        count = n + 1 if chain else 2 * n
        qs = self.ctx.device.create_query_set(type=wgpu.QueryType.timestamp, count=count)
        if chain:
            cp = enc.begin_compute_pass()
            cp._write_timestamp(qs, 0)
            for i, (d, bg) in enumerate(zip(self.dispatches, bgs, strict=True)):
                cp.set_pipeline(d.pipe)
                cp.set_bind_group(0, bg)
                cp.dispatch_workgroups(d.groups[0], d.groups[1], 1)
                cp._write_timestamp(qs, i + 1)
            cp.end()
            self._profile_stamps = "chain"
        else:
            for i, (d, bg) in enumerate(zip(self.dispatches, bgs, strict=True)):
                cp = enc.begin_compute_pass(timestamp_writes={"query_set": qs, "beginning_of_pass_write_index": 2 * i,
                                                              "end_of_pass_write_index": 2 * i + 1})  # fmt: skip
                cp.set_pipeline(d.pipe)
                cp.set_bind_group(0, bg)
                cp.dispatch_workgroups(d.groups[0], d.groups[1], 1)
                cp.end()
            self._profile_stamps = "pairs"
        buf = self.ctx.buffer(8 * count, wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC, "timestamps")
        enc.resolve_query_set(qs, 0, count, buf, 0)
        return buf

    def _read_profile(self, buf) -> None:
        raw = np.frombuffer(bytes(self.ctx.queue.read_buffer(buf)), np.uint64).astype(np.int64)
        n = len(self.dispatches)
        ns = (np.diff(raw[: n + 1]) if self._profile_stamps == "chain" else raw[1::2] - raw[0::2]).clip(0)
        period = 1.0  # wgpu reports timestamps in nanoseconds
        self.last_profile = [(d.label, float(t) * period) for d, t in zip(self.dispatches, ns, strict=False)]

    def profile(self) -> list[tuple[str, int]]:
        """(kernel, ns) of every dispatch of the last profiled run."""
        return [(name, int(ns)) for name, ns in self.last_profile]


__all__ = ["VulkanExecutable", "grid", "state_geometry"]
