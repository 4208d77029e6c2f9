"""SmolLM2-135M (heads of 64: keys and values kept turned) on the Metal backend (MLX's CPU
device here) with q8_0 and q4_0 KV caches, against the CPU backend with the same type.

Tolerances as tests/backend_vulkan/test_kv_quant_model.py explains them (the backends
differ already with an f16 cache: 0.056 of the largest logit here). Measured on MLX's CPU
device over one pass of the prompt and 10 greedy tokens: q8_0 0.064, q4_0 0.21 (the CPU's
own q4_0 against its f16: 0.21); bounds 0.1 and 0.35. Tokens are compared where the CPU's
choice is clear (top-two margin above `MARGIN`)."""

from __future__ import annotations

import numpy as np
import pytest

from cera.testing.greedy import MARGIN

from .conftest import needs_mlx

CLEAR = "The capital of France is"  # the CPU's first 5 (q8_0) and 10 (q4_0) choices are clear
TOLERANCE = {"q8_0": 0.1, "q4_0": 0.35}


@pytest.fixture(scope="module")
def models(smollm2_path):
    import cera

    cpu = cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    mt = cera.load(str(smollm2_path), device="metal", quiet=True)
    yield cpu, mt
    cpu.close()
    mt.close()


def _greedy(model, kv_type, n):
    s = model.new_session(n_ctx=96, kv_type=kv_type)
    s.append_text(CLEAR)
    return s.generate(max_tokens=n, temperature=0, ignore_eos=True).tokens


def _all_logits(model, kv_type, seq):
    from cera.generation.runtime import SeqStep
    from cera.graph.builder import ALL_LOGITS

    st = model.runner.new_state(len(seq) + 2, kv_type=kv_type)
    slot = st.acquire()
    return np.asarray(model.runner.forward(st, [SeqStep(slot, seq, range(len(seq)))], ALL_LOGITS)["logits"], np.float64)


@needs_mlx
@pytest.mark.parametrize("kv_type", ["q8_0", "q4_0"])
def test_logits_and_greedy_tokens_match_the_cpu_backend(models, kv_type):
    cpu, mt = models
    assert mt.backend.name == "metal"
    n = 10
    want, got = _greedy(cpu, kv_type, n), _greedy(mt, kv_type, n)
    seq = cpu.tokenize(CLEAR) + want
    a, b = _all_logits(cpu, kv_type, seq), _all_logits(mt, kv_type, seq)
    err = float((np.abs(a - b).max(axis=1) / np.maximum(1.0, np.abs(a).max(axis=1))).max())
    assert err <= TOLERANCE[kv_type], err
    top2 = np.sort(a, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > MARGIN
    assert np.array_equal(np.argmax(a, 1)[clear], np.argmax(b, 1)[clear])
    margins = (top2[:, 1] - top2[:, 0])[len(seq) - n - 1 : -1]
    first_unclear = next((i for i, m in enumerate(margins) if m <= MARGIN), n)
    assert first_unclear >= 5 and got[:first_unclear] == want[:first_unclear]


@needs_mlx
def test_the_cache_takes_the_blocks_bytes(models):
    _cpu, mt = models
    sizes = {}
    for t in ("f16", "q8_0", "q4_0"):
        st = mt.runner.new_state(64, kv_type=t)
        sizes[t] = sum(kv.nbytes for kv in (*st.k.values(), *st.v.values()))
    cells = 30 * 2 * 3 * 64  # layers x (k, v) x kv heads x cells
    assert sizes == {"f16": cells * 64 * 2, "q8_0": cells * 68, "q4_0": cells * 36}


@needs_mlx
@pytest.mark.slow
def test_a_checkpoint_and_batching_keep_the_type(models, tmp_path):
    from cera.formats.checkpoint import CheckpointError

    _cpu, mt = models
    s = mt.new_session(n_ctx=96, kv_type="q4_0")
    s.append_text(CLEAR)
    s.generate(max_tokens=3, temperature=0, ignore_eos=True)
    s.save(tmp_path / "a.ckpt")
    rest = s.generate(max_tokens=5, temperature=0, ignore_eos=True).tokens
    t = mt.new_session(n_ctx=96, kv_type="q4_0")
    t.load(tmp_path / "a.ckpt")
    assert t.generate(max_tokens=5, temperature=0, ignore_eos=True).tokens == rest
    with pytest.raises(CheckpointError, match="holds a q4_0 KV cache; this session's is f16"):
        mt.new_session(n_ctx=96, kv_type="f16").load(tmp_path / "a.ckpt")
    prompts = [CLEAR, "Salt crusted on the windows, and the keeper"]
    alone = []
    for p in prompts:
        a = mt.new_session(n_ctx=96, kv_type="q8_0")
        a.append_text(p)
        alone.append(a.generate(max_tokens=5, temperature=0, ignore_eos=True).tokens)
    got = mt.scheduler(n_slots=2, n_ctx=96, kv_type="q8_0").generate_many(prompts, max_tokens=5, temperature=0,
                                                                            ignore_eos=True)  # fmt: skip
    assert [g.tokens for g in got] == alone
    shifted = mt.new_session(n_ctx=32, kv_type="q4_0")
    shifted.append_text(CLEAR)
    out = shifted.generate(max_tokens=40, temperature=0, ignore_eos=True, context_shift=True)
    assert out.n_generated == 40 and shifted.n_tokens <= 32
