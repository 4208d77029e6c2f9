"""The Vulkan backend's tuning: which kernel variants it runs, as one typed value.

Every choice has a default, the fastest measured (the backend's README gives the
measurements); each can be changed through its ``CERA_VULKAN_*`` environment variable,
for measuring one kernel against another (the benchmarks' sweeps do) or for running a
variant on an adapter that would not choose it (the tests do). `VulkanTuning.from_env`
reads and checks them all in one place: a bad value is a `BadSwitch` naming the
variable, the value and the choices, never a silent default.

The tuning is part of the compile key (`VulkanBackend.compile_key`): a graph compiled
under one tuning is never reused under another. Two fields act when the device opens
(once a process and adapter: `device.GpuContext`) and not per compile: ``subgroups``
and ``shader_checks``; ``record`` picks how each run records its pass (record.py).
"""

from __future__ import annotations

import os

import attrs

from cera.errors import InvalidOptions, UnsupportedOperation


class BadSwitch(InvalidOptions, UnsupportedOperation):
    """A tuning value outside its choices (a ``CERA_VULKAN_*`` variable, or a field of
    `VulkanTuning` set in code)."""


# the few-row (decode) products' kernels: the value is the span of the subgroup kernels
# (groups of 8 columns a lane takes a step; 8: the block-wise kernel; 0: a workgroup
# kernel). "workgroup*": wgsl.matvec, a workgroup of 128 threads per 4 features
# ("-1pass": one shared-memory pass for all its sums); "subgroup*": wgsl.matvec_sg, a
# subgroup per feature and no barrier, each lane taking 1, 2 or 4 consecutive groups of 8
# columns a step; "subgroup-blk*": wgsl.matvec_blk, a subgroup per feature, each lane
# decoding 32 columns at once with whole-word loads (K a multiple of 32; else
# "subgroup"); "unit*": wgsl.matvec_unit (kernels.unit_plan says which shapes it takes)
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

# the tiled (prefill) products' kernels: (features a thread, rows a tile, depth split,
# skew) of wgsl.matmul; "auto-m32" takes 32-row tiles where 64-row ones would make fewer
# than kernels.MATMUL_SMALL_GRID workgroups, else 4x4
MATMUL_KERNELS = {
    "4x4": (4, 64, False, False),
    "4x8": (8, 64, False, False),
    "4x4-m32": (4, 32, False, False),
    "auto-m32": None,
    "4x4-split": (4, 64, True, False),
    "4x4-skew": (4, 64, False, True),
    "4x4-skew-split": (4, 64, True, True),
}
MATMUL_DEFAULT = "4x4-skew"

# the cached attention's kernels: "lanes" (wgsl.attention_lanes, f16 caches with heads of
# at most 256 values; the others take "chunked"), its cells split over att_split
# workgroups a (row, head) where the cache is long on a GPU; "lanes-whole" never split,
# "lanes-split" always (where the rows allow); "tiles" (wgsl.attention_tiles) for every
# pass but the row-exact ones; "chunked" (wgsl.attention). kernels.attention_split and
# attention_tiles give the rules.
ATTENTION_KERNELS = ("lanes", "lanes-whole", "lanes-split", "tiles", "chunked")

# the unit kernel's products (wgsl.matvec_unit's ``dot``): "f32", x as the pass holds it;
# "i8", x quantized to 8 bits a unit by each lane and multiplied with dot4I8Packed (other
# values than f32's, within the suite's tolerance, as llama.cpp's integer products round
# x too); "i8-shared", the same values, x quantized once a workgroup into shared memory
# where kernels.unit_products allows it, else as "i8"
UNIT_DOTS = ("f32", "i8", "i8-shared")

ATT_SPLIT = 16  # attention_lanes' workgroups a (row, head) where it splits a long cache
RECORD_MODES = ("c", "raw", "wgpu")  # record.py
SHADER_CHECKS = ("bounds", "loops")  # device.py

_FLAG = {"0": False, "1": True}


def _choice(choices):
    def parse(raw: str, label: str):
        if raw not in choices:
            raise BadSwitch(f"backend 'vulkan': {label} is not one of {', '.join(choices)}")
        return raw

    return parse


def _flag(raw: str, label: str) -> bool:
    if raw not in _FLAG:
        raise BadSwitch(f"backend 'vulkan': {label} is not 0 or 1")
    return _FLAG[raw]


def _att_split(raw: str, label: str) -> int:
    if not raw.isdigit() or not 2 <= int(raw) <= 64:
        raise BadSwitch(f"backend 'vulkan': {label} is not a whole number from 2 to 64")
    return int(raw)


def _shader_checks(raw: str, label: str) -> tuple[str, ...]:
    raw = raw.lower()
    if raw == "none":
        return ()
    if raw == "all":
        return SHADER_CHECKS
    names = tuple(n.strip() for n in raw.split(",") if n.strip())
    bad = [n for n in names if n not in SHADER_CHECKS]
    if bad:
        raise BadSwitch(
            f"backend 'vulkan': {label}: unknown check(s) {', '.join(map(repr, bad))}; "
            f"use none, all, or a comma-separated list of {', '.join(SHADER_CHECKS)}"
        )
    return tuple(n for n in SHADER_CHECKS if n in names)


