"""GGUF files taken apart, changed the way a hostile or broken file would be, and put back.

`Doc` is a file's parts (version, metadata with each value's type, tensor index, data);
`serialize` writes them back, and can lie: counts, lengths and type ids that disagree with
what follows. The mutators change one part each and say what they did:

- header: magic, version, tensor and key counts;
- metadata: values of other types or out of range (0, 1, negative, huge, NaN, infinities),
  keys dropped, duplicated, added, lying string and array lengths, element types;
- hyperparameters made inconsistent with each other and with the tensors (head counts
  that do not divide or do not match the shapes, zero or huge dimensions and lengths,
  context length 2^31, windows, expert counts, RoPE dimensions), tokenizer tables
  (missing or extra tokens, ids out of range, other tokenizer kinds), hostile templates;
- tensor index: dimensions (zero, huge, swapped, dropped, added), type ids (other types,
  unknown ids), offsets (misaligned, overlapping, past the end), names (renamed, duplicated,
  dropped);
- tensor data: bit flips, NaN and infinities in floats and in quantized blocks' scales;
- bytes: flips, lying fields at positions the serializer recorded, truncation, splices.

Every choice comes from a `random.Random` seeded by the case number, so a case number
reproduces its file exactly.
"""

from __future__ import annotations

import math
import random
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from cera.formats.gguf import GGUFFile

T = GGUFValueType
_SCALAR_FMT = {
    T.UINT8: "<B", T.INT8: "<b", T.UINT16: "<H", T.INT16: "<h", T.UINT32: "<I", T.INT32: "<i",
    T.FLOAT32: "<f", T.BOOL: "<?", T.UINT64: "<Q", T.INT64: "<q", T.FLOAT64: "<d",
}  # fmt: skip
_NP_TO_VT = {
    np.dtype("uint8"): T.UINT8, np.dtype("int8"): T.INT8, np.dtype("uint16"): T.UINT16, np.dtype("int16"): T.INT16,
    np.dtype("uint32"): T.UINT32, np.dtype("int32"): T.INT32, np.dtype("float32"): T.FLOAT32, np.dtype("bool"): T.BOOL,
    np.dtype("uint64"): T.UINT64, np.dtype("int64"): T.INT64, np.dtype("float64"): T.FLOAT64,
}  # fmt: skip

INTERESTING_INTS = [0, 1, 2, 3, 7, 8, 16, 31, 32, 33, 63, 64, 255, 256, 1000, 4096, 65535, 65536, 1 << 20, (1 << 31) - 1,
                    1 << 31, (1 << 32) - 1, 1 << 32, 1 << 40, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]  # fmt: skip
INTERESTING_FLOATS = [0.0, -0.0, 1.0, -1.0, 1e-30, -1e-6, 1e-45, 3.4e38, -3.4e38, 1e30, float("nan"), float("inf"),
                      float("-inf"), 0.5, 2.0, 1e6]  # fmt: skip
INT_TYPES = [T.UINT8, T.INT8, T.UINT16, T.INT16, T.UINT32, T.INT32, T.UINT64, T.INT64]


@dataclass
class KV:
    key: str
    vtype: GGUFValueType
    value: Any  # scalar, str, or (element type, list/array) for arrays
    raw_key: bytes | None = None  # a key that is not UTF-8


@dataclass
class TInfo:
    name: str
    dims: list[int]
    gtype: int
    offset: int


@dataclass
class Doc:
    version: int
    kvs: list[KV]
    tensors: list[TInfo]
    data: bytearray
    alignment: int = 32
    lies: dict = field(default_factory=dict)  # "n_tensors", "n_kv", "magic": what the header claims instead

    def kv(self, key: str) -> KV | None:
        return next((k for k in self.kvs if k.key == key), None)

    @property
    def arch(self) -> str:
        kv = self.kv("general.architecture")
        return kv.value if kv and isinstance(kv.value, str) else "llama"


