"""gemma4 on its tiny file (reference/make_tiny_gguf.py: three sliding layers of head
dimension 16 with 2 KV heads, a full layer of 32 with 1 KV head and no attn_v). Its logits
against llama.cpp are test_fidelity.py's (data/tiny-gemma4.json); here what the family reads
from the file, and the Gemma 4 variants it refuses by name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import cera
from cera.errors import ModelConfigError

TINY = Path(__file__).parent / "reference" / "tiny" / "tiny-gemma4.gguf"
pytestmark = pytest.mark.skipif(not TINY.exists(), reason="tiny-gemma4.gguf is made by reference/make_tiny_gguf.py")

sys.path.insert(0, str(Path(__file__).parents[1] / "audio"))
from gguf_edit import rewrite  # noqa: E402


def test_each_layer_has_the_shape_of_its_kind():
    with cera.load(TINY, device="cpu", quiet=True) as m:
        model = m.model
        shapes = [(model.shape(i).n_head_kv, model.shape(i).head_dim_k) for i in range(4)]
        assert shapes == [(2, 16), (2, 16), (2, 16), (1, 32)]
        assert model.config.windows == (16, 16, 16, None)
        assert [model.layer_rope(i).n_dims for i in range(4)] == [16, 16, 16, 32]
        assert [model.layer_rope(i).base for i in range(4)] == [10000.0] * 3 + [1000000.0]
        full = model.layer_rope(3).freq_factors
        assert full[:4] == (1.0,) * 4 and min(full[4:]) == pytest.approx(1e30)  # a quarter rotates
        assert model.layers[3].attn.v is None and all(model.layers[i].attn.v is not None for i in range(3))
        assert all(s is not None and 0.5 <= s <= 1.0 for s in model.out_scales)


@pytest.mark.parametrize("key", ["attention.shared_kv_layers", "embedding_length_per_layer_input", "expert_count"])
def test_the_variants_cera_does_not_compute_are_refused_by_name(tmp_path, key):
    path = rewrite(TINY, tmp_path / "m.gguf", kv={f"gemma4.{key}": 2})
    with pytest.raises(ModelConfigError, match=key.replace(".", r"\.")):
        cera.load(path, device="cpu", quiet=True)
