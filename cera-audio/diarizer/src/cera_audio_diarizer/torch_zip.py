"""Read PyTorch's zip checkpoint format (``torch.save`` since PyTorch 1.6) without torch, safely.

A zip checkpoint holds ``<root>/data.pkl`` (the pickled object; tensors appear as
``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)`` with storages as
persistent ids ``("storage", type, key, location, numel)``) and each storage's raw
little-endian bytes in ``<root>/data/<key>``. The pickle is read by the allowlisted
unpickler of `cera_audio_diarizer.torch_legacy` (any other global is refused by name), and
tensors come back as float32 numpy arrays by their dotted path.
"""

from __future__ import annotations

import io
import zipfile

import numpy as np

from .torch_legacy import CheckpointError, _flatten, _Unpickler

# A storage larger than this is not a weight of any model this package reads.
MAX_STORAGE_BYTES = 4 << 30


def read_zip_checkpoint(raw: bytes, where: str) -> dict[str, np.ndarray]:
    """Every tensor of the zip checkpoint ``raw`` (its bytes), by dotted path, as float32."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(raw))
        names = zf.namelist()
    except zipfile.BadZipFile as e:
        raise CheckpointError(f"{where}: not a zip checkpoint ({e})") from None
    pkl = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(pkl) != 1:
        raise CheckpointError(f"{where}: no data.pkl in the zip checkpoint; is it a PyTorch checkpoint?")
    root = pkl[0][: -len("data.pkl")]
    storages: dict = {}
    try:
        obj = _Unpickler(io.BytesIO(zf.read(pkl[0])), where, storages).load()
    except CheckpointError:
        raise
    except Exception as e:  # a damaged pickle stream
        raise CheckpointError(f"{where}: not a readable PyTorch checkpoint ({type(e).__name__}: {e})") from None
    for key, storage in storages.items():
        name = f"{root}data/{key}"
        try:
            info = zf.getinfo(name)
        except KeyError:
            raise CheckpointError(f"{where}: storage {key!r} has no data in the checkpoint") from None
        nbytes = storage.numel * storage.dtype.itemsize
        if info.file_size != nbytes or nbytes > MAX_STORAGE_BYTES:
            raise CheckpointError(f"{where}: storage {key!r} holds {info.file_size} bytes, expected {nbytes}")
        storage.data = np.frombuffer(zf.read(name), dtype=storage.dtype, count=storage.numel)
    return _flatten(obj, where)