def parse(path: Path) -> Doc:
    """A valid file's parts (read with cera's own reader: seeds are valid files)."""
    with GGUFFile(path) as g:
        kvs = []
        for key, value in g.metadata.items():
            vt = g.value_types[key]
            if vt == T.ARRAY:
                if isinstance(value, np.ndarray):
                    kvs.append(KV(key, vt, (_NP_TO_VT[value.dtype], value.copy())))
                elif all(isinstance(v, str) for v in value):
                    kvs.append(KV(key, vt, (T.STRING, list(value))))
                else:
                    continue  # arrays of arrays: not in the seeds
            else:
                kvs.append(KV(key, vt, value))
        tensors = [TInfo(t.name, list(t.shape), int(t.ggml_type), t.offset - g.data_offset) for t in g.tensors.values()]
        data = bytearray(g._map[g.data_offset :])
        return Doc(g.version, kvs, tensors, data, g.alignment)


# -- writing ------------------------------------------------------------------------------------


class _Out:
    def __init__(self):
        self.buf = bytearray()
        self.fields: list[tuple[int, int]] = []  # (position, size) of every scalar written

    def scalar(self, fmt: str, v) -> None:
        self.fields.append((len(self.buf), struct.calcsize(fmt)))
        self.buf += struct.pack(fmt, v)

    def string(self, s: str | bytes) -> None:
        b = s if isinstance(s, bytes) else s.encode("utf-8", "surrogateescape")
        self.scalar("<Q", len(b))
        self.buf += b


def _value(out: _Out, vt: GGUFValueType, value) -> None:
    if vt == T.STRING:
        out.string(value)
    elif vt == T.ARRAY:
        et, items = value
        out.scalar("<I", int(et))
        out.scalar("<Q", len(items))
        if et in _SCALAR_FMT and isinstance(items, np.ndarray):
            out.buf += np.asarray(items).astype(np.dtype(_SCALAR_FMT[et][1:]).newbyteorder("<")).tobytes()
        else:
            for item in items:
                _value(out, et, item)
    elif vt in _SCALAR_FMT:
        fmt = _SCALAR_FMT[vt]
        if vt in (T.FLOAT32, T.FLOAT64):
            out.scalar(fmt, float(value))
        elif vt == T.BOOL:
            out.scalar(fmt, bool(value))
        else:
            bits = struct.calcsize(fmt) * 8
            v = int(value)
            if fmt[1].islower():  # signed: wrap into range
                v = (v + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))
            else:
                v %= 1 << bits
            out.scalar(fmt, v)
    else:  # an unknown type id: its value is whatever bytes follow
        out.scalar("<I", int(value) if isinstance(value, int) else 0)


def serialize(doc: Doc) -> tuple[bytes, list[tuple[int, int]]]:
    """The file's bytes, and where each scalar field sits (for byte-level lies)."""
    out = _Out()
    out.buf += doc.lies.get("magic", b"GGUF")
    out.scalar("<I", doc.version)
    out.scalar("<Q", doc.lies.get("n_tensors", len(doc.tensors)))
    out.scalar("<Q", doc.lies.get("n_kv", len(doc.kvs)))
    for kv in doc.kvs:
        out.string(kv.raw_key if kv.raw_key is not None else kv.key)
        out.scalar("<I", int(kv.vtype))
        _value(out, kv.vtype, kv.value)
    for t in doc.tensors:
        out.string(t.name)
        out.scalar("<I", len(t.dims))
        for d in t.dims:
            out.scalar("<Q", d % (1 << 64))
        out.scalar("<I", t.gtype % (1 << 32))
        out.scalar("<Q", t.offset % (1 << 64))
    align = doc.alignment if doc.alignment > 0 and not doc.alignment & (doc.alignment - 1) else 32
    pad = (-len(out.buf)) % align
    out.buf += b"\0" * pad
    out.buf += doc.data
    return bytes(out.buf), out.fields


