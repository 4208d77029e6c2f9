"""The gated delta-net hybrids on their tiny files (reference/make_tiny_gguf.py: the text
configs of Qwen3.5-9B, Qwen3.5-35B-A3B and Qwen3-Next-80B-A3B shrunk, three linear-attention
layers then a gated attention layer; routed and shared experts in the last two).

llama.cpp's greedy tokens and logits are test_fidelity.py's (data/tiny-<family>.json) and,
live, test_tiny_families_live.py's. Here: the CPU backend against the numpy reference backend
(the op table's references, in float64), the recurrent state through everything that
rewinds or shares it (sequences decoded together, checkpoints, prompt-lookup and
draft-model speculation must give plain greedy decoding's tokens), and what the family
refuses.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import cera
from cera.errors import ModelConfigError
from cera.testing import conformance

DIR = Path(__file__).parent / "reference" / "tiny"
TINY = DIR / "tiny-qwen35.gguf"
FAMILIES = [n for n in ("qwen35", "qwen35moe", "qwen3next") if (DIR / f"tiny-{n}.gguf").exists()]
pytestmark = pytest.mark.skipif(not TINY.exists(), reason="tiny-qwen35.gguf is made by reference/make_tiny_gguf.py")

sys.path.insert(0, str(Path(__file__).parents[1] / "audio"))
from gguf_edit import DROP, rewrite  # noqa: E402

# a prompt that repeats itself, so that prompt lookup finds drafts
PROMPT = [(7 * i + 3) % 97 + 10 for i in range(12)] * 3


@pytest.fixture(scope="module")
def qwen35():
    with cera.load(TINY, device="cpu", threads=2, quiet=True) as m:
        yield m


_loaded: dict = {}


@pytest.fixture(params=FAMILIES)
def family(request):
    if request.param not in _loaded:
        _loaded[request.param] = cera.load(DIR / f"tiny-{request.param}.gguf", device="cpu", threads=2, quiet=True)
    return _loaded[request.param]


def _greedy(m, tokens, n, **kw):
    s = m.new_session(n_ctx=256)
    s.append_tokens(tokens)
    return s, s.generate(max_tokens=n, temperature=0, **kw).tokens


def test_the_layers_and_state_come_from_the_file(qwen35):
    c = qwen35.model.config
    assert c.mixers == ("ssm", "ssm", "ssm", "attention")
    assert (c.delta.n_k_heads, c.delta.n_v_heads, c.delta.dim, c.delta.d_conv) == (2, 4, 64, 4)
    assert (c.rope.n_dims, c.rope.neox) == (16, True)
    kinds = [d.kind for d in qwen35.model.state]
    assert kinds == ["conv", "ssm"] * 3 + ["kv"]


def test_the_expert_families_read_their_differences():
    moe = cera.load(DIR / "tiny-qwen35moe.gguf", device="cpu", quiet=True)
    nxt = cera.load(DIR / "tiny-qwen3next.gguf", device="cpu", quiet=True)
    with moe, nxt:
        for m in (moe, nxt):
            e = m.model.config.experts
            assert (e.n_expert, e.n_expert_used, e.n_ff_exp, e.n_ff_shexp) == (8, 2, 32, 64)
            assert m.model.layers[0].ffn.shared_gate.shape == (64, 1)
        assert moe.model.config.n_ff == 0 and nxt.model.config.n_ff == 128
        assert not moe.model.grouped_heads and nxt.model.grouped_heads
        assert moe.model.layers[0].attn.ba is None and nxt.model.layers[0].attn.ba is not None


@pytest.mark.parametrize("name", FAMILIES)
def test_cpu_logits_match_the_numpy_reference(name):
    from cera_backend_cpu.backend import CpuBackend

    worst = conformance.check_model(CpuBackend(threads=2), DIR / f"tiny-{name}.gguf", tolerance=1e-4)
    assert worst < 1e-4


def test_sequences_decoded_together_equal_each_alone(family):
    qwen35 = family
    prompts = [PROMPT[:9], PROMPT[3:20], PROMPT[5:8]]
    alone = [_greedy(qwen35, p, 6, ignore_eos=True)[1] for p in prompts]
    scheduler = qwen35.scheduler(n_slots=3, n_ctx=256)
    together = scheduler.generate_many(prompts, max_tokens=6, temperature=0, ignore_eos=True)
    assert [r.tokens for r in together] == alone


def test_a_checkpoint_restores_the_recurrent_state(family):
    qwen35 = family
    s = qwen35.new_session(n_ctx=256)
    s.append_tokens(PROMPT[:10])
    s.evaluate()
    cp = s.checkpoint()
    first = s.generate(max_tokens=8, temperature=0, ignore_eos=True).tokens
    s.restore(cp)
    assert s.generate(max_tokens=8, temperature=0, ignore_eos=True).tokens == first


def test_prompt_lookup_gives_plain_greedy_tokens_and_state(family):
    qwen35 = family
    # the first of a few repeating prompts whose greedy continuation runs 24 tokens (no EOS)
    for shift in range(8):
        prompt = [t + shift for t in PROMPT]
        plain_session, plain = _greedy(qwen35, prompt, 24)
        if len(plain) == 24:
            break
    spec_session, spec = _greedy(qwen35, prompt, 24, spec=True, spec_k=4)
    assert spec == plain and len(plain) == 24
    assert spec_session.n_evaluated > plain_session.n_evaluated  # drafts were verified, some refused
    # a rejected draft rolled the conv and delta-rule state back: the next tokens agree too
    more = dict(max_tokens=6, temperature=0)
    assert spec_session.generate(**more).tokens == plain_session.generate(**more).tokens


def test_the_model_as_its_own_draft_gives_plain_greedy_tokens(qwen35, tmp_path):
    _, plain = _greedy(qwen35, PROMPT[:14], 16)
    with cera.load(TINY, device="cpu", threads=2, quiet=True) as draft:
        qwen35.set_draft(draft)
        try:
            _, drafted = _greedy(qwen35, PROMPT[:14], 16, draft_max=4, draft_p_min=0.0)
        finally:
            qwen35.set_draft(None)
    assert drafted == plain


@pytest.mark.parametrize(
    "kv, match",
    [
        ({"qwen35.mystery_gain": 2.0}, r"qwen35\.mystery_gain"),
        ({"qwen35.nextn_predict_layers": 1}, "nextn_predict_layers"),
        ({"qwen35.ssm.inner_size": 128}, "inner_size"),
        ({"qwen35.rope.dimension_sections": [2, 2, 2, 2]}, "fourth position component"),
        ({"qwen35.ssm.group_count": 3}, "linear-attention sizes"),
        ({"qwen35.ssm.conv_kernel": DROP}, "ssm.conv_kernel"),
        ({"qwen35.feed_forward_length": DROP}, "feed_forward_length"),  # the dense family needs it
        ({"qwen35moe.expert_used_count": 9}, "experts of 32 per token out of 8"),
        ({"qwen35moe.expert_feed_forward_length": DROP}, "expert_feed_forward_length"),
        ({"qwen3next.rope.dimension_sections": [3, 3, 2, 0]}, "no M-RoPE sections"),
    ],
)
def test_what_the_family_does_not_understand_is_refused(tmp_path, kv, match):
    arch = next(iter(kv)).split(".")[0]
    path = rewrite(DIR / f"tiny-{arch}.gguf", tmp_path / "m.gguf", kv=kv)
    with pytest.raises(ModelConfigError, match=match):
        cera.load(path, device="cpu", quiet=True)


def test_without_the_layer_list_the_interval_decides(tmp_path):
    path = rewrite(TINY, tmp_path / "m.gguf", kv={"qwen35.attention.recurrent_layers": DROP})
    with cera.load(path, device="cpu", quiet=True) as m:
        assert m.model.config.mixers == ("ssm", "ssm", "ssm", "attention")
