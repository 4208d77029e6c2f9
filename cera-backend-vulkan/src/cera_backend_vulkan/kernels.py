"""Which kernel variant takes a product or an attention, and how it is cut into
workgroups: the rules the compiler's passes (fusion.py, lower/) ask, from the adapter,
the tuning (tuning.py) and the pass's row mode.

The measurements behind the rules were taken on an NVIDIA H200, variants alternated run
by run; the tables are in benchmarks/README.md.
"""

from __future__ import annotations

from . import wgsl
from .tuning import MATMUL_KERNELS, ROW_KERNELS

MAX_GRID = 65535

# "auto-m32": 32-row tiles where 64-row ones would make fewer than MATMUL_SMALL_GRID
# workgroups (Qwen2.5 1.5B's 1536-feature products over 512 rows make 192, for the
# H200's 132 multiprocessors)
MATMUL_SMALL_GRID = 256

# the split kernels cut the depth (wgsl.matmul's splits, then wgsl.matmul_splits) where
# the grid has fewer than MATMUL_SPLIT_GRID workgroups (about 8 for each of the H200's
# 132 multiprocessors), into as many spans as bring it there, at most MATMUL_SPLITS, each
# of MATMUL_SPLIT_STEPS steps of 32 columns or more. Product by product
# (benchmarks/vulkan_matmul_sweep.py), those of 18-28 steps in all split in 2-3 spans of
# 8 or more (SmolLM2's and Gemma 3's q and gate/up, Qwen2.5 0.5B's q) were 10-30% slower
# than whole, and those of 48 steps or more (every down product, Qwen2.5 1.5B's q and o)
# 10-30% faster: hence spans of 16 steps or more. Over whole 512-token prompts the split
# form was +4% to +16% on Qwen2.5 0.5B, -4% to 0% on Qwen2.5 1.5B, -8% to -13% on Gemma 3
# and -3% to +3% on SmolLM2 against the unsplit one: not the default.
MATMUL_SPLIT_GRID = 1024
MATMUL_SPLITS = 8
MATMUL_SPLIT_STEPS = 16

# "unit*" row kernels with a fixed plan: features a group ("-wg": the whole workgroup)
UNIT_FEATS = {"unit": 2, "unit-f1": 1, "unit-f4": 4, "unit-wg1": 1, "unit-wg2": 2, "unit-wg4": 4}
# "unit-auto-c<C>": "unit-auto" with groups of C lanes of a subgroup wherever it gives a
# subgroup's features ("sub<C>"; "-c32": a whole subgroup); "unit-auto-cfit": the most
# lanes a group whose steps the row's units fill to UNIT_FIT or more (unit_cluster)
UNIT_CLUSTERS = {"unit-auto-c32": 32, "unit-auto-c16": 16, "unit-auto-c8": 8, "unit-auto-c4": 4, "unit-auto-cfit": 0}
UNIT_FIT = 0.8
# the variants that plan per shape (unit_plan's "unit-auto" rules), and those of them
# that may pass x through shared memory
UNIT_AUTO = ("unit-auto", "unit-auto-gx", "unit-auto-sx", *UNIT_CLUSTERS)
UNIT_AUTO_SHARED_X = ("unit-auto", "unit-auto-sx", *UNIT_CLUSTERS)
# "unit-auto" gives the wide products (32768 weight rows or more: the outputs) groups of
# unit_cluster's lanes from UNIT_WIDE_LANES: per output product (an alternated sweep of
# the row kernels on the real shapes at commit 43a9f9d) 129.9 us not 175.3 (Qwen2.5 1.5B, Q6_K, 48 units:
# 16 lanes), 21.6 not 31.0 (SmolLM2, Q8_0, 18 units: 4), 135.7 not 145.0 (Gemma 3, Q8_0,
# 20 units: 8), 103.1 not 109.2 (Qwen2.5 0.5B, Q8_0, 28 units: 16); the narrower products
# were as fast or faster with whole subgroups (Qwen2.5 1.5B's q/o 7.4 us against 8.9
# with 16 lanes), and so were whole tokens
UNIT_WIDE_LANES = 16

# the most bytes of x that unit-auto copies to a workgroup's shared memory (more would
# leave room for fewer workgroups on a multiprocessor)
SHARED_X_BYTES = 16384

# "subgroup-blk<L>": L lanes a feature (at most the subgroup's), 128 / L features a
# workgroup; "-v4": Q4_K weights read with 16-byte loads through a second, vec4 binding
BLK_LANES = {"subgroup-blk": 0, "subgroup-blk16": 16, "subgroup-blk8": 8, "subgroup-blk-v4": 0, "subgroup-blk16-v4": 16}