# -- mutators -------------------------------------------------------------------------------------


def _int_like(rng: random.Random, old: int | None = None) -> int:
    choice = rng.random()
    if choice < 0.6 or old is None:
        return rng.choice(INTERESTING_INTS)
    if choice < 0.8:
        return old + rng.choice([-1, 1, 2, -2, old, -old])
    return rng.randrange(0, 1 << rng.choice([8, 16, 32, 64]))


def _float_like(rng: random.Random) -> float:
    return rng.choice(INTERESTING_FLOATS) if rng.random() < 0.8 else rng.uniform(-1e6, 1e6)


def _hparam_keys(doc: Doc) -> list[KV]:
    prefix = doc.arch + "."
    return [k for k in doc.kvs if k.key.startswith(prefix)]


def m_hparam_value(rng, doc: Doc) -> str:
    """An `{arch}.*` value: interesting numbers, or another type altogether."""
    keys = _hparam_keys(doc) or doc.kvs
    kv = rng.choice(keys)
    r = rng.random()
    if kv.vtype in INT_TYPES and r < 0.7:
        kv.value = _int_like(rng, int(kv.value))
        kv.vtype = rng.choice([kv.vtype, kv.vtype, T.UINT64, T.INT32])
    elif kv.vtype in (T.FLOAT32, T.FLOAT64) and r < 0.7:
        kv.value = _float_like(rng)
    elif kv.vtype == T.ARRAY and r < 0.7:
        et, items = kv.value
        items = list(items) if not isinstance(items, np.ndarray) else items.copy()
        if len(items) and rng.random() < 0.5:
            i = rng.randrange(len(items))
            if et in INT_TYPES:
                items[i] = _int_like(rng) % 256 if et in (T.UINT8, T.INT8) else _int_like(rng) % (1 << 31)
            elif et in (T.FLOAT32, T.FLOAT64):
                items[i] = _float_like(rng)
        else:
            items = items[: rng.randrange(len(items) + 1)] if len(items) else items
        kv.value = (et, items)
    else:
        kv.vtype, kv.value = rng.choice(
            [(T.STRING, "x"), (T.FLOAT32, _float_like(rng)), (T.BOOL, True), (T.INT32, -1),
             (T.UINT64, _int_like(rng)), (T.ARRAY, (T.INT32, np.array([0, 1], np.int32))), (T.STRING, "")]
        )  # fmt: skip
    return f"hparam {kv.key} -> {kv.vtype.name} {str(kv.value)[:60]}"


CONSISTENCY = [
    ("attention.head_count", [0, 1, 3, 5, 7, 1000, 1 << 31]),
    ("attention.head_count_kv", [0, 3, 5, 7, 64, 1 << 31]),
    ("embedding_length", [0, 1, 3, 7, 65, 1 << 20, 1 << 40]),
    ("feed_forward_length", [0, 1, 3, 1 << 20]),
    ("block_count", [0, 1, 2, 3, 5, 100, 1 << 20, 1 << 32]),
    ("context_length", [0, 1, 2, 1 << 31, (1 << 32) - 1, 1 << 63]),
    ("vocab_size", [0, 1, 2, 1 << 31]),
    ("attention.key_length", [0, 1, 3, 1 << 20]),
    ("attention.value_length", [0, 1, 3, 1 << 20]),
    ("rope.dimension_count", [0, 1, 3, 1 << 20]),
    ("attention.sliding_window", [0, 1, 1 << 31]),
    ("attention.sliding_window_pattern", [0, 1, 1000]),
    ("expert_count", [0, 1, 1 << 20]),
    ("expert_used_count", [0, 1, 1000]),
    ("expert_feed_forward_length", [0, 1]),
    ("ssm.conv_kernel", [0, 1, 1 << 20]),
    ("ssm.state_size", [0, 1, 1 << 20]),
    ("ssm.inner_size", [0, 1, 1 << 20]),
    ("ssm.group_count", [0, 3, 1 << 20]),
    ("ssm.time_step_rank", [0, 1, 1 << 20]),
    ("shortconv.l_cache", [0, 1, 1 << 20]),
    ("logit_scale", [0.0, float("nan"), float("inf"), -1.0]),
    ("attention.layer_norm_rms_epsilon", [0.0, -1.0, float("nan"), float("inf"), 1e30]),
    ("rope.freq_base", [0.0, -1.0, float("nan"), float("inf"), 1e-30]),
    ("rope.scaling.factor", [0.0, -1.0, float("nan"), float("inf")]),
    ("attn_logit_softcapping", [0.0, -1.0, float("nan")]),
    ("final_logit_softcapping", [0.0, -1.0, float("nan")]),
    ("attention.scale", [0.0, float("nan"), float("inf")]),
    ("embedding_scale", [0.0, float("nan"), float("inf")]),
    ("residual_scale", [0.0, float("nan"), float("inf")]),
]


