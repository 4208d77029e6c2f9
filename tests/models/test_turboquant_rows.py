"""TurboQuant (`cera.kv_turboquant`) on real cache rows: SmolLM2-135M's keys and values of
the reference text, as an f16 cache keeps them, quantized by the numpy reference. The
error a row keeps is the Lloyd-Max distortion the paper predicts for its bits, and the keys'
common offset (which softmax ignores) is where most of their error goes: measured figures
in the `cera.kv_turboquant` docstring."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import cera
from cera import kv_turboquant as tq

TEXT = (Path(__file__).resolve().parent / "reference" / "perplexity" / "text.txt").read_text(encoding="utf-8")
# Lloyd-Max distortion of N(0, 1) (Max 1960); keeping the norm adds D^2 / 4
DISTORTION = {2: 0.1175, 3: 0.03454, 4: 0.009497}


@pytest.fixture(scope="module")
def rows(smollm2_path):
    """Keys and values [layers, KV heads, 256 cells, 64] of the text's first 256 tokens."""
    with cera.load(smollm2_path, device="cpu", quiet=True) as loaded:
        s = loaded.new_session(n_ctx=256, kv_type="f16")
        s.append_tokens(loaded.tokenize(TEXT)[:256])
        s.evaluate()
        snap = s.checkpoint().state
        s.close()
    kv = [item for item in snap.kv if isinstance(item, tuple)]
    return np.stack([k for k, _ in kv]).astype(np.float32), np.stack([v for _, v in kv]).astype(np.float32)


def _relative_error(x, kv_type, key, offset=None):
    x = x.astype(np.float64)
    y = x if offset is None else x - offset
    got = tq.decode(tq.encode(y, kv_type, key), kv_type, key)
    return float(((got - y) ** 2).sum(-1).mean() / (y**2).sum(-1).mean())


@pytest.mark.parametrize("kv_type", ["tq3", "tq2"])
@pytest.mark.parametrize("key", [True, False])
def test_real_rows_keep_the_quantizers_distortion(rows, kv_type, key):
    x = rows[0] if key else rows[1]
    d = DISTORTION[tq.bits(kv_type, key)]
    assert _relative_error(x, kv_type, key) == pytest.approx(d + d * d / 4, rel=0.15)


def test_the_keys_error_is_mostly_their_common_offset(rows):
    """Most of a key's energy is an offset every row of its head shares; subtracting it
    (which leaves softmax(q.k) as it is) leaves the quantizer far less to lose."""
    k, v = rows
    mean_k, mean_v = k.mean(axis=2, keepdims=True), v.mean(axis=2, keepdims=True)
    share = lambda x, m: float((m**2).sum(-1).mean() / (x**2).sum(-1).mean())  # noqa: E731
    assert share(k, mean_k) > 0.5 > 0.25 > share(v, mean_v)
    # the squared error of a row, over the energy softmax sees (the keys less their mean):
    # quantized less the offset, the row loses less than half of what it loses whole
    seen = float(((k - mean_k) ** 2).sum(-1).mean())
    whole = _relative_error(k, "tq3", True) * float((k.astype(np.float64) ** 2).sum(-1).mean()) / seen
    centred = _relative_error(k, "tq3", True, mean_k)
    assert centred == pytest.approx(0.0095 + 0.0095**2 / 4, rel=0.15) and centred < 0.5 * whole