# attention_lanes splits a (row, head)'s cells over the tuning's att_split workgroups on
# a GPU where the cache holds ATT_SPLIT_MIN_CAP cells or more (flash-decoding: a decode
# step otherwise walks a long context's chunks in as many workgroups as it has heads)
ATT_SPLIT_MIN_CAP = 1024


def grid(n: int) -> tuple[int, int]:
    """Workgroups for n linear items on a 2-D grid (kernels use wgsl.GRID's wg_linear)."""
    n = max(1, int(n))
    if n <= MAX_GRID:
        return n, 1
    x = MAX_GRID
    return x, -(-n // x)


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
    wgsl.matvec_unit's ``pre_add``) and "unit-auto-sx" always (the groups reading x
    themselves made SmolLM2's and Qwen2.5 1.5B's decoded tokens 3-5% faster, Qwen2.5
    0.5B's the same: unit_shared_k). The widest products (the outputs) give a subgroup's
    features to groups of fewer lanes ("sub<C>", UNIT_WIDE_LANES), and "unit-auto-c*"
    (UNIT_CLUSTERS) every subgroup-wide product. ``segments``: the types are several
    products' (Q, K, V), N their features in all, one weight a feature."""
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


def unit_products(dot: str, group: str, types: tuple[str, ...], K: int, shared_bytes: int,
                  segments: bool = False) -> tuple[str, int]:  # fmt: skip
    """wgsl.matvec_unit's (``dot``, ``quant_k``) under the tuning's ``dot``: "f32" or "i8",
    and K where "i8-shared" quantizes x once a workgroup, else 0. Once a workgroup only
    where the workgroup holds several groups (not ``group`` "wg": a workgroup of one group
    quantizes each unit once either way, and the barrier and shared reads made Qwen2.5
    1.5B's Q4_K downs take 316 us a token, against 243 with each lane quantizing and 261
    in f32), every type has an integer decoder, and MV_ROWS rows of x's 8-bit units and
    their steps fit ``shared_bytes`` with a workgroup sum's slots. The choice does not
    depend on the rows of the pass: the two forms sum a fused norm's squares in different
    orders, and a batch row must be its one-row product bit for bit.

    Per decoded token (ms, variants alternated, commit a98d628): "i8" against "f32" took
    Qwen2.5 1.5B from 2.50-2.63 to 2.07-2.18, SmolLM2 from 1.43-1.45 to 1.32-1.37, Qwen2.5
    0.5B from 1.60 to 1.50, Gemma 3 from 1.37 to 1.38-1.45; "i8-shared" against "i8"
    Qwen2.5 1.5B 2.14-2.24 -> 2.05-2.08, Gemma 3 1.36-1.42 -> 1.26-1.30, SmolLM2
    1.37-1.39 -> 1.27-1.31, Qwen2.5 0.5B 1.35 -> 1.34-1.36: the default."""
    if dot == "f32":
        return dot, 0
    if dot != "i8-shared" or group == "wg" or not wgsl.int_unit_types(types, segments):
        return "i8", 0
    return "i8", K if quant_bytes(wgsl.MV_ROWS, K) <= shared_bytes else 0


def quant_bytes(rows: int, K: int, shared_k: int = 0) -> int:
    """The workgroup memory of wgsl.matvec_unit's ``quant_k``: ``rows`` rows of K 8-bit
    values and their steps, a workgroup sum's slots, and a float x of ``shared_k``."""
    return rows * K + rows * K // 8 + 4 * wgsl.MV_WG + rows * shared_k * 4


def matmul_splits(N: int, M: int, K: int, feats: int, tile_rows: int) -> int:
    """Spans of the depth a tiled product of N features, M rows and depth K is split
    into under the split kernels (1: none)."""
    groups = -(-N // wgsl.MATMUL_TILES[feats]) * -(-M // tile_rows)
    if groups >= MATMUL_SPLIT_GRID:
        return 1
    s = min(MATMUL_SPLITS, -(-MATMUL_SPLIT_GRID // groups), K // wgsl.TK // MATMUL_SPLIT_STEPS)
    return s if s >= 2 else 1


def mv_feats(R: int) -> int:
    """Output features a workgroup of the GPU row kernel computes (sharing x's loads):
    4 for one or two rows, 1 beyond (registers: rows x features sums)."""
    return 4 if R <= 2 else 1


def mv_rows(M: int) -> int:
    """Rows a row-kernel dispatch multiplies per pass over the weights, for M rows."""
    return 1 if M == 1 else 2 if M == 2 else 4 if M <= 4 else wgsl.MV_ROWS


class KernelChoice:
    """The kernel rules for one compile: the adapter (``ctx``), the tuning, the pass's row
    mode (`cera.graph.builder` layouts: 0 by the row count, 1 row-exact, 2 prompt rows), the
    backend's ``tiled`` (None: choose; True/False: force) and the state's cache type."""

    def __init__(self, ctx, tuning, row_mode: int, tiled: bool | None, kv_type: str):
        self.ctx = ctx
        self.tuning = tuning
        self.row_mode = row_mode
        self.force_tiled = tiled
        self.kv_type = kv_type
        name = tuning.row_kernel or ("subgroup" if ctx.software else "unit-auto")
        # the few-row kernel (tuning.ROW_KERNELS): "subgroup" on software adapters and
        # "unit-auto" on GPUs (the fastest decode step of the four real files' layouts
        # among the kernels, benchmarks/README.md: the products of types with a unit
        # decoder through the unit kernel, the others through workgroup-1pass)
        self.row_family, self.row_variant = name.partition("-")[0], name
        self.shared_bytes = int(ctx.limits["max-compute-workgroup-storage-size"])

    # -- products ------------------------------------------------------------------------------

    def tiled(self, M: int, K: int) -> bool:
        """Whether a product of M rows of K values takes the tiled kernel. A software
        adapter (lavapipe) runs a workgroup barrier as a switch between fibres: the
        barrier-free row kernel, 8 rows per pass over the weights, is faster there, and
        computes every row as a one-row product (so any row mode holds)."""
        if K % wgsl.TK:
            return False
        force = self.force_tiled
        if force is not None:
            return force and self.row_mode != 1
        if self.ctx.software:
            return False
        if self.row_mode == 1:
            return False
        if self.row_mode == 2:
            return True
        return M > wgsl.MV_ROWS

    @property
    def mv_sg(self) -> int:
        """With subgroups and a "subgroup" row kernel: features per workgroup of the
        barrier-free matvec (a subgroup each); else 0 (a workgroup per feature)."""
        if not self.ctx.subgroups or self.row_family != "subgroup":
            return 0
        return max(1, wgsl.MV_WG // self.ctx.subgroup_size)

    def unit(self, x_off: int, xs: int, K: int, N: int, types: tuple[str, ...], R: int,
             segments: bool = False) -> tuple | None:  # fmt: skip
        """unit_plan's (group, features a group, features a workgroup, shared_k) of
        wgsl.matvec_unit for a product of R rows of x (K values each, at x_off, xs apart)
        with weights of these types and N features under the row kernel; None where it
        does not apply: not a "unit*" kernel, no subgroups, or x not at a multiple of 4
        values (a fused norm's weight always is: a constant, placed at a multiple of 16)."""
        if not self.ctx.subgroups or K % 32 or x_off % 4 or xs % 4:
            return None
        if segments and not self.tuning.unit_segments:
            return None  # Q, K and V through the workgroup kernel's segments
        return unit_plan(self.row_variant, K, N, types, self.ctx.subgroup_size, R, self.shared_bytes, segments)

    def unit_products(self, group: str, types: tuple[str, ...], K: int, segments: bool = False) -> tuple[str, int]:
        """unit_products under the tuning's unit_dot and this adapter's workgroup memory."""
        return unit_products(self.tuning.unit_dot, group, types, K, self.shared_bytes, segments)

    @property
    def mv_span(self) -> int:
        """Groups of 8 columns a lane of the subgroup kernel takes per step (8: the
        block-wise kernel, wgsl.matvec_blk)."""
        return ROW_KERNELS[self.row_variant]

    def blk(self, K: int) -> bool:
        """Products of rows of K values take the block-wise kernel (wgsl.matvec_blk)."""
        return bool(self.mv_sg) and self.mv_span == 8 and K % 32 == 0

    @property
    def mv_blk(self) -> tuple[int, int]:
        """The block-wise kernel's (lanes a feature, 0: a subgroup; features a workgroup)."""
        lanes = BLK_LANES.get(self.row_variant, 0)
        if lanes:
            lanes = min(lanes, self.ctx.subgroup_size)
            return lanes, wgsl.MV_WG // lanes
        return 0, self.mv_sg

    @property
    def mv_vec(self) -> bool:
        """The block-wise kernel reads Q4_K through a vec4 view (wgsl.DQ32_VEC)."""
        return self.row_variant.endswith("-v4")

    def vec_binds(self, binds: list) -> tuple[list, tuple]:
        """matvec_blk(vec=True): binds with each vec4-viewed weight bound again, and the
        read-only bindings."""
        extra = [b for b in binds if wgsl.vec_view(b[1].ggml_type)] if self.mv_vec else []
        out = list(binds) + extra
        return out, tuple(range(2, 2 + len(out)))

    @property
    def mv_onepass(self) -> bool:
        """The workgroup kernel's sums all at once (wgsl.products._reduce_onepass)."""
        return (self.row_variant == "workgroup-1pass" or self.row_family == "unit") and bool(self.ctx.subgroups)

    def matmul_kernel(self, N: int, M: int, K: int) -> tuple[int, int, int, bool]:
        """(features a thread, rows a tile, spans of the depth, skew) of the tiled kernel
        (wgsl.matmul) for N features of M rows of depth K under the tuning's matmul. The
        default, "4x4-skew" (the weights' shared tile skewed against bank conflicts, the
        same bits), against "4x4" over 512-token prompts (benchmarks/vulkan_matmul_sweep.py,
        two rounds): Qwen2.5 1.5B +8% and +15%, Gemma 3 +10% and +48%, SmolLM2 +6% and +6%,
        Qwen2.5 0.5B -4% and +11%; "4x4" took Qwen2.5 1.5B's and 0.5B's prompts in 0.88
        and 0.78 of "4x8"'s time."""
        name = self.tuning.matmul
        if name == "auto-m32":
            small = -(-N // wgsl.MATMUL_TILES[4]) * -(-M // wgsl.TM) < MATMUL_SMALL_GRID
            return (4, 32, 1, False) if small else (4, wgsl.TM, 1, False)
        fn, tm, split, skew = MATMUL_KERNELS[name]
        splits = matmul_splits(N, M, K, fn, tm) if split else 1
        return fn, tm, splits, skew

    # -- attention -------------------------------------------------------------------------------

    @property
    def attention_kernel(self) -> str:
        return self.tuning.attention

    def lanes_fit(self, dk: int, dv: int) -> bool:
        """Whether wgsl.attention_lanes (and attention_tiles) take heads of dk, dv values
        over this state's cache: f16, multiples of 8, at most 256."""
        return self.kv_type == "f16" and dk % 8 == dv % 8 == 0 and max(dk, dv) <= 256

    def attention_tiles(self, n: int) -> bool:
        """Whether a pass of ``n`` rows takes wgsl.attention_tiles: under "tiles" unless
        its rows are row-exact; under "lanes" where the products are tiled for its rows
        (a prompt pass on a GPU: `tiled`'s rule without the depth)."""
        name = self.attention_kernel
        if name == "tiles":
            return self.row_mode != 1
        if name != "lanes" or self.ctx.software or self.row_mode == 1:
            return False
        return self.row_mode == 2 or n > wgsl.MV_ROWS

    def attention_split(self, n: int, cap: int) -> int:
        """Workgroups a (query row, head) of wgsl.attention_lanes splits its cells over:
        the tuning's att_split where the kernel is "lanes-split", or "lanes" on a GPU with
        a cache of ATT_SPLIT_MIN_CAP cells or more, for the passes whose rows are computed
        as one-token steps compute them (a few rows, or row-exact ones), so that a row's
        result does not depend on the pass it is in; else 1."""
        name = self.attention_kernel
        if name == "lanes-whole" or self.row_mode == 2 or (self.row_mode == 0 and n > wgsl.MV_ROWS):
            return 1
        if name == "lanes" and (self.ctx.software or cap < ATT_SPLIT_MIN_CAP):
            return 1
        return self.tuning.att_split

    @property
    def rope_subgroups(self) -> bool:
        """Whether rope's norm sums through subgroups (where the adapter has them, of 32
        threads or fewer, unless the tuning's rope_tree asks for the shared-memory tree)."""
        sgs = self.ctx.subgroup_size or 0
        return bool(self.ctx.subgroups) and 0 < sgs <= 32 and not self.tuning.rope_tree


__all__ = ["KernelChoice", "grid", "matmul_splits", "mv_feats", "mv_rows", "unit_cluster", "unit_plan",
           "unit_products", "unit_shared_k"]  # fmt: skip
