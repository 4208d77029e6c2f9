"""GGUF files: a validating, memory-mapped reader.

The format constants (value types, GGML tensor types, block sizes) come from the `gguf`
package, the format's reference implementation. The parsing is our own because the reader
must be safe on hostile input: every count, length and offset is checked against the bytes
that remain before anything is allocated, so a malformed file raises `InvalidModelFile`
naming the path, the byte offset and the problem, and never crashes, hangs or allocates
more than the file holds. (`gguf.GGUFReader` trusts the counts it reads and also builds a
numpy view per vocabulary string, which takes seconds on a 262k-token vocabulary.)

Tensor data is never copied: `GGUFFile.tensor_data` returns a read-only numpy view into
the memory map, in the tensor's stored (possibly quantized) form.
"""

from __future__ import annotations

import mmap
import os
import re
import stat
import struct
from pathlib import Path
from typing import Any

import attrs
import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from ..errors import InvalidModelFile

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ARRAY_NESTING = 4  # arrays of arrays exist in the spec; deeper nesting is hostile
INT64_MAX = (1 << 63) - 1  # ggml keeps dimensions and element counts in int64
# A tensor cannot hold more elements than this many per byte of the file: the densest GGML
# type (TQ1_0) stores about 4.7 elements per byte, so this only rejects absurd dimensions.
MAX_ELEMENTS_PER_BYTE = 64

# Fixed-size scalar value types: struct format and byte size.
_SCALARS: dict[GGUFValueType, str] = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
}
_NUMPY: dict[GGUFValueType, str] = {
    GGUFValueType.UINT8: "<u1",
    GGUFValueType.INT8: "<i1",
    GGUFValueType.UINT16: "<u2",
    GGUFValueType.INT16: "<i2",
    GGUFValueType.UINT32: "<u4",
    GGUFValueType.INT32: "<i4",
    GGUFValueType.FLOAT32: "<f4",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "<u8",
    GGUFValueType.INT64: "<i8",
    GGUFValueType.FLOAT64: "<f8",
}
# Smallest encoded size of one element of each value type, to bound counts before looping.
_MIN_SIZE = {t: struct.calcsize(f) for t, f in _SCALARS.items()}
_MIN_SIZE[GGUFValueType.STRING] = 8
_MIN_SIZE[GGUFValueType.ARRAY] = 12

# Numpy dtypes of the unquantized tensor types.
_PLAIN_DTYPES = {
    GGMLQuantizationType.F32: np.float32,
    GGMLQuantizationType.F16: np.float16,
    GGMLQuantizationType.F64: np.float64,
    GGMLQuantizationType.I8: np.int8,
    GGMLQuantizationType.I16: np.int16,
    GGMLQuantizationType.I32: np.int32,
    GGMLQuantizationType.I64: np.int64,
}


def ggml_type_name(t: int) -> str:
    try:
        return GGMLQuantizationType(t).name
    except ValueError:
        return f"type#{t}"


