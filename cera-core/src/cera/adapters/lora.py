"""A LoRA adapter: low-rank pairs beside a model's weights, in llama.cpp's GGUF form.

llama.cpp's adapter file is a GGUF with ``general.type = adapter``, ``adapter.type = lora``,
``general.architecture`` of the base model, ``adapter.lora.alpha`` (optional), and for each
adapted weight ``W`` (GGML ne ``[in, out]``) two tensors: ``W.lora_a`` (ne ``[in, r]``) and
``W.lora_b`` (ne ``[r, out]``). The adapted product is ``W x + s * (alpha / r) * B (A x)``,
``s`` the user's scale (``alpha`` 0: ``s`` alone). The token embedding is the exception:
its ``lora_a`` is stored transposed (ne ``[r, n_vocab]``), rows picked by token id, then
``B`` (ne ``[r, n_embd]``).

`LoraAdapter` holds the pairs' tensor references and a tensor source that backends upload
from (the same ``tensors`` / ``tensor_data`` interface as `cera.formats.gguf.GGUFFile`),
under names of their own (``lora.<fingerprint>.<target>.lora_a``), so several adapters,
and adapters that target the same weight, sit side by side in a backend's weights.
`check_fits` checks an adapter against a base model and names the first mismatch.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from pathlib import Path

import attrs
import numpy as np
from gguf.constants import GGMLQuantizationType

from ..errors import AdapterError, CeraError
from ..formats.gguf import GGUFFile, TensorInfo
from ..graph.builder import WeightRef

# The stored types an adapter's tensors may have (those llama.cpp's converter writes).
ADAPTER_TYPES = ("F32", "F16", "BF16", "Q8_0")
EMBEDDING_TARGET = "token_embd.weight"


@attrs.frozen
class LoraPair:
    """One adapted weight: ``target`` (the base model's tensor name) and the references of
    its ``a`` and ``b`` tensors as the graph sees them. ``embedding``: the pair adapts the
    token embedding (``a`` transposed, rows picked by id)."""

    target: str
    a: WeightRef
    b: WeightRef
    embedding: bool = False

    @property
    def rank(self) -> int:
        return int(self.b.shape[0])


class TensorSource:
    """Tensors by name for `cera.backend.Backend.upload`: each name maps to its `TensorInfo`
    and a function that returns its stored values (as `GGUFFile.tensor_data` does)."""

    def __init__(self, path: str, entries: dict[str, tuple[TensorInfo, Callable[[], np.ndarray]]]):
        self.path = path
        self.tensors = {name: info for name, (info, _) in entries.items()}
        self._data = {name: fn for name, (_, fn) in entries.items()}

    def tensor_data(self, name: str) -> np.ndarray:
        return self._data[name]()


@attrs.define(eq=False)
class LoraAdapter:
    """A LoRA adapter read from a file or a PEFT directory (see the module docstring).

    ``name``: what it is called in listings and requests (the file's stem unless given);
    ``alpha``: ``adapter.lora.alpha`` (0: the user's scale is used as is);
    ``pairs``: by target tensor name; ``fingerprint``: a digest of its values."""

    name: str
    path: str
    architecture: str
    alpha: float
    pairs: dict[str, LoraPair]
    source: TensorSource
    fingerprint: str
    _close: Callable[[], None] | None = None

    def effective_scale(self, pair: LoraPair, scale: float) -> float:
        """The factor of ``B(Ax)`` for a user's ``scale``: llama.cpp's ``scale * alpha / r``."""
        return float(scale) * self.alpha / pair.rank if self.alpha else float(scale)

    @property
    def weight_names(self) -> list[str]:
        return sorted(n for p in self.pairs.values() for n in (p.a.name, p.b.name))

    def check_fits(self, architecture: str, tensors: dict[str, tuple[str, tuple[int, ...]]], used: set[str]) -> None:
        """Refuse this adapter for a base model of ``architecture`` whose tensors are
        ``tensors`` (name -> (type, GGML shape)) and whose family reads ``used``; the
        error names the first mismatch."""
        if self.architecture != architecture:
            raise AdapterError(
                f"{self.path}: the adapter is for architecture {self.architecture!r}, the model is {architecture!r}; "
                f"use an adapter trained on this model"
            )
        for target, pair in sorted(self.pairs.items()):
            if target not in tensors or target not in used:
                raise AdapterError(
                    f"{self.path}: the adapter adapts tensor {target!r}, which the model does not have "
                    f"(is it the adapter of another model?)"
                )
            shape = tuple(tensors[target][1])
            a, b = pair.a.shape, pair.b.shape
            if len(shape) != 2:
                raise AdapterError(f"{self.path}: tensor {target!r} of the model has GGML shape {shape}; only matrices are adapted")
            if pair.embedding:
                fits = shape[0] == b[1] and shape[1] == a[1] and a[0] == b[0]
                want = f"lora_a [r, {shape[1]}] and lora_b [r, {shape[0]}]"
            else:
                fits = shape[0] == a[0] and shape[1] == b[1] and a[1] == b[0]
                want = f"lora_a [{shape[0]}, r] and lora_b [r, {shape[1]}]"
            if not fits:
                raise AdapterError(
                    f"{self.path}: the pair of {target!r} has lora_a {list(a)} and lora_b {list(b)} (GGML order); "
                    f"the model's tensor {list(shape)} needs {want} (is it the adapter of another model?)"
                )

    def close(self) -> None:
        if self._close is not None:
            self._close()
            self._close = None

    def __repr__(self) -> str:
        return f"<LoraAdapter {self.name!r} arch={self.architecture} pairs={len(self.pairs)} alpha={self.alpha:g}>"


def weight_prefix(fingerprint: str) -> str:
    """The prefix of an adapter's tensor names in a backend's weights."""
    return f"lora.{fingerprint[:16]}."


def make_pairs(path: str, fingerprint: str, tensors: dict[str, tuple[str, tuple[int, ...]]]) -> dict[str, LoraPair]:
    """Group ``<target>.lora_a`` / ``<target>.lora_b`` (name -> (type, GGML shape)) into
    pairs named for a backend's weights; refuse a tensor of another kind, a type outside
    `ADAPTER_TYPES`, or half a pair."""
    prefix = weight_prefix(fingerprint)
    halves: dict[str, dict[str, WeightRef]] = {}
    for name, (type_name, shape) in tensors.items():
        target, dot, kind = name.rpartition(".")
        if not dot or kind not in ("lora_a", "lora_b"):
            raise AdapterError(
                f"{path}: tensor {name!r} is not a LoRA pair's lora_a or lora_b; adapters that replace "
                f"whole tensors are not supported"
            )
        if type_name not in ADAPTER_TYPES:
            raise AdapterError(f"{path}: tensor {name!r} is {type_name}; adapter tensors must be one of {', '.join(ADAPTER_TYPES)}")
        if len(shape) != 2 or min(shape) <= 0:
            raise AdapterError(f"{path}: tensor {name!r} has GGML shape {list(shape)}; a LoRA half is a non-empty matrix")
        halves.setdefault(target, {})[kind] = WeightRef(prefix + name, type_name, tuple(int(d) for d in shape))
    if not halves:
        raise AdapterError(f"{path}: the adapter has no lora_a / lora_b tensors")
    pairs = {}
    for target, h in sorted(halves.items()):
        missing = [k for k in ("lora_a", "lora_b") if k not in h]
        if missing:
            raise AdapterError(f"{path}: tensor {target!r} has no {missing[0]}; each adapted tensor needs lora_a and lora_b")
        pairs[target] = LoraPair(target, h["lora_a"], h["lora_b"], embedding=target == EMBEDDING_TARGET)
    return pairs


def read_gguf_adapter(path, name: str | None = None) -> LoraAdapter:
    """A llama.cpp LoRA adapter file (see the module docstring)."""
    path = Path(path)
    try:
        f = GGUFFile(path)
    except CeraError as e:
        raise AdapterError(f"{path}: not a readable GGUF adapter: {e}") from e
    try:
        kind = f.get("general.type")
        if kind != "adapter":
            what = "a model, not an adapter" if kind in (None, "model") else f"of general.type {kind!r}"
            raise AdapterError(f"{path}: the file is {what}; a LoRA adapter has general.type 'adapter'")
        adapter_type = f.get("adapter.type")
        if adapter_type != "lora":
            raise AdapterError(f"{path}: adapter.type is {adapter_type!r}; only 'lora' adapters are supported")
        if f.get("adapter.alora.invocation_tokens") is not None:
            raise AdapterError(f"{path}: an activated LoRA (adapter.alora.invocation_tokens) is not supported")
        arch = f.get("general.architecture")
        if not isinstance(arch, str) or not arch:
            raise AdapterError(f"{path}: the adapter names no general.architecture")
        alpha = f.get("adapter.lora.alpha", 0.0)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
            raise AdapterError(f"{path}: adapter.lora.alpha is {alpha!r}; it must be a number")
        digest = hashlib.sha256(f"{arch}\0{float(alpha)!r}\0".encode())
        for tname in sorted(f.tensors):
            info = f.tensors[tname]
            digest.update(f"{tname}\0{info.type_name}\0{list(info.shape)}\0".encode())
            digest.update(memoryview(np.ascontiguousarray(f.tensor_data(tname))).cast("B"))
        fingerprint = digest.hexdigest()
        pairs = make_pairs(str(path), fingerprint, {n: (i.type_name, tuple(i.shape)) for n, i in f.tensors.items()})
        entries = {}
        prefix = weight_prefix(fingerprint)
        for tname, info in f.tensors.items():
            entries[prefix + tname] = (attrs.evolve(info, name=prefix + tname), lambda n=tname: f.tensor_data(n))
        return LoraAdapter(name or path.stem, str(path), arch, float(alpha), pairs, TensorSource(str(path), entries),
                           fingerprint, f.close)  # fmt: skip
    except BaseException:
        f.close()
        raise


def array_source(path: str, fingerprint: str, arrays: dict[str, np.ndarray]) -> TensorSource:
    """A tensor source over float arrays in numpy order (PEFT tensors, tests), stored F32."""
    prefix = weight_prefix(fingerprint)
    entries = {}
    for name, arr in arrays.items():
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        info = TensorInfo(prefix + name, tuple(reversed(arr.shape)), GGMLQuantizationType.F32, 0, arr.nbytes)
        entries[prefix + name] = (info, lambda a=arr: a)
    return TensorSource(path, entries)



__all__ = ["ADAPTER_TYPES", "LoraAdapter", "LoraPair", "TensorSource", "read_gguf_adapter"]
