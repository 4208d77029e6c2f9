"""Read PyTorch's legacy (pre-1.6, not zip) checkpoint format without torch, safely.

``torch.save`` before PyTorch 1.6 wrote five things one after another: a pickled magic
number, a pickled protocol version (1001), pickled system information, the pickled object
(tensors appear in it as ``torch._utils._rebuild_tensor_v2(storage, offset, size,
stride, ...)``, storages as persistent ids ``("storage", type, key, location, numel)``),
a pickled list of storage keys, and then each storage's bytes in that order, each behind
an 8-byte little-endian element count.

This reader unpickles with an allowlist: the only globals it resolves are the tensor
rebuild function, the float storage types, ``collections.OrderedDict`` and
``torch.Size``; any other global (code a hostile file would run) is refused by name.
Tensors come back as float32 numpy arrays with their PyTorch shapes.
"""

from __future__ import annotations

import collections
import io
import os
import pickle
import struct
from pathlib import Path

import numpy as np

from cera.errors import CeraError

MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001

# storage type name -> (numpy dtype of its elements)
_STORAGES = {
    "FloatStorage": np.dtype("<f4"),
    "DoubleStorage": np.dtype("<f8"),
    "HalfStorage": np.dtype("<f2"),
    "LongStorage": np.dtype("<i8"),
    "IntStorage": np.dtype("<i4"),
}


class CheckpointError(CeraError):
    """A file that is not a PyTorch legacy checkpoint this reader understands."""


class _StorageType:
    def __init__(self, name: str):
        self.name = name
        self.dtype = _STORAGES[name]


class _Storage:
    def __init__(self, dtype: np.dtype, numel: int):
        self.dtype = dtype
        self.numel = numel
        self.data: np.ndarray | None = None


class _TensorStub:
    """A tensor waiting for its storage's bytes (they come after the pickle)."""

    def __init__(self, storage: _Storage, offset: int, size: tuple, stride: tuple):
        self.storage, self.offset, self.size, self.stride = storage, int(offset), tuple(size), tuple(stride)

    def array(self, where: str) -> np.ndarray:
        data = self.storage.data
        if data is None:
            raise CheckpointError(f"{where}: a tensor's storage has no data in the file")
        if not self.size:
            return np.array(data[self.offset], dtype=np.float32)
        itemsize = data.itemsize
        last = self.offset + sum((n - 1) * s for n, s in zip(self.size, self.stride, strict=True))
        if self.offset < 0 or last >= len(data) or any(s < 0 for s in self.stride):
            raise CheckpointError(f"{where}: a tensor of size {self.size} reaches outside its storage of {len(data)}")
        view = np.lib.stride_tricks.as_strided(
            data[self.offset :], shape=self.size, strides=tuple(s * itemsize for s in self.stride), writeable=False
        )
        return np.array(view, dtype=np.float32)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, *rest):
    if not isinstance(storage, _Storage):
        raise CheckpointError("a tensor is built from something that is not a storage")
    return _TensorStub(storage, storage_offset, size, stride)


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, where: str, storages: dict):
        super().__init__(file)
        self.where = where
        self.storages = storages

    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor_v2
        if module == "torch" and name in _STORAGES:
            return _StorageType(name)
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch", "Size"):
            return tuple
        raise CheckpointError(
            f"{self.where}: the checkpoint refers to {module}.{name}, which a weights file does not need; "
            f"it is refused (unpickling it could run code)"
        )

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage"):
            raise CheckpointError(f"{self.where}: unknown persistent id {pid!r:.80}")
        _, stype, key, _location, numel = pid[:5]
        if not isinstance(stype, _StorageType):
            raise CheckpointError(f"{self.where}: storage {key!r} has an unsupported type")
        if len(pid) > 5 and pid[5] is not None:
            raise CheckpointError(f"{self.where}: storage views are not supported")
        if key not in self.storages:
            self.storages[key] = _Storage(stype.dtype, int(numel))
        return self.storages[key]


def _flatten(obj, where: str, prefix: str = "") -> dict[str, np.ndarray]:
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(_flatten(v, where, f"{prefix}{k}."))
    elif isinstance(obj, _TensorStub):
        out[prefix[:-1]] = obj.array(where)
    return out


def read_legacy_checkpoint(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    """The unpickled object (tensors as stubs replaced by nothing) and every tensor in it
    by its dotted path (``"model_state.lstm.weight_ih_l0"``), as float32 arrays."""
    path = Path(path)
    where = str(path)
    if not path.is_file():
        raise CheckpointError(f"{where}: no such file")
    raw = path.read_bytes()
    if raw[:2] == b"PK":
        raise CheckpointError(f"{where}: a zip checkpoint (PyTorch 1.6 or later); this reader reads the legacy format")
    f = io.BytesIO(raw)
    storages: dict = {}
    try:
        if pickle.load(f) != MAGIC_NUMBER:  # plain ints: nothing to resolve
            raise CheckpointError(f"{where}: not a PyTorch checkpoint (wrong magic number)")
        if pickle.load(f) != PROTOCOL_VERSION:
            raise CheckpointError(f"{where}: unsupported PyTorch checkpoint protocol")
        sys_info = _Unpickler(f, where, storages).load()
        if not isinstance(sys_info, dict) or not sys_info.get("little_endian", False):
            raise CheckpointError(f"{where}: a big-endian checkpoint is not supported")
        obj = _Unpickler(f, where, storages).load()
        keys = _Unpickler(f, where, storages).load()
    except CheckpointError:
        raise
    except Exception as e:  # a damaged pickle stream
        raise CheckpointError(f"{where}: not a readable PyTorch checkpoint ({type(e).__name__}: {e})") from None
    if not isinstance(keys, list):
        raise CheckpointError(f"{where}: damaged checkpoint (no storage list)")
    for key in keys:
        storage = storages.get(key)
        if storage is None:
            raise CheckpointError(f"{where}: storage {key!r} is listed but never used")
        head = f.read(8)
        if len(head) != 8:
            raise CheckpointError(f"{where}: the file ends before storage {key!r}")
        (numel,) = struct.unpack("<q", head)
        nbytes = numel * storage.dtype.itemsize
        if numel != storage.numel or numel < 0 or f.tell() + nbytes > len(raw):
            raise CheckpointError(f"{where}: storage {key!r} of {numel} elements does not fit the file")
        storage.data = np.frombuffer(raw, dtype=storage.dtype, count=numel, offset=f.tell())
        f.seek(nbytes, io.SEEK_CUR)
    return obj, _flatten(obj, where)
