"""Reading a family's hyperparameters from `{arch}.*` metadata keys (named by suffix or by
the `gguf` package's key table).

`HParams` hands out values by key suffix and remembers what was read. When the family is
done, `check_all_understood` refuses the file if it carries an `{arch}.*` key that the
family neither read nor declared harmless: a key we do not understand may change the
maths (a new RoPE scaling, a new norm), and computing silently without it would produce
wrong tokens that look right.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ModelConfigError

# Keys that carry information only (they never change the forward pass).
INFORMATIONAL_SUFFIXES = frozenset(
    {
        "context_length",
        "vocab_size",
        "tensor_data_layout",
        "rope.scaling.finetuned",
        "rope.scaling.original_context_length",  # read where YaRN needs it
        "pooling_type",
    }
)


def _suffix(key: str) -> str:
    """A key's part after the architecture: families may name keys by suffix
    ("block_count") or by the `gguf` package's table (`Keys.LLM.BLOCK_COUNT`,
    "{arch}.block_count")."""
    return key[len("{arch}.") :] if key.startswith("{arch}.") else key


class HParams:
    def __init__(self, gguf, family: str):
        self.gguf = gguf
        self.arch = gguf.architecture
        self.family = family
        self.used: set[str] = set()

    def key(self, suffix: str) -> str:
        return f"{self.arch}.{_suffix(suffix)}"

    def has(self, suffix: str) -> bool:
        return self.key(suffix) in self.gguf.metadata

    def _convert(self, suffix: str, value: Any, kind: type) -> Any:
        key = self.key(suffix)
        if kind is int:
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise ModelConfigError(f"{self.gguf.path}: {key} should be an integer, got {value!r}")
            return int(value)
        if kind is float:
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise ModelConfigError(f"{self.gguf.path}: {key} should be a number, got {value!r}")
            value = float(value)
            if not math.isfinite(value):  # no hyperparameter is meant to be NaN or infinite
                raise ModelConfigError(f"{self.gguf.path}: {key} is {value}; it must be a finite number")
            return value
        if kind is bool:
            if not isinstance(value, (bool, np.bool_)):
                raise ModelConfigError(f"{self.gguf.path}: {key} should be a boolean, got {value!r}")
            return bool(value)
        if kind is str:
            if not isinstance(value, str):
                raise ModelConfigError(f"{self.gguf.path}: {key} should be a string, got {value!r}")
            return value
        return value

    def req(self, suffix: str, kind: type = int) -> Any:
        """A required key; its absence is an error naming the key."""
        suffix = _suffix(suffix)
        self.used.add(suffix)
        key = self.key(suffix)
        if key not in self.gguf.metadata:
            raise ModelConfigError(
                f"{self.gguf.path}: the {self.family} family needs metadata key {key!r}, which the file lacks; "
                f"the file may be from an incompatible converter"
            )
        return self._convert(suffix, self.gguf.metadata[key], kind)

    def opt(self, suffix: str, default: Any, kind: type | None = None) -> Any:
        suffix = _suffix(suffix)
        self.used.add(suffix)
        key = self.key(suffix)
        if key not in self.gguf.metadata:
            return default
        return self._convert(suffix, self.gguf.metadata[key], kind or type(default))

    def per_layer(self, suffix: str, n_layers: int, default: Any, kind: type = int) -> list:
        """A key that may be one value for all layers or an array with one per layer."""
        suffix = _suffix(suffix)
        self.used.add(suffix)
        key = self.key(suffix)
        value = self.gguf.metadata.get(key, default)
        if isinstance(value, np.ndarray):
            if len(value) != n_layers:
                raise ModelConfigError(f"{self.gguf.path}: {key} has {len(value)} entries for {n_layers} layers")
            if value.dtype.kind not in "iuf" or (kind is int and value.dtype.kind == "f"):
                raise ModelConfigError(f"{self.gguf.path}: {key} should be an array of numbers, got {value.dtype}")
            if value.dtype.kind == "f" and not np.isfinite(value).all():
                raise ModelConfigError(f"{self.gguf.path}: {key} holds non-finite values; they must be finite")
            return [kind(v) for v in value]
        return [self._convert(suffix, value, kind)] * n_layers

    def ignore(self, *suffixes: str) -> None:
        """Declare keys the family deliberately does not use."""
        self.used.update(_suffix(s) for s in suffixes)

    def check_all_understood(self) -> None:
        prefix = self.arch + "."
        for key in self.gguf.metadata:
            if not key.startswith(prefix):
                continue
            suffix = key[len(prefix) :]
            if suffix in self.used or suffix in INFORMATIONAL_SUFFIXES:
                continue
            raise ModelConfigError(
                f"{self.gguf.path}: the {self.family} family does not understand metadata key {key!r} "
                f"(value {self.gguf.metadata[key]!r}); it may change how the model computes, so cera "
                f"refuses to guess. Report it, or update the family plugin"
            )
