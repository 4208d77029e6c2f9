"""The peer: silero-vad's ONNX model run by onnxruntime the way its own wrapper runs it."""

from __future__ import annotations

import numpy as np


def ort_probabilities(session, samples: np.ndarray, sample_rate: int) -> np.ndarray:
    """Per-frame probabilities as silero-vad's OnnxWrapper computes them, frame by frame.

    Each call gets the previous input's last 64 (32) samples followed by the 512 (256)
    new ones, and the state the previous call returned; the last frame is zero-padded.
    """
    frame = 512 if sample_rate == 16000 else 256
    context = 64 if sample_rate == 16000 else 32
    n = -(-len(samples) // frame)
    x = np.zeros(n * frame, dtype=np.float32)
    x[: len(samples)] = samples
    state = np.zeros((2, 1, 128), dtype=np.float32)
    ctx = np.zeros(context, dtype=np.float32)
    sr = np.array(sample_rate, dtype=np.int64)
    out = np.empty(n, dtype=np.float32)
    for i in range(n):
        inp = np.concatenate([ctx, x[i * frame : (i + 1) * frame]])[None, :]
        prob, state = session.run(None, {"input": inp, "state": state, "sr": sr})
        out[i] = prob[0, 0]
        ctx = inp[0, -context:]
    return out