def _switch(env: str, parse, default, text=str):
    """A field read from ``env`` by ``parse`` (raw text, label) -> value; ``text`` turns a
    value set in code back into the text ``parse`` checks."""

    def check(inst, attribute, value):
        if value is not None or default is not None:
            parse(text(value), f"tuning {attribute.name}={value!r}")

    return attrs.field(default=default, validator=check, metadata={"env": env, "parse": parse})


def _flag_text(v) -> str:
    return {False: "0", True: "1"}.get(v, repr(v))


@attrs.frozen
class VulkanTuning:
    """The kernel variants the Vulkan backend compiles to (module docstring). ``None``
    for ``row_kernel`` and ``record`` lets the adapter choose: "subgroup" rows on
    software adapters and "unit-auto" on GPUs; the C recorder where it was built."""

    row_kernel: str | None = _switch("CERA_VULKAN_ROW_KERNEL", _choice(ROW_KERNELS), None)
    matmul: str = _switch("CERA_VULKAN_MATMUL", _choice(MATMUL_KERNELS), MATMUL_DEFAULT)
    attention: str = _switch("CERA_VULKAN_ATTENTION", _choice(ATTENTION_KERNELS), "lanes")
    att_split: int = _switch(
        "CERA_VULKAN_ATT_SPLIT", _att_split, ATT_SPLIT, lambda v: str(v) if type(v) is int else repr(v)
    )
    unit_dot: str = _switch("CERA_VULKAN_UNIT_DOT", _choice(UNIT_DOTS), "i8-shared")
    # Q, K and V through the unit kernel's segments in one dispatch (0: through the
    # workgroup kernel's segments)
    unit_segments: bool = _switch("CERA_VULKAN_UNIT_SEGMENTS", _flag, True, _flag_text)
    # kv_store folded into the keys' rope dispatch (0: apart)
    fold_kv: bool = _switch("CERA_VULKAN_FOLD_KV", _flag, True, _flag_text)
    # a sandwich norm's add computed by the unit kernel that reads its sum (0: apart)
    fuse_sandwich: bool = _switch("CERA_VULKAN_FUSE_SANDWICH", _flag, True, _flag_text)
    # a decode step's rope pair done by its attention kernel (0: a dispatch of its own)
    rope_attention: bool = _switch("CERA_VULKAN_ROPE_ATTENTION", _flag, True, _flag_text)
    # rope's per-head norm summed by a shared-memory tree even with subgroups (1)
    rope_tree: bool = _switch("CERA_VULKAN_ROPE_TREE", _flag, False, _flag_text)
    record: str | None = _switch("CERA_VULKAN_RECORD", _choice(RECORD_MODES), None)
    # subgroup operations used where the adapter has them (0: never; read when the device opens)
    subgroups: bool = _switch("CERA_VULKAN_SUBGROUPS", _flag, True, _flag_text)
    # wgpu's runtime checks compiled into every kernel (read when the device opens)
    shader_checks: tuple[str, ...] = _switch("CERA_VULKAN_SHADER_CHECKS", _shader_checks, (),
                                             lambda v: ",".join(v) if isinstance(v, tuple) else repr(v) or "none")  # fmt: skip

    @classmethod
    def from_env(cls, environ=None) -> VulkanTuning:
        """The tuning the ``CERA_VULKAN_*`` variables of ``environ`` (os.environ) ask for;
        unset or empty: the default. Parsed once per set of values."""
        env = os.environ if environ is None else environ
        raw = tuple(env.get(f.metadata["env"], "").strip() for f in _FIELDS)
        cached = _parsed.get(raw)
        if cached is None:
            values = {}
            for f, text in zip(_FIELDS, raw, strict=True):
                if text:
                    values[f.name] = f.metadata["parse"](text, f"{f.metadata['env']}={text!r}")
            cached = cls(**values)
            if len(_parsed) < 64:
                _parsed[raw] = cached
        return cached

    @property
    def compile_part(self) -> tuple:
        """The fields a compile reads (those the device reads when it opens are left out)."""
        return attrs.astuple(self, filter=lambda a, _v: a.name not in ("subgroups", "shader_checks"))


def switch(name: str, environ=None):
    """One field of the tuning from its variable alone (the device reads its two when it
    opens, so that a bad compile switch fails the first pass, not the load)."""
    env = os.environ if environ is None else environ
    f = getattr(_FIELDS, name)
    text = env.get(f.metadata["env"], "").strip()
    return f.metadata["parse"](text, f"{f.metadata['env']}={text!r}") if text else f.default


_FIELDS = attrs.fields(VulkanTuning)
_parsed: dict[tuple, VulkanTuning] = {}

ENV_NAMES = tuple(f.metadata["env"] for f in _FIELDS)

__all__ = ["ATTENTION_KERNELS", "BadSwitch", "ENV_NAMES", "MATMUL_KERNELS", "ROW_KERNELS", "UNIT_DOTS", "VulkanTuning", "switch"]