@attrs.frozen
class TensorInfo:
    """One entry of the tensor index.

    `shape` is in GGML order (ne0 first, the contiguous dimension); `numpy_shape` is the
    reverse. `offset` is absolute in the file.
    """

    name: str
    shape: tuple[int, ...]
    ggml_type: GGMLQuantizationType
    offset: int
    nbytes: int
    part: int = 0  # which file of a split model holds the data (0: the first)

    @property
    def type_name(self) -> str:
        return self.ggml_type.name

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def numpy_shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.shape))

    @property
    def block_size(self) -> int:
        return GGML_QUANT_SIZES[self.ggml_type][0]

    @property
    def row_bytes(self) -> int:
        """Bytes of one row (ne0 elements) in the stored form."""
        bs, ts = GGML_QUANT_SIZES[self.ggml_type]
        return (self.shape[0] // bs) * ts if self.shape else ts


class _Cursor:
    """Bounds-checked little-endian reads from a buffer, with offsets for error messages."""

    def __init__(self, buf, size: int, path: str):
        self.buf = buf
        self.size = size
        self.path = path
        self.pos = 0

    def fail(self, reason: str, at: int | None = None):
        raise InvalidModelFile(self.path, self.pos if at is None else at, reason)

    def need(self, n: int, what: str):
        if n < 0 or self.pos + n > self.size:
            self.fail(f"{what} needs {n} bytes but only {self.size - self.pos} remain (file truncated?)")

    def scalar(self, fmt: str, what: str):
        n = struct.calcsize(fmt)
        self.need(n, what)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return v

    def u32(self, what: str) -> int:
        return self.scalar("<I", what)

    def u64(self, what: str) -> int:
        return self.scalar("<Q", what)

    def string(self, what: str, errors: str = "surrogateescape") -> str:
        start = self.pos
        n = self.u64(f"length of {what}")
        if n > self.size - self.pos:
            self.fail(f"{what} claims {n} bytes but only {self.size - self.pos} remain", start)
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8", errors=errors)
        except UnicodeDecodeError as e:
            self.fail(f"{what} is not valid UTF-8 ({e.reason} at byte {e.start})", start)

    def count(self, what: str, min_elem_size: int) -> int:
        start = self.pos
        n = self.u64(what)
        if n * min_elem_size > self.size - self.pos:
            self.fail(
                f"{what} is {n}, which cannot fit in the {self.size - self.pos} bytes that remain",
                start,
            )
        return n


class GGUFFile:
    """A parsed GGUF file: metadata, tensor index, memory-mapped tensor data.

    Use as a context manager or call `close()`; tensor views keep the map alive.
    """

    def __init__(self, path: str | os.PathLike, _split_part: bool = False):
        self.path = Path(path)
        self._parts: list[GGUFFile] = []
        from ..errors import ModelNotFound

        try:
            # Non-blocking, so that opening a FIFO with no writer returns at once (and is then
            # refused below) instead of waiting forever for one.
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        except FileNotFoundError:
            raise ModelNotFound(f"{self.path}: no such file") from None
        except IsADirectoryError:
            raise InvalidModelFile(self.path, None, "is a directory, not a GGUF file") from None
        except OSError as e:  # permission denied, ...
            raise ModelNotFound(f"{self.path}: cannot open: {e.strerror or e}") from None
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise InvalidModelFile(self.path, None, "is a directory, not a GGUF file")
            if not stat.S_ISREG(st.st_mode):
                raise InvalidModelFile(
                    self.path, None, "is not a regular file (a pipe, socket or device); cera maps model files, "
                    "so give it a file on disk"
                )  # fmt: skip
            size = st.st_size
            if size == 0:
                raise InvalidModelFile(self.path, 0, "file is empty")
            try:
                self._map = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as e:
                raise InvalidModelFile(self.path, None, f"cannot be memory-mapped: {e}") from None
        finally:
            os.close(fd)
        self.file_size = size
        self.metadata: dict[str, Any] = {}
        self.value_types: dict[str, GGUFValueType] = {}
        self.tensors: dict[str, TensorInfo] = {}
        try:
            self._parse()
            if not _split_part:
                self._open_split_parts()
        except BaseException:
            self.close()
            raise

    def _open_split_parts(self) -> None:
        """A split model (llama.cpp's ``gguf-split``: ``name-00001-of-0000N.gguf``, keys
        ``split.no``/``split.count``) is opened from its first file; the other files' tensors
        join the index, their data mapped from their own files."""
        count = self.metadata.get("split.count", 0)
        if not isinstance(count, int) or count <= 1:
            return
        no = self.metadata.get("split.no", 0)
        m = re.match(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<n>\d{5})\.gguf$", self.path.name)
        if no != 0 or m is None or int(m["n"]) != count:
            raise InvalidModelFile(
                self.path, None,
                f"is part {no + 1} of a {count}-file split model; open the first part, "
                f"named like <name>-00001-of-{count:05d}.gguf",
            )  # fmt: skip
        for i in range(1, count):
            part_path = self.path.with_name(f"{m['stem']}-{i + 1:05d}-of-{count:05d}.gguf")
            if not part_path.exists():
                raise InvalidModelFile(self.path, None, f"split model part {part_path.name} is missing (next to {self.path.name})")
            part = GGUFFile(part_path, _split_part=True)
            self._parts.append(part)
            if part.metadata.get("split.no") != i or part.metadata.get("split.count") != count:
                raise InvalidModelFile(part_path, None, f"is not part {i + 1} of {count} (its split.no/split.count say otherwise)")
            for name, info in part.tensors.items():
                if name in self.tensors:
                    raise InvalidModelFile(part_path, info.offset, f"tensor {name!r} is also in an earlier part")
                self.tensors[name] = attrs.evolve(info, part=i)
        expected = self.metadata.get("split.tensors.count")
        if isinstance(expected, int) and expected != len(self.tensors):
            raise InvalidModelFile(self.path, None, f"split model lists {expected} tensors but its parts hold {len(self.tensors)}")

    # -- parsing -----------------------------------------------------------------

    def _parse(self) -> None:
        cur = _Cursor(self._map, self.file_size, str(self.path))
        cur.need(4, "magic")
        magic = bytes(self._map[0:4])
        if magic != GGUF_MAGIC:
            cur.fail(f"bad magic {magic!r}, expected {GGUF_MAGIC!r}: this is not a GGUF file")
        cur.pos = 4
        version = cur.u32("version")
        if version not in SUPPORTED_VERSIONS:
            swapped = struct.unpack("<I", struct.pack(">I", version))[0]
            if swapped in SUPPORTED_VERSIONS:
                cur.fail("big-endian GGUF files are not supported; convert the model on a little-endian machine", 4)
            if version == 1:
                cur.fail("GGUF version 1 is not supported; re-convert the model with a current gguf converter", 4)
            cur.fail(f"unsupported GGUF version {version} (supported: {SUPPORTED_VERSIONS})", 4)
        self.version = version
        n_tensors = cur.count("tensor count", 24)
        n_kv = cur.count("metadata key count", 13)
        key_offsets: dict[str, int] = {}

        for _ in range(n_kv):
            key_at = cur.pos
            key = cur.string("metadata key", errors="strict")
            if key in self.metadata:
                cur.fail(f"duplicate metadata key {key!r}", key_at)
            vtype = self._value_type(cur, f"type of {key!r}")
            self.metadata[key] = self._value(cur, vtype, key, 0)
            self.value_types[key] = vtype
            key_offsets[key] = key_at

        alignment = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if (
            not isinstance(alignment, int)
            or isinstance(alignment, bool)
            or alignment <= 0
            or alignment & (alignment - 1)
        ):
            cur.fail(f"general.alignment {alignment!r} is not a power of two", key_offsets.get("general.alignment"))
        self.alignment = alignment

        infos = []
        names: set[str] = set()
        # A tensor can hold no more elements than this; see MAX_ELEMENTS_PER_BYTE.
        max_elements = self.file_size * MAX_ELEMENTS_PER_BYTE
        for _ in range(n_tensors):
            at = cur.pos
            name = cur.string("tensor name", errors="strict")
            if name in names:
                cur.fail(f"duplicate tensor name {name!r}", at)
            names.add(name)
            n_dims = cur.u32(f"dimension count of tensor {name!r}")
            if n_dims > MAX_DIMS:
                cur.fail(f"tensor {name!r} has {n_dims} dimensions (at most {MAX_DIMS} allowed)", at)
            # ggml gives a tensor of no dimensions one element (every ne[i] defaults to 1)
            dims = tuple(cur.u64(f"dimension of tensor {name!r}") for _ in range(n_dims)) or (1,)
            type_at = cur.pos
            raw_type = cur.u32(f"type of tensor {name!r}")
            try:
                gtype = GGMLQuantizationType(raw_type)
                block, type_size = GGML_QUANT_SIZES[gtype]
            except (ValueError, KeyError):
                cur.fail(f"tensor {name!r} has unknown GGML type id {raw_type}", type_at)
            offset = cur.u64(f"data offset of tensor {name!r}")
            # Bound the product of the non-zero dimensions too: a zero dimension makes the
            # tensor empty, but huge dimensions beside it would still break shape arithmetic.
            n_el = 1
            nonzero_product = 1
            for d in dims:
                n_el *= d
                nonzero_product *= max(d, 1)
                if d > INT64_MAX or nonzero_product > max_elements:
                    cur.fail(
                        f"tensor {name!r} has dimensions {dims} that cannot fit in a {self.file_size}-byte file", at
                    )
            if n_el % block or (dims and dims[0] % block):
                cur.fail(
                    f"tensor {name!r} of type {gtype.name} has row length {dims[0] if dims else 1}, "
                    f"not a multiple of its block size {block}",
                    at,
                )
            infos.append((name, dims, gtype, offset, n_el // block * type_size, at))

        data_start = -(-cur.pos // alignment) * alignment
        self.data_offset = data_start
        for name, dims, gtype, offset, nbytes, at in infos:
            if offset % alignment:
                raise InvalidModelFile(
                    self.path, at, f"tensor {name!r} data offset {offset} is not aligned to {alignment}"
                )
            start = data_start + offset
            if start + nbytes > self.file_size:
                raise InvalidModelFile(
                    self.path,
                    at,
                    f"tensor {name!r} data ({nbytes} bytes at {start}) runs past the end of the "
                    f"file ({self.file_size} bytes): the file is truncated or corrupt",
                )
            self.tensors[name] = TensorInfo(name, dims, gtype, start, nbytes)

    def _value_type(self, cur: _Cursor, what: str) -> GGUFValueType:
        at = cur.pos
        raw = cur.u32(what)
        try:
            return GGUFValueType(raw)
        except ValueError:
            cur.fail(f"{what} is unknown value type id {raw}", at)

    def _value(self, cur: _Cursor, vtype: GGUFValueType, key: str, depth: int) -> Any:
        if vtype == GGUFValueType.STRING:
            return cur.string(f"value of {key!r}")
        if vtype in _SCALARS:
            v = cur.scalar(_SCALARS[vtype], f"value of {key!r}")
            return v
        # array
        if depth >= MAX_ARRAY_NESTING:
            cur.fail(f"{key!r} nests arrays deeper than {MAX_ARRAY_NESTING}")
        etype = self._value_type(cur, f"element type of {key!r}")
        n = cur.count(f"element count of {key!r}", _MIN_SIZE[etype])
        if etype in _NUMPY:
            dt = np.dtype(_NUMPY[etype])
            arr = np.frombuffer(self._map, dtype=dt, count=n, offset=cur.pos).copy()
            cur.pos += n * dt.itemsize
            return arr
        if etype == GGUFValueType.STRING:
            return self._string_array(cur, n, key)
        return [self._value(cur, etype, key, depth + 1) for _ in range(n)]

    def _string_array(self, cur: _Cursor, n: int, key: str) -> list[str]:
        # The hot loop of opening a file: vocabularies hold up to a few hundred thousand strings.
        buf, size, pos = self._map, self.file_size, cur.pos
        unpack = struct.Struct("<Q").unpack_from
        out = []
        append = out.append
        for i in range(n):
            if pos + 8 > size:
                cur.pos = pos
                cur.fail(f"element {i} of {key!r} is truncated")
            (ln,) = unpack(buf, pos)
            pos += 8
            if ln > size - pos:
                cur.pos = pos - 8
                cur.fail(f"element {i} of {key!r} claims {ln} bytes but only {size - pos} remain")
            append(buf[pos : pos + ln].decode("utf-8", "surrogateescape"))
            pos += ln
        cur.pos = pos
        return out

    # -- access -------------------------------------------------------------------

    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str) or not arch:
            raise InvalidModelFile(self.path, None, "metadata has no general.architecture string")
        return arch

    @property
    def name(self) -> str | None:
        v = self.metadata.get("general.name")
        return v if isinstance(v, str) else None

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def get_array(self, key: str, of: type | tuple = str, default: Any = None) -> list | None:
        """The array under ``key`` (items of type ``of``), ``default`` when absent, and
        `InvalidModelFile` naming the key when it holds anything else (a scalar, another
        item type)."""
        return array_value(self.metadata, key, of, self.path, default)

    def arch_key(self, suffix: str) -> str:
        return f"{self.architecture}.{suffix}"

    def arch_get(self, suffix: str, default: Any = None) -> Any:
        return self.metadata.get(self.arch_key(suffix), default)

    def tensor_data(self, name: str) -> np.ndarray:
        """A read-only view of a tensor's bytes in its stored form.

        Plain types (F32, F16, I32, ...) come back with their dtype and numpy shape; BF16 as
        uint16; block-quantized types as uint8 with shape numpy_shape[:-1] + (row_bytes,).
        """
        info = self.tensors[name]
        buf = self._map if info.part == 0 else self._parts[info.part - 1]._map
        if info.ggml_type in _PLAIN_DTYPES:
            dt = np.dtype(_PLAIN_DTYPES[info.ggml_type])
            return np.frombuffer(buf, dtype=dt, count=info.n_elements, offset=info.offset).reshape(info.numpy_shape)
        if info.ggml_type == GGMLQuantizationType.BF16:
            return np.frombuffer(buf, dtype=np.uint16, count=info.n_elements, offset=info.offset).reshape(
                info.numpy_shape
            )
        raw = np.frombuffer(buf, dtype=np.uint8, count=info.nbytes, offset=info.offset)
        return raw.reshape(info.numpy_shape[:-1] + (info.row_bytes,))

    def parameter_count(self) -> int:
        return sum(t.n_elements for t in self.tensors.values())

    def close(self) -> None:
        for part in getattr(self, "_parts", ()):
            part.close()
        m = getattr(self, "_map", None)
        if m is not None:
            try:
                m.close()
            except BufferError:
                # numpy views still reference the map; it closes when they are collected.
                pass
            self._map = None

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GGUFFile({str(self.path)!r}, arch={self.metadata.get('general.architecture')!r}, tensors={len(self.tensors)})"


def array_value(meta: dict, key: str, of: type | tuple, path, default: Any = None):
    """``meta[key]`` checked to be an array of ``of`` items (see `GGUFFile.get_array`)."""
    value = meta.get(key)
    if value is None:
        return default
    kinds = of if isinstance(of, tuple) else (of,)
    if isinstance(value, np.ndarray):
        ok = value.ndim == 1 and any(
            (k is int and value.dtype.kind in "iu") or (k is float and value.dtype.kind == "f") for k in kinds
        )
    else:
        ok = isinstance(value, list) and (not value or isinstance(value[0], kinds) and isinstance(value[-1], kinds))
    if not ok:
        got = type(value).__name__ if not isinstance(value, (list, np.ndarray)) else "an array of other items"
        names = " or ".join(k.__name__ for k in kinds)
        raise InvalidModelFile(path, None, f"{key} should be an array of {names}, but holds {got}")
    return value


def open_gguf(path: str | os.PathLike) -> GGUFFile:
    return GGUFFile(path)
