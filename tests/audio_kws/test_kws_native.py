"""The C kernels against the numpy code they replace: the same integers."""

from __future__ import annotations

import numpy as np
import pytest
from kws_cases import MODELS, read_clip

from cera_audio_kws import native
from cera_audio_kws.convert import graph_from_tflite
from cera_audio_kws.frontend import MicroFrontend
from cera_audio_kws.network import StreamingNetwork

pytestmark = pytest.mark.skipif(not native.available(), reason="the C kernels are not built")


def _features(pcm, use_native):
    fe = MicroFrontend(native=use_native)
    return np.concatenate([b.copy() for b in fe.process(pcm)])


def test_frontend_c_equals_numpy():
    rs = np.random.RandomState(11)
    speech = read_clip("negative_near_miss")
    for pcm in (speech, np.clip(speech.astype(np.int32) * 20, -32768, 32767).astype(np.int16),
                rs.randint(-32768, 32768, 16000).astype(np.int16), np.zeros(3200, np.int16), speech // 300):
        np.testing.assert_array_equal(_features(pcm, True), _features(pcm, False))


@pytest.mark.parametrize("model", MODELS)
def test_network_c_equals_numpy(model, model_files):
    graph = graph_from_tflite(model_files[model][0])
    a, b = StreamingNetwork(graph, native=True), StreamingNetwork(graph, native=False)
    assert a.native and not b.native
    rs = np.random.RandomState(4)
    q = np.empty((3, 40), np.int8)
    for _ in range(120):
        feats = np.abs(rs.normal(12, 10, (3, 40))) * (1 + 3 * (rs.rand(3, 1) > 0.9))
        a.quantize_features(feats, q)
        assert a.step_quantized(q) == b.step_quantized(q)


def test_numpy_can_be_forced(monkeypatch):
    monkeypatch.setenv("CERA_KWS_NUMPY", "1")
    assert not MicroFrontend().native
