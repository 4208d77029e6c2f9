"""The key offsets of a TurboQuant cache: one fixed vector per layer and KV head, subtracted
from every key before it is quantized.

Softmax ignores what every key of a query shares, so a cache may keep k - m for any fixed
m of a head: q.(k - m) = q.k - q.m, and q.m is the same for every key the query sees. The
keys of language models carry a large such part (a bias, a few large channels): measured on
the f16 rows of 512 tokens, the mean key holds 61% of the keys' energy in SmolLM2-135M and
96% in Qwen2.5-0.5B (values: 17% and 13%). TurboQuant's error grows with the row's norm,
so without the offset most of its levels describe the shared part; less the mean, the
3-bit error of a key fell 2.6x (SmolLM2) and 26x (Qwen2.5).

m is the mean of the post-RoPE keys of a fixed calibration text (`CALIBRATION_TEXT`,
prose and a little code, its first token left out: a sequence's first key is an outlier
in many models), evaluated once per loaded model with an f16 cache on the model's own
backend: the same model gives the same offsets in every process, every session shares
them, and checkpoints and the prefix cache carry them (`cera.state.SlotSnapshot`), so rows
kept less other offsets are converted on restore. The offsets cost one prompt of
`calibration_tokens` tokens when the first TurboQuant cache of a model is made.
"""

from __future__ import annotations

import threading

import numpy as np


CALIBRATION_TEXT = (
    "The river rises in the hills north of the town and runs south for about forty miles before it "
    "reaches the sea. In spring the water is high and brown with mud; by late summer it is low enough "
    "that children walk across the stones near the old mill. The mill itself stopped turning in 1952, "
    "when the last family that ran it sold the building to the county. Today it holds a small museum "
    "with maps, tools and photographs of the valley as it was a century ago.\n\n"
    "Questions people ask most often: How long is the walk from the station? About twenty minutes. "
    "Is there parking? Yes, behind the library, free after six in the evening.\n\n"
    "def moving_average(values, window):\n"
    "    if window <= 0:\n"
    "        raise ValueError('window must be positive')\n"
    "    total, out = 0.0, []\n"
    "    for i, v in enumerate(values):\n"
    "        total += v\n"
    "        if i >= window:\n"
    "            total -= values[i - window]\n"
    "        out.append(total / min(i + 1, window))\n"
    "    return out\n\n"
    "A good answer names its sources, says what it does not know, and keeps the numbers it quotes "
    "next to the units they are measured in."
)

_lock = threading.Lock()


def calibrate(runner, tokens: list[int]) -> dict[int, np.ndarray]:
    """{attention declaration index: float32 [n_kv_heads, k_dim]}: the mean post-RoPE key of
    ``tokens`` (the first left out) per layer and head, from an f16 cache on ``runner``'s
    backend; {} for a model with no attention cache or fewer than two tokens."""
    decls = list(runner.model.state)
    if not any(d.kind == "kv" for d in decls) or len(tokens) < 2:
        return {}
    n = len(tokens)
    state = runner.new_state(n, n_slots=1, kv_type="f16", n_batch=n)
    slot = state.acquire()
    runner.prefill(state, slot, tokens)
    snap = state.snapshot(slot)
    from ..kv_types import decode

    out = {}
    for i, d in enumerate(decls):
        if d.kind != "kv":
            continue
        k = np.asarray(decode(np.asarray(snap.kv[i][0]), "f16", True), np.float64)  # [heads, cells, dim]
        cells = k.shape[1]
        first = 1 if cells == n else 0  # a ring holds only the last cells: the first token is gone
        out[i] = k[:, first:].mean(axis=1).astype(np.float32)
    state.release(slot)
    return out


def key_offsets(runner) -> dict[int, np.ndarray] | None:
    """The runner's key offsets, calibrated on first use and kept on it; None when the runner
    has no calibration tokens (a runner made without a tokenizer)."""
    cached = getattr(runner, "_key_offsets", None)
    if cached is not None:
        return cached
    source = getattr(runner, "calibration_tokens", None)
    if source is None:
        return None
    with _lock:
        cached = getattr(runner, "_key_offsets", None)
        if cached is None:
            cached = runner._key_offsets = calibrate(runner, list(source()))
    return cached


__all__ = ["CALIBRATION_TEXT", "calibrate", "key_offsets"]
