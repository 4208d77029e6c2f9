"""Reading CTranslate2 model folders (the format faster-whisper loads).

A folder holds ``model.bin`` (the weights), ``config.json`` (Whisper: language token ids,
suppressed tokens, alignment heads) and ``tokenizer.json`` (Hugging Face tokenizers).

``model.bin`` (binary version 6, little-endian) is: u32 version, string spec name, u32
spec revision, u32 variable count, then per variable a string name, u8 rank, u32 per
dimension, u8 data type, u32 byte count and the bytes; then u32 alias count and pairs of
strings (alias, target). A string is a u16 length that counts a trailing NUL, then the
bytes. The reader maps the file and returns numpy views; it checks every length against
the file's size, so a truncated or foreign file is an error naming the offset.
"""

from __future__ import annotations

import json
import mmap
import struct
from pathlib import Path

import numpy as np

from cera.errors import CeraError

# CTranslate2's DataType enum.
DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
BFLOAT16 = 5


class SourceModelError(CeraError):
    """A source model folder or file that cannot be converted."""


class Ct2Model:
    """The variables of a CTranslate2 model.bin, by name (aliases resolved)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            raise SourceModelError(f"{self.path}: cannot read the CTranslate2 model ({e})") from None
        self._buf = memoryview(self._map)
        self._off = 0
        self.variables: dict[str, np.ndarray] = {}
        self._parse()

    def _take(self, n: int) -> memoryview:
        if self._off + n > len(self._buf):
            raise SourceModelError(
                f"{self.path}: ends at byte {len(self._buf)} inside a record that needs {n} bytes at offset {self._off}; "
                f"the file is truncated or not a CTranslate2 model"
            )
        b = self._buf[self._off : self._off + n]
        self._off += n
        return b

    def _u(self, fmt: str) -> int:
        size = struct.calcsize("<" + fmt)
        return struct.unpack("<" + fmt, self._take(size))[0]

    def _str(self) -> str:
        n = self._u("H")
        raw = bytes(self._take(n))
        if not n or raw[-1] != 0:
            raise SourceModelError(f"{self.path}: a malformed string at offset {self._off - n}; not a CTranslate2 model")
        return raw[:-1].decode("utf-8", "replace")

    def _parse(self) -> None:
        version = self._u("I")
        if version != 6:
            raise SourceModelError(
                f"{self.path}: CTranslate2 binary version {version}; this reader knows version 6 (CTranslate2 3.x and 4.x). "
                f"Re-convert the model with a current ct2-transformers-converter"
            )
        self.spec = self._str()
        self.revision = self._u("I")
        for _ in range(self._u("I")):
            name = self._str()
            shape = tuple(self._u("I") for _ in range(self._u("B")))
            dtype_id = self._u("B")
            nbytes = self._u("I")
            raw = self._take(nbytes)
            if dtype_id == BFLOAT16:
                words = np.frombuffer(raw, np.uint16).astype(np.uint32) << 16
                arr = words.view(np.float32)
            elif dtype_id in DTYPES:
                arr = np.frombuffer(raw, DTYPES[dtype_id])
            else:
                raise SourceModelError(f"{self.path}: variable {name!r} has unknown data type {dtype_id}")
            if arr.size != int(np.prod(shape)):
                raise SourceModelError(f"{self.path}: variable {name!r} holds {arr.size} values for shape {shape}")
            self.variables[name] = arr.reshape(shape)
        for _ in range(self._u("I")):
            alias, target = self._str(), self._str()
            if target in self.variables:
                self.variables[alias] = self.variables[target]

    def __contains__(self, name: str) -> bool:
        return name in self.variables

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self.variables[name]
        except KeyError:
            raise SourceModelError(f"{self.path}: variable {name!r} is missing; not a Whisper model of a known layout") from None

    def scalar(self, name: str, default=None):
        if name not in self.variables:
            return default
        return self.variables[name].reshape(-1)[0].item()

    def close(self) -> None:
        self.variables.clear()
        self._buf.release()
        self._map.close()


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SourceModelError(f"{path}: missing; a CTranslate2 Whisper folder holds model.bin, config.json and tokenizer.json") from None
    except (OSError, ValueError) as e:
        raise SourceModelError(f"{path}: not readable JSON ({e})") from None
