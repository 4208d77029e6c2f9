"""mistral3's attention temperature on its tiny file (reference/make_tiny_gguf.py: YaRN
with an original context of 32, llama 4's beta 0.1). Its logits against llama.cpp are
test_fidelity.py's (data/tiny-mistral3.json); here the temperature itself: the per-row
factors worked out by hand from llama.cpp's llm_graph_input_attn_temp, and that they
matter (the same file without the key computes other logits past position 32)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

import cera
from cera.errors import ModelConfigError

TINY = Path(__file__).parent / "reference" / "tiny" / "tiny-mistral3.gguf"
pytestmark = pytest.mark.skipif(not TINY.exists(), reason="tiny-mistral3.gguf is made by reference/make_tiny_gguf.py")

sys.path.insert(0, str(Path(__file__).parents[1] / "audio"))
from gguf_edit import DROP, rewrite  # noqa: E402


@pytest.fixture(scope="module")
def loaded():
    with cera.load(TINY, device="cpu", threads=2, quiet=True) as m:
        yield m


def test_the_temperature_steps_every_original_context(loaded):
    c = loaded.model.config
    assert (c.temperature_scale, c.temperature_floor) == (pytest.approx(0.1), 32)
    factors = loaded.model.position_inputs(np.array([0, 31, 32, 63, 64, 100, 4095], np.int32))["attn_temperature"]
    assert factors.shape == (7, c.attn.n_head, c.attn.head_dim_k)
    want = [1.0, 1.0, 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(3), 1 + 0.1 * math.log(4),
            1 + 0.1 * math.log(128)]  # fmt: skip
    np.testing.assert_allclose(factors[:, 0, 0], want, rtol=1e-6)
    assert (factors == factors[:, :1, :1]).all()  # one value per row


def _logits(m, tokens):
    s = m.new_session(n_ctx=len(tokens) + 4, n_batch=len(tokens), kv_type="f32")
    s.append_tokens(tokens)
    return s.evaluate()


def test_the_temperature_changes_logits_only_past_the_original_context(loaded, tmp_path):
    path = rewrite(TINY, tmp_path / "m.gguf", kv={"mistral3.attention.temperature_scale": DROP})
    tokens = [(7 * i + 3) % 500 for i in range(48)]
    with cera.load(path, device="cpu", threads=2, quiet=True) as plain:
        assert plain.model.position_inputs(np.arange(4, dtype=np.int32)) == {}
        np.testing.assert_array_equal(_logits(plain, tokens[:32]), _logits(loaded, tokens[:32]))
        assert np.abs(_logits(plain, tokens) - _logits(loaded, tokens)).max() > 1e-3


def test_a_temperature_without_an_original_context_is_refused(tmp_path):
    path = rewrite(TINY, tmp_path / "m.gguf", kv={"mistral3.rope.scaling.original_context_length": DROP,
                                                    "mistral3.context_length": DROP})  # fmt: skip
    with pytest.raises(ModelConfigError, match="temperature_scale"):
        cera.load(path, device="cpu", quiet=True)
