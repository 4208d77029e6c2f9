"""A real model (SmolLM2-135M: heads of 64, so keys and values are kept turned) on the
Vulkan backend with q8_0 and q4_0 KV caches, against the CPU backend with the same cache
type; `cera perplexity --device vulkan --kv-type q8_0`.

Why these tolerances. The two backends already differ with an f16 cache: the CPU
quantizes activations to 8 bits for the quantized products and the query for the key dot
products, the GPU keeps f32 (tests/backend_vulkan/test_greedy.py). Measured on lavapipe
over one pass of the prompt and 16 greedy tokens (largest |difference| over the largest
|logit| of a position): f16 0.056-0.061 between the backends; q8_0 0.049 (the CPU's own
q8_0 against its f16: 0.053); q4_0 0.18 (the CPU's own q4_0 against its f16: 0.21: a 4-bit
code is an eighth of its block's scale, so the activations' differences flip codes). The
bounds, 0.1 for q8_0 and 0.35 for q4_0, leave room for another CPU's SIMD; a kernel
error (a row left unturned, a nibble misplaced) moves the logits by more than the
largest logit. The tokens are compared where the CPU's choice is clear (its top-two
margin above `MARGIN`, as test_greedy.py does): the positions where the two differed
had CPU margins of 0.03-0.45.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cera.testing.greedy import MARGIN

from .conftest import needs_vulkan

PROMPT = "The lighthouse keeper climbed the sixty-two steps every evening and"
CLEAR = "The capital of France is"  # the CPU's first 5 (q8_0) and 10 (q4_0) choices are clear
TOLERANCE = {"q8_0": 0.1, "q4_0": 0.35}
PPL = Path(__file__).parents[1] / "models" / "reference" / "perplexity"


@pytest.fixture(scope="module")
def models(smollm2_path):
    import cera

    cpu = cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    vk = cera.load(str(smollm2_path), device="vulkan", quiet=True)
    yield cpu, vk
    cpu.close()
    vk.close()


def _greedy(model, kv_type, n, prompt=PROMPT):
    s = model.new_session(n_ctx=96 if len(prompt) < 200 else 256, kv_type=kv_type)
    s.append_text(prompt)
    return s.generate(max_tokens=n, temperature=0, ignore_eos=True).tokens


def _all_logits(model, kv_type, seq):
    from cera.generation.runtime import SeqStep
    from cera.graph.builder import ALL_LOGITS

    st = model.runner.new_state(len(seq) + 2, kv_type=kv_type)
    assert st.kv_type == kv_type
    slot = st.acquire()
    out = model.runner.forward(st, [SeqStep(slot, seq, range(len(seq)))], ALL_LOGITS)["logits"]
    return np.asarray(out, np.float64)


@needs_vulkan
@pytest.mark.parametrize("kv_type", ["q8_0", "q4_0"])
def test_logits_and_greedy_tokens_match_the_cpu_backend(models, kv_type):
    cpu, vk = models
    n = 10
    want = _greedy(cpu, kv_type, n, CLEAR)
    got = _greedy(vk, kv_type, n, CLEAR)  # the decode path: a quantized store and read each step
    seq = cpu.tokenize(CLEAR) + want
    a, b = _all_logits(cpu, kv_type, seq), _all_logits(vk, kv_type, seq)  # the prompt path
    scale = np.maximum(1.0, np.abs(a).max(axis=1))
    err = float((np.abs(a - b).max(axis=1) / scale).max())
    assert err <= TOLERANCE[kv_type], err
    top2 = np.sort(a, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > MARGIN
    assert clear.sum() >= len(seq) // 3
    assert np.array_equal(np.argmax(a, 1)[clear], np.argmax(b, 1)[clear])
    # free-running tokens agree up to the CPU's first unclear choice after the prompt
    margins = top2[len(seq) - n - 1 : -1, 1] - top2[len(seq) - n - 1 : -1, 0]
    first_unclear = next((i for i, m in enumerate(margins) if m <= MARGIN), n)
    assert first_unclear >= 5
    assert got[:first_unclear] == want[:first_unclear]


@needs_vulkan
def test_the_cache_is_a_quarter_or_an_eighth_of_f32(models):
    """Bytes of the device cache per type: q8_0 34 and q4_0 18 bytes a block of 32."""
    _cpu, vk = models
    sizes = {}
    for t in ("f32", "f16", "q8_0", "q4_0"):
        st = vk.runner.new_state(64, kv_type=t)
        sizes[t] = sum(kv.nbytes for kv in (*st.k.values(), *st.v.values()))
    cells = 30 * 2 * 3 * 64  # layers x (k, v) x kv heads x cells
    assert sizes == {"f32": cells * 64 * 4, "f16": cells * 64 * 2, "q8_0": cells * 68, "q4_0": cells * 36}


@needs_vulkan
@pytest.mark.slow
def test_checkpoint_batching_and_context_shift_keep_the_type(models, tmp_path):
    """Everything that keeps a cache keeps its type on the Vulkan backend too: a checkpoint
    continues exactly and is refused by an f16 session, batched decoding is decoding alone,
    and a full context shifts (keys re-rotated and quantized again)."""
    from cera.formats.checkpoint import CheckpointError

    _cpu, vk = models
    s = vk.new_session(n_ctx=96, kv_type="q4_0")
    s.append_text(PROMPT)
    s.generate(max_tokens=3, temperature=0, ignore_eos=True)
    s.save(tmp_path / "a.ckpt")
    rest = s.generate(max_tokens=5, temperature=0, ignore_eos=True).tokens
    t = vk.new_session(n_ctx=96, kv_type="q4_0")
    t.load(tmp_path / "a.ckpt")
    assert t.generate(max_tokens=5, temperature=0, ignore_eos=True).tokens == rest
    with pytest.raises(CheckpointError, match="holds a q4_0 KV cache; this session's is f16"):
        vk.new_session(n_ctx=96, kv_type="f16").load(tmp_path / "a.ckpt")
    prompts = [PROMPT, "Salt crusted on the windows, and the keeper"]
    alone = [_greedy(vk, "q8_0", 5) if p == PROMPT else None for p in prompts]
    s2 = vk.new_session(n_ctx=96, kv_type="q8_0")
    s2.append_text(prompts[1])
    alone[1] = s2.generate(max_tokens=5, temperature=0, ignore_eos=True).tokens
    sched = vk.scheduler(n_slots=2, n_ctx=96, kv_type="q8_0")
    got = sched.generate_many(prompts, max_tokens=5, temperature=0, ignore_eos=True)
    assert [g.tokens for g in got] == alone
    s3 = vk.new_session(n_ctx=32, kv_type="q4_0")
    s3.append_text(PROMPT)
    out = s3.generate(max_tokens=30, temperature=0, ignore_eos=True, context_shift=True)
    assert out.n_generated == 30 and s3.n_tokens <= 32


@needs_vulkan
@pytest.mark.slow
def test_the_prefix_cache_serves_each_cache_type_its_own_rows(models):
    _cpu, vk = models
    text = PROMPT * 6  # 72 tokens: past the prefix cache's 64-token minimum
    want = {t: _greedy(vk, t, 3, text) for t in ("f16", "q4_0")}
    cache = vk.enable_prefix_cache()
    try:
        for t in ("q4_0", "f16", "q4_0", "f16"):
            assert _greedy(vk, t, 3, text) == want[t], t
        assert cache.hits >= 2
    finally:
        vk.prefix_cache = None


@needs_vulkan
@pytest.mark.slow
def test_perplexity_on_vulkan_with_a_q8_0_cache(smollm2_path, models):
    """`cera perplexity --device vulkan --kv-type q8_0` on one chunk of 128 tokens: the CPU's
    figure with the same cache (cera.generation.perplexity) within 2% (measured on
    lavapipe: 25.280 against the CPU's 25.195, 0.34%)."""
    from cera.generation.perplexity import perplexity

    cpu, _vk = models
    text = (PPL / "text.txt").read_text()
    want = perplexity(cpu, text, n_ctx=128, kv_type="q8_0", max_chunks=1)
    r = subprocess.run([sys.executable, "-m", "cera_cli.main", "perplexity", "-m", str(smollm2_path), "-f",
                        str(PPL / "text.txt"), "-c", "128", "--chunks", "1", "--device", "vulkan", "--kv-type", "q8_0",
                        "--json"], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["kv_type"] == "q8_0" and got["chunks"] == 1
    print(f"perplexity of one chunk with a q8_0 cache: vulkan {got['ppl']:.4f}, cpu {want.ppl:.4f}")
    assert got["ppl"] == pytest.approx(want.ppl, rel=0.02), (got["ppl"], want.ppl)
    st = _vk.runner.new_state(128, kv_type="q8_0")
    caches = 30 * 2 * 3 * 128 * 68  # layers x (k, v) x kv heads x cells x row bytes
    assert sum(kv.nbytes for kv in (*st.k.values(), *st.v.values())) == caches
    assert got["kv_bytes"] == st.nbytes() < caches + 4096  # and the cells' positions
