"""Text embeddings: one vector per text (or one per token), from any loaded model.

Encoders (bert, nomic-bert) pool as their file says (``pooling_type``: mean, CLS or last
token); a decoder's vector is its hidden state after the final norm (what llama.cpp's
``--pooling none`` gives per token), mean-pooled over the text unless asked otherwise.
Texts are tokenized with the model's special tokens (CLS/SEP, BOS) and evaluated in
batches: several texts share one forward pass, each attending only within itself, each
in its own state slot (encoders have no state; a decoder's cache slot is discarded after).

Vectors are L2-normalised by default, as llama.cpp's embedding tools and
llama-cpp-python's ``embed`` do (``normalize=False`` gives the raw pooled states).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..errors import InvalidOptions
from ..graph.builder import Outputs
from .runtime import SeqStep

POOLINGS = ("mean", "cls", "last", "none")
MAX_TEXTS_PER_PASS = 64  # the sequences of one pass (the CPU backend's attention takes 64)


def _batches(lengths: list[int], max_tokens: int, max_texts: int) -> list[list[int]]:
    """Consecutive texts grouped so that a pass holds at most ``max_tokens`` tokens."""
    out: list[list[int]] = []
    cur: list[int] = []
    total = 0
    for i, n in enumerate(lengths):
        if cur and (total + n > max_tokens or len(cur) == max_texts):
            out.append(cur)
            cur, total = [], 0
        cur.append(i)
        total += n
    if cur:
        out.append(cur)
    return out


def embed(loaded, texts: str | Iterable[str], pooling: str | None = None, normalize: bool = True,
          batch_tokens: int = 2048, adapters=None) -> np.ndarray | list[np.ndarray]:  # fmt: skip
    """Embed ``texts`` (a string or an iterable of strings) with ``loaded``.

    Returns a float32 array ``[n_texts, dim]`` (``[dim]`` for a single string), or with
    ``pooling="none"`` a list of ``[n_tokens, dim]`` arrays (one row per token).
    ``pooling``: "mean", "cls", "last" or "none"; default the model's own (its file's
    ``pooling_type``), else "mean". ``batch_tokens``: tokens per forward pass at most.
    ``adapters``: LoRA adapters (`cera.adapters.attach.resolve`); default the model's
    (`LoadedModel.use_adapters`).
    """
    from ..adapters.attach import resolve

    active = resolve(loaded, getattr(loaded, "default_adapters", None) if adapters is None else adapters)
    single = isinstance(texts, str)
    items = [texts] if single else list(texts)
    if not all(isinstance(t, str) for t in items):
        raise InvalidOptions("embed takes a string or a list of strings")
    pooling = pooling or getattr(loaded.model, "pooling", None) or "mean"
    if pooling not in POOLINGS:
        raise InvalidOptions(f"pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
    if not isinstance(batch_tokens, int) or batch_tokens < 1:
        raise InvalidOptions(f"batch_tokens must be a positive integer, got {batch_tokens!r}")
    ids = [loaded.tokenizer.encode(t, add_special=True, parse_special=False) for t in items]
    limit = loaded.n_ctx_train or None
    for i, seq in enumerate(ids):
        if not seq:
            raise InvalidOptions(f"text {i} has no tokens (an empty text and a tokenizer that adds none)")
        if limit and len(seq) > limit:
            raise InvalidOptions(f"text {i} is {len(seq)} tokens; the model takes at most {limit}")
    out: list[np.ndarray] = [None] * len(ids)  # type: ignore[list-item]
    wanted = {
        "mean": Outputs(("pooled",)),
        "last": Outputs(("hidden",)),
        "cls": Outputs(("hidden",), rows="all"),
        "none": Outputs(("hidden",), rows="all"),
    }[pooling]
    for batch in _batches([len(s) for s in ids], max(batch_tokens, max(len(s) for s in ids)), MAX_TEXTS_PER_PASS):
        seqs = [ids[i] for i in batch]
        state = loaded.runner.new_state(n_ctx=max(len(s) for s in seqs), n_slots=len(seqs), kv_type="f16",
                                        n_batch=sum(len(s) for s in seqs))  # fmt: skip
        steps = []
        for s in seqs:
            steps.append(SeqStep(state.acquire(), s, range(len(s))))
        result = loaded.runner.forward(state, steps, wanted, adapters=active)
        if pooling == "mean":
            vectors = list(result["pooled"])
        elif pooling == "last":
            vectors = list(result["hidden"])
        else:
            hidden = result["hidden"]
            starts = np.cumsum([0] + [len(s) for s in seqs[:-1]])
            if pooling == "cls":
                vectors = [hidden[r0] for r0 in starts]
            else:
                vectors = [hidden[r0 : r0 + len(s)] for r0, s in zip(starts, seqs, strict=True)]
        for i, v in zip(batch, vectors, strict=True):
            v = np.array(v, np.float32)
            if normalize:
                norm = np.linalg.norm(v, axis=-1, keepdims=True)
                v = v / np.maximum(norm, 1e-12)
            out[i] = v
    if pooling == "none":
        return out[0] if single else out
    arr = np.stack(out)
    return arr[0] if single else arr


__all__ = ["POOLINGS", "embed"]