def m_inconsistent(rng, doc: Doc) -> str:
    """A hyperparameter that later arithmetic divides by, indexes with or allocates from,
    set to a value that disagrees with the others or with the tensors."""
    suffix, values = rng.choice(CONSISTENCY)
    key = f"{doc.arch}.{suffix}"
    value = rng.choice(values)
    kv = doc.kv(key)
    vtype = T.FLOAT32 if isinstance(value, float) else (T.UINT64 if value >= 1 << 32 else T.UINT32)
    if kv is None:
        doc.kvs.append(KV(key, vtype, value))
    elif kv.vtype == T.ARRAY:
        et, items = kv.value
        kv.value = (et, np.full(len(items), value % (1 << 31) if not isinstance(value, float) else 0, items.dtype)
                    if isinstance(items, np.ndarray) else items)  # fmt: skip
    else:
        kv.vtype, kv.value = vtype, value
    return f"inconsistent {key} = {value}"


def m_tokenizer(rng, doc: Doc) -> str:
    r = rng.randrange(10)
    tokens = doc.kv("tokenizer.ggml.tokens")
    if r == 9:  # a table retyped: a scalar, or an array of another element type
        key = rng.choice(["tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
                          "tokenizer.ggml.merges", "tokenizer.chat_templates"])  # fmt: skip
        kv = doc.kv(key)
        if kv is not None:
            kv.vtype, kv.value = rng.choice([(T.STRING, "<unk>"), (T.UINT32, 7), (T.FLOAT32, 0.5), (T.BOOL, True),
                                             (T.ARRAY, (T.INT32, np.arange(4, dtype=np.int32))),
                                             (T.ARRAY, (T.STRING, ["a", "b"])),
                                             (T.ARRAY, (T.FLOAT32, np.zeros(3, np.float32)))])  # fmt: skip
            return f"{key} retyped to {kv.vtype.name}"
    if r == 0:
        kv = doc.kv("tokenizer.ggml.model")
        if kv is not None:
            kv.value = rng.choice(["rwkv", "bert", "t5", "llama", "gpt2", "gemma4", "nope", ""])
            return f"tokenizer model -> {kv.value!r}"
    if r == 1 and tokens is not None:
        et, items = tokens.value
        cut = rng.randrange(len(items) + 1)
        tokens.value = (et, items[:cut])
        return f"vocabulary cut to {cut} tokens"
    if r == 2 and tokens is not None and len(tokens.value[1]):  # an earlier mutation may have emptied it
        et, items = tokens.value
        items = list(items)
        i = rng.randrange(len(items))
        items[i] = rng.choice(["", "\\", "\\x", "\\xzz", "a" * 100_000, "<|im_start|>", " ", "\u2581" * 64, "\udcff"])
        tokens.value = (et, items)
        return f"token {i} -> {items[i][:20]!r}"
    if r == 3:
        slot = rng.choice(["bos", "eos", "unknown", "padding", "eot", "sep", "eom"])
        key = f"tokenizer.ggml.{slot}_token_id"
        value = rng.choice([-1, 1 << 31, (1 << 32) - 1, 10**9, 0])
        kv = doc.kv(key)
        if kv is None:
            doc.kvs.append(KV(key, T.UINT32, value))
        else:
            kv.value, kv.vtype = value, rng.choice([T.UINT32, T.INT32, T.UINT64])
        return f"{key} = {value}"
    if r == 4:
        for key in ("tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
            kv = doc.kv(key)
            if kv is not None:
                et, items = kv.value
                items = np.array(items).copy()
                if len(items):
                    items[rng.randrange(len(items))] = (
                        rng.choice([-1, 99, 1 << 30]) if et in INT_TYPES else float("nan")
                    )
                    if rng.random() < 0.5:
                        items = items[: rng.randrange(len(items))]
                kv.value = (et, items)
                return f"{key} damaged"
    if r == 5:
        kv = doc.kv("tokenizer.ggml.merges")
        if kv is not None:
            et, items = kv.value
            items = list(items)
            if items:
                items[rng.randrange(len(items))] = rng.choice(["", " ", "a", "a b c", "Ġ Ġ", "\\ \\"])
            kv.value = (et, items)
            return "merges damaged"
    if r == 6:
        kv = doc.kv("tokenizer.ggml.pre")
        if kv is not None:
            kv.value = rng.choice(["", "nope", "qwen2", "llama-bpe", "gemma4", "default"])
            return f"pre -> {kv.value!r}"
    if r == 7:
        kv = doc.kv("tokenizer.ggml.precompiled_charsmap")
        value = np.frombuffer(rng.randbytes(rng.choice([0, 3, 8, 64, 1000])), np.uint8)
        if kv is None:
            doc.kvs.append(KV("tokenizer.ggml.precompiled_charsmap", T.ARRAY, (T.UINT8, value)))
        else:
            kv.value = (T.UINT8, value)
        return "precompiled charsmap random"
    for key in ("tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix", "tokenizer.ggml.add_eos_token"):
        if rng.random() < 0.5:
            kv = doc.kv(key)
            if kv is None:
                doc.kvs.append(KV(key, T.BOOL, True))
            else:
                kv.vtype, kv.value = rng.choice([(T.BOOL, not kv.value), (T.UINT8, 7), (T.STRING, "yes")])
            return f"{key} changed"
    return "tokenizer untouched"


def m_template(rng, doc: Doc, corpus: list[str]) -> str:
    src = rng.choice(corpus)
    kv = doc.kv("tokenizer.chat_template")
    if kv is None:
        doc.kvs.append(KV("tokenizer.chat_template", T.STRING, src))
    else:
        kv.vtype, kv.value = T.STRING, src
    return f"template -> {src[:60]!r}"


def m_keys(rng, doc: Doc) -> str:
    r = rng.randrange(6)
    if r == 0 and doc.kvs:
        kv = doc.kvs.pop(rng.randrange(len(doc.kvs)))
        return f"dropped {kv.key}"
    if r == 1 and doc.kvs:
        kv = rng.choice(doc.kvs)
        doc.kvs.append(KV(kv.key, kv.vtype, kv.value))
        return f"duplicated {kv.key}"
    if r == 2:
        key = f"{doc.arch}.{rng.choice(['mystery', 'rope.scaling.new', 'attention.flux'])}"
        doc.kvs.append(KV(key, T.UINT32, 1))
        return f"added {key}"
    if r == 3:
        kv = doc.kv("general.architecture")
        if kv is not None:
            kv.value = rng.choice(["", "llama", "qwen2", "gemma3", "mamba2", "lfm2", "nope", "silero-vad", "bert"])
            return f"architecture -> {kv.value!r}"
    if r == 4:
        kv = doc.kv("general.alignment")
        value = rng.choice([0, 1, 3, 8, 64, 1 << 20, 1 << 31])
        if kv is None:
            doc.kvs.append(KV("general.alignment", T.UINT32, value))
        else:
            kv.value = value
        return f"alignment -> {value}"
    if doc.kvs:
        kv = rng.choice(doc.kvs)
        kv.raw_key = rng.choice([b"", b"\xff\xfe", kv.key.encode() * 2, b"\0"])
        return f"key bytes of {kv.key} -> {kv.raw_key[:10]!r}"
    return "keys untouched"


def m_header(rng, doc: Doc) -> str:
    r = rng.randrange(4)
    if r == 0:
        doc.version = rng.choice([0, 1, 2, 4, 1 << 24, (1 << 32) - 1])
        return f"version {doc.version}"
    if r == 1:
        doc.lies["n_tensors"] = _int_like(rng, len(doc.tensors))
        return f"tensor count claims {doc.lies['n_tensors']}"
    if r == 2:
        doc.lies["n_kv"] = _int_like(rng, len(doc.kvs))
        return f"key count claims {doc.lies['n_kv']}"
    doc.lies["magic"] = rng.choice([b"GGUG", b"FUGG", b"\0\0\0\0", b"GGML"])
    return f"magic {doc.lies['magic']!r}"


def m_tensor_index(rng, doc: Doc) -> str:
    if not doc.tensors:
        return "no tensors"
    t = rng.choice(doc.tensors)
    r = rng.randrange(8)
    if r == 0:
        i = rng.randrange(len(t.dims)) if t.dims else 0
        if t.dims:
            t.dims[i] = rng.choice([0, 1, 2, t.dims[i] * 2, t.dims[i] + 32, 1 << 31, 1 << 40, (1 << 63) - 1, 1 << 63])
        return f"{t.name} dims -> {t.dims}"
    if r == 1:
        t.dims = list(reversed(t.dims)) if rng.random() < 0.5 else t.dims[:-1]
        return f"{t.name} dims -> {t.dims}"
    if r == 2:
        t.dims = t.dims + [rng.choice([1, 2, 0])] * rng.randrange(1, 4)
        return f"{t.name} dims -> {t.dims}"
    if r == 3:
        t.gtype = rng.choice([int(x) for x in GGMLQuantizationType] + [4, 5, 39, 40, 255, 1 << 31])
        return f"{t.name} type -> {t.gtype}"
    if r == 4:
        t.offset = rng.choice([t.offset + 1, t.offset + 32, 0, len(doc.data), len(doc.data) + 32, 1 << 40,
                               (1 << 64) - 32, rng.choice(doc.tensors).offset])  # fmt: skip
        return f"{t.name} offset -> {t.offset}"
    if r == 5:
        old = t.name
        t.name = rng.choice(["", "x", rng.choice(doc.tensors).name, t.name + ".extra", "blk.99.attn_q.weight",
                             "token_embd.weight", "output.weight", "a" * 70000])  # fmt: skip
        return f"renamed {old} -> {t.name[:40]}"
    if r == 6:
        doc.tensors.remove(t)
        return f"dropped tensor {t.name}"
    u = rng.choice(doc.tensors)
    t.dims, u.dims = u.dims, t.dims
    return f"swapped shapes of {t.name} and {u.name}"


def m_tensor_data(rng, doc: Doc) -> str:
    if not doc.tensors or not doc.data:
        return "no data"
    t = rng.choice(doc.tensors)
    try:
        gt = GGMLQuantizationType(t.gtype)
        block, size = GGML_QUANT_SIZES[gt]
    except (ValueError, KeyError):
        return "unknown type"
    n = 1
    for d in t.dims:
        n *= d
    nbytes = n // block * size
    start = t.offset
    if start + nbytes > len(doc.data) or nbytes == 0:
        return "no room"
    r = rng.randrange(4)
    if gt in (GGMLQuantizationType.F32, GGMLQuantizationType.F16) and r < 2:
        dt = np.float32 if gt == GGMLQuantizationType.F32 else np.float16
        view = np.frombuffer(doc.data, dtype=dt, count=nbytes // np.dtype(dt).itemsize, offset=start)
        view = view.copy()
        k = max(1, int(len(view) * rng.choice([0.0001, 0.01, 1.0])))
        idx = [rng.randrange(len(view)) for _ in range(min(k, 64))] if k < len(view) else slice(None)
        view[idx] = rng.choice([np.nan, np.inf, -np.inf, 65504.0, 1e38 if dt is np.float32 else 60000.0])
        doc.data[start : start + nbytes] = view.tobytes()
        return f"{t.name}: {k} values -> non-finite or huge"
    if r == 2 and gt not in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        # a block's leading f16 scale (d) to inf or NaN
        for _ in range(8):
            b = rng.randrange(nbytes // size)
            doc.data[start + b * size : start + b * size + 2] = rng.choice([b"\x00\x7c", b"\x00\x7e", b"\xff\x7b"])
        return f"{t.name}: block scales -> inf/NaN"
    for _ in range(rng.choice([1, 8, 64])):
        i = start + rng.randrange(nbytes)
        doc.data[i] ^= 1 << rng.randrange(8)
    return f"{t.name}: bit flips"


def m_bytes(rng, data: bytes, fields: list[tuple[int, int]]) -> tuple[bytes, str]:
    """Byte-level damage to a serialized file."""
    buf = bytearray(data)
    r = rng.randrange(5)
    if r == 0 and fields:
        pos, size = rng.choice(fields)
        v = _int_like(rng) % (1 << (8 * size))
        buf[pos : pos + size] = v.to_bytes(size, "little")
        return bytes(buf), f"field at {pos} ({size} bytes) -> {v}"
    if r == 1:
        for _ in range(rng.choice([1, 4, 32])):
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        return bytes(buf), "bit flips"
    if r == 2:
        cut = rng.randrange(len(buf))
        return bytes(buf[:cut]), f"truncated at {cut}"
    if r == 3:
        a = rng.randrange(len(buf))
        b = min(len(buf), a + rng.randrange(1, 256))
        chunk = buf[a:b]
        if rng.random() < 0.5:
            del buf[a:b]
        else:
            buf[a:a] = chunk
        return bytes(buf), f"splice at {a}..{b}"
    i = rng.randrange(max(1, len(buf) - 8))
    buf[i : i + 8] = struct.pack("<Q", rng.choice(INTERESTING_INTS) % (1 << 64))
    return bytes(buf), f"word at {i}"


def mutate(seed: Doc, case: int, corpus: list[str], data_mutations: bool = True) -> tuple[bytes, str]:
    """Case number ``case`` of a seed: 1-3 structured mutations, sometimes byte damage."""
    rng = random.Random(case)
    doc = Doc(seed.version, [KV(k.key, k.vtype, k.value, k.raw_key) for k in seed.kvs],
              [TInfo(t.name, list(t.dims), t.gtype, t.offset) for t in seed.tensors], bytearray(seed.data),
              seed.alignment, {})  # fmt: skip
    ops = [m_hparam_value, m_inconsistent, m_inconsistent, m_tokenizer, m_keys, m_header, m_tensor_index]
    weights = [3, 4, 4, 3, 2, 1, 3]
    if data_mutations:
        ops.append(m_tensor_data)
        weights.append(3)
    done = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        op = rng.choices(ops, weights)[0]
        done.append(op(rng, doc))
    if rng.random() < 0.1:
        done.append(m_template(rng, doc, corpus))
    data, fields = serialize(doc)
    if rng.random() < 0.2:
        data, what = m_bytes(rng, data, fields)
        done.append(what)
    return data, "; ".join(done)


def is_finite_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
