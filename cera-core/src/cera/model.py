"""The Model interface that family plugins implement.

A family maps a GGUF file's `{arch}.*` metadata to a config (`config_from_gguf`), names
the tensors it needs, and writes `forward` with the backend's op vocabulary. It never
imports a backend: the backend it runs on is handed to it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from .backend import Backend, KVLayerSpec, State, Weight
from .errors import InvalidModelFile


class Weights:
    """Uploads a file's tensors to a backend on first use, by name."""

    def __init__(self, gguf, backend: Backend):
        self.gguf = gguf
        self.backend = backend
        self._cache: dict[str, Weight] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.gguf.tensors

    def __getitem__(self, name: str) -> Weight:
        w = self._cache.get(name)
        if w is None:
            if name not in self.gguf.tensors:
                raise InvalidModelFile(self.gguf.path, None, f"required tensor {name!r} is missing")
            w = self.backend.upload(self.gguf, name)
            self._cache[name] = w
        return w

    def get(self, name: str) -> Weight | None:
        return self[name] if name in self.gguf.tensors else None

    def shape(self, name: str) -> tuple[int, ...]:
        return self.gguf.tensors[name].shape


class Model(ABC):
    """A model of one family, loaded on one backend.

    Subclasses set `config` in `__init__` (usually from `config_from_gguf`) and implement
    `state_layout` and `forward`.
    """

    #: ops of `cera.backend.OPS` this family uses; loading checks the backend has them.
    required_ops: tuple[str, ...] = ("embedding", "linear", "rms_norm", "rope", "attention", "swiglu", "add")

    def __init__(self, gguf, backend: Backend):
        self.gguf = gguf
        self.backend = backend
        self.weights = Weights(gguf, backend)
        self.config: Any = None

    @property
    def n_ctx_train(self) -> int:
        return int(self.gguf.arch_get("context_length", 2048))

    @property
    def n_vocab(self) -> int:
        raise NotImplementedError

    @abstractmethod
    def state_layout(self) -> list[KVLayerSpec]:
        """One KV cache entry per attention layer."""

    @abstractmethod
    def forward(self, state: State, tokens: np.ndarray, positions: np.ndarray, output: str = "last") -> np.ndarray:
        """Evaluate ``tokens`` at ``positions`` into ``state``.

        ``output``: "last" returns logits ``[1, n_vocab]`` for the last token, "all"
        returns ``[n, n_vocab]``, "none" returns None (prompt chunks whose logits nobody
        reads).
        """

    def preload(self) -> None:
        """Upload every tensor now (so errors and costs show at load time, not mid-generation)."""
        for name in self.gguf.tensors:
            self.weights[name]


class DecoderModel(Model):
    """A decoder-only transformer: token embedding, layers, final RMS norm, output head.

    Subclasses set ``self.config`` (with ``n_layer`` and ``attn``, an
    `cera.layers.AttentionShape`), call `load_head`, and end `forward` with `head`. The
    output matrix is the token embedding when the file has no ``output.weight`` (tied
    embeddings).
    """

    def load_head(self) -> None:
        w = self.weights
        self.tok_embd = w["token_embd.weight"]
        self.output_norm = w["output_norm.weight"]
        self.output = w.get("output.weight") or self.tok_embd
        self.output_bias = w.get("output.bias")

    @property
    def n_vocab(self) -> int:
        return self.output.shape[1]

    def state_layout(self) -> list[KVLayerSpec]:
        a = self.config.attn
        return [KVLayerSpec(a.n_head_kv, a.head_dim_k, a.head_dim_v)] * self.config.n_layer

    def last_layer_rows(self, i: int, output: str, x, h):
        """In the last layer, once its attention has written the cache, keep only the rows
        whose logits are wanted: (x, h) trimmed, or (None, None) when none are. llama.cpp
        does the same (its last feed-forward runs on the output rows only, which also
        decides which of its kernels runs), and the rest of a prompt's last layer is work
        no logit needs."""
        if i != self.config.n_layer - 1 or output == "all":
            return x, h
        from .layers import output_rows

        return output_rows(self.backend, x, output), output_rows(self.backend, h, output)

    def head(self, x, output: str, eps: float, logit_scale: float = 1.0, softcap: float | None = None):
        """Final norm and output projection of the rows ``output`` asks for, to the host.
        Logits are divided by ``logit_scale`` and soft-capped when asked."""
        from .layers import output_rows

        ops = self.backend
        x = output_rows(ops, x, output)
        if x is None:
            return None
        logits = ops.linear(ops.rms_norm(x, self.output_norm, eps), self.output, self.output_bias)
        if logit_scale != 1.0:
            logits = ops.scale(logits, 1.0 / logit_scale)
        if softcap:
            logits = ops.softcap(logits, softcap)
        return ops.to_numpy(logits)
