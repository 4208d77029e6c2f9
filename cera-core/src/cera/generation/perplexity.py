"""Perplexity of a text, by llama.cpp's `llama-perplexity` definition, so the figures compare.

The text is tokenized once, as llama-perplexity does (``common_tokenize(ctx, text, true)``:
BOS added where the model adds one, special-token text not parsed), and needs at least two
chunks of ``n_ctx`` tokens; it is cut into chunks of ``n_ctx`` tokens, a trailing part
shorter than a chunk dropped. Each chunk is evaluated from an empty cache, its first token
replaced by BOS where the model adds one. Only the second half of each chunk is scored: the
token after position j, for j from ``n_ctx // 2`` to ``n_ctx - 2``, by the log-softmax of
the logits at j (the row's maximum subtracted and ``expf`` taken in float32, the sum of the
exponentials in double, as its ``log_softmax``). The perplexity is exp of the mean negative
log-likelihood over every scored token; its uncertainty is llama.cpp's: the standard error
of the mean, times the perplexity.

The chunk is evaluated in passes of at most ``n_batch`` tokens, every position's logits
read back. The cache type (`cera.state`) is the session's, so the cost of a compressed cache
in quality is the difference of two runs of this on the same text.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import attrs
import numpy as np

from ..errors import InvalidOptions
from ..graph.builder import ALL_LOGITS, NONE
from .runtime import SeqStep


@attrs.frozen
class PerplexityResult:
    ppl: float
    stderr: float  # of the perplexity (llama.cpp's "+/-")
    chunks: int
    tokens: int  # scored tokens
    text_tokens: int  # tokens of the whole text
    n_ctx: int
    kv_type: str
    kv_bytes: int  # the state's bytes for one sequence of n_ctx cells
    seconds: float
    chunk_ppl: tuple[float, ...]  # the running perplexity after each chunk (llama.cpp's "[i]x" line)

    def as_dict(self) -> dict:
        return {
            "ppl": self.ppl,
            "ppl_stderr": self.stderr,
            "chunks": self.chunks,
            "tokens": self.tokens,
            "text_tokens": self.text_tokens,
            "n_ctx": self.n_ctx,
            "kv_type": self.kv_type,
            "kv_bytes": self.kv_bytes,
            "seconds": self.seconds,
        }


def token_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Negative log-likelihood of ``targets[i]`` under the row ``logits[i]`` (float64), as
    llama.cpp's log_softmax: the maximum subtracted and the exponentials taken in float32,
    their sum in double."""
    rows = np.asarray(logits, np.float32)
    shifted = rows - rows.max(axis=1, keepdims=True)
    lse = np.log(np.exp(shifted).sum(axis=1, dtype=np.float64))
    return lse - shifted[np.arange(len(targets)), targets].astype(np.float64)


def perplexity(loaded, text: str | list[int], n_ctx: int = 512, kv_type: str = "f16", n_batch: int = 2048,
               max_chunks: int | None = None, progress: Callable[[int, int], None] | None = None) -> PerplexityResult:  # fmt: skip
    """The perplexity of ``text`` (a string, or its token ids) under ``loaded``: see the module.
    ``progress(done, total)`` is called after each chunk."""
    if not isinstance(n_ctx, int) or isinstance(n_ctx, bool) or n_ctx < 4:
        raise InvalidOptions(f"the chunk size (n_ctx) must be an integer of at least 4 tokens, got {n_ctx!r}")
    if not isinstance(n_batch, int) or isinstance(n_batch, bool) or n_batch < 1:
        raise InvalidOptions(f"n_batch must be a positive integer, got {n_batch!r}")
    if max_chunks is not None and (not isinstance(max_chunks, int) or max_chunks < 1):
        raise InvalidOptions(f"the number of chunks must be a positive integer, got {max_chunks!r}")
    tokens = loaded.tokenize(text) if isinstance(text, str) else [int(t) for t in text]
    n_chunks = len(tokens) // n_ctx
    if len(tokens) < 2 * n_ctx:  # llama-perplexity's rule
        raise InvalidOptions(
            f"the text is {len(tokens)} tokens; perplexity with chunks of {n_ctx} needs at least {2 * n_ctx}: "
            f"give a longer text or a smaller context (-c)"
        )
    if max_chunks is not None:
        n_chunks = min(n_chunks, max_chunks)
    tok = loaded.tokenizer
    bos = tok.bos_id if tok.add_bos else None
    n_batch = min(n_batch, n_ctx)
    state = loaded.runner.new_state(n_ctx, n_slots=1, kv_type=kv_type, n_batch=n_batch)
    kv_bytes = state.nbytes()
    first = n_ctx // 2
    nll_sum = nll2_sum = 0.0
    count = 0
    running: list[float] = []
    t0 = time.perf_counter()
    for i in range(n_chunks):
        chunk = tokens[i * n_ctx : (i + 1) * n_ctx]
        inputs = list(chunk)
        if bos is not None:
            inputs[0] = bos
        state.clear(0)
        rows = []
        for b in range(0, n_ctx, n_batch):
            part = inputs[b : b + n_batch]
            want = ALL_LOGITS if b + len(part) > first else NONE
            out = loaded.runner.forward(state, [SeqStep(0, part, range(b, b + len(part)))], want, prompt_rows=True)
            if want is ALL_LOGITS:
                logits = out["logits"].reshape(len(part), -1)
                rows.append(logits[max(0, first - b) :])
        logits = np.concatenate(rows)[: n_ctx - 1 - first]
        nll = token_nll(logits, np.asarray(chunk[first + 1 :], np.int64))
        nll_sum += float(nll.sum())
        nll2_sum += float((nll * nll).sum())
        count += len(nll)
        running.append(math.exp(nll_sum / count))
        if progress is not None:
            progress(i + 1, n_chunks)
    seconds = time.perf_counter() - t0
    mean = nll_sum / count
    ppl = math.exp(mean)
    var = nll2_sum / count - mean * mean
    stderr = math.sqrt(var / (count - 1)) * ppl if var > 0 and count > 1 else 0.0
    return PerplexityResult(
        ppl=ppl, stderr=stderr, chunks=n_chunks, tokens=count, text_tokens=len(tokens), n_ctx=n_ctx,
        kv_type=kv_type, kv_bytes=kv_bytes, seconds=seconds, chunk_ppl=tuple(running),
    )  # fmt: skip


__all__ = ["PerplexityResult", "perplexity", "token_nll"]
