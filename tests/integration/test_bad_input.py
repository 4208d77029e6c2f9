"""Bad input to the public API raises a CeraError subclass that names the problem: never a
bare ValueError, TypeError, MemoryError or RuntimeError from numpy or the kernels.

Every call below is something a user (or a server passing a user's request through) can
get wrong; each must fail with a message that says what was wrong.
"""

from __future__ import annotations

import numpy as np
import pytest

import cera
from cera.errors import CeraError
from cera.generation.sink import CollectingSink, FinishReason


@pytest.fixture(scope="module")
def loaded(smollm2_path):
    m = cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    yield m
    m.close()


def _raises_cera(fn, match=None):
    with pytest.raises(CeraError) as info:
        fn()
    assert not isinstance(info.value, (MemoryError, RuntimeError)), type(info.value)
    if match:
        assert match in str(info.value), str(info.value)
    return info.value


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"device": "no-such-device"}, "no-such-device"),
        ({"device": "cpu", "threads": 0}, "threads"),
        ({"device": "cpu", "threads": "two"}, "threads"),
        ({"device": "cpu", "nonsense_option": 1}, "nonsense_option"),
        ({"device": "cpu", "memory_limit": -5}, "needs about"),
    ],
)
def test_load_options(smollm2_path, kwargs, match):
    _raises_cera(lambda: cera.load(str(smollm2_path), quiet=True, **kwargs), match)


def test_load_sources(tmp_path):
    _raises_cera(lambda: cera.load(str(tmp_path / "missing.gguf")), "missing.gguf")
    _raises_cera(lambda: cera.load(str(tmp_path)))
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file at all")
    _raises_cera(lambda: cera.load(str(tmp_path / "junk.gguf")), "junk.gguf")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_ctx": 0}, "n_ctx"),
        ({"n_ctx": -3}, "n_ctx"),
        ({"n_ctx": "big"}, "n_ctx"),
        ({"n_ctx": 2**40}, "memory"),
        ({"n_batch": 0}, "n_batch"),
        ({"kv_type": "q3"}, "q3"),
    ],
)
def test_session_options(loaded, kwargs, match):
    _raises_cera(lambda: loaded.new_session(**kwargs), match)


@pytest.mark.parametrize(
    "tokens, match",
    [([-1], "outside the vocabulary"), ([10**9], "outside the vocabulary"), (["a"], "integers"), ([1.5], "integers"),
     (None, "integers"), ([[1, 2]], "integers")],
)  # fmt: skip
def test_token_ids(loaded, tokens, match):
    s = loaded.new_session(n_ctx=64)
    _raises_cera(lambda: s.append_tokens(tokens), match)
    assert s.pending == []  # nothing half-queued


@pytest.mark.parametrize(
    "options, match",
    [
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_k": -1}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"min_p": -0.1}, "min_p"),
        ({"repeat_penalty": 0}, "repeat_penalty"),
        ({"seed": "x"}, "seed"),
        ({"max_tokens": 2.5}, "max_tokens"),
        ({"stop": 5}, "stop"),
        ({"stop_tokens": ["eos"]}, "stop_tokens"),
        ({"top_logprobs": -1}, "top_logprobs"),
        ({"temprature": 0.5}, "temprature"),
    ],
)
def test_generation_options(loaded, options, match):
    s = loaded.new_session(n_ctx=64)
    s.append_text("Hi")
    _raises_cera(lambda: s.generate(**options), match)


def test_seed_minus_one_means_random(loaded):
    s = loaded.new_session(n_ctx=64)
    s.append_text("Hi")
    assert s.generate(max_tokens=2, seed=-1).n_generated <= 2


def test_session_misuse(loaded):
    s = loaded.new_session(n_ctx=16)
    _raises_cera(lambda: s.generate(max_tokens=1), "nothing to generate")
    _raises_cera(lambda: s.append_text(None), "string")
    _raises_cera(lambda: s.truncate(3), "truncate")
    _raises_cera(lambda: s.truncate("x"), "truncate")
    _raises_cera(lambda: s.restore("x"), "Checkpoint")
    s.append_tokens(list(range(1, 15)))
    s.evaluate()
    s.append_tokens(list(range(1, 10)))
    _raises_cera(lambda: s.evaluate(), "exceed")


def test_a_failure_during_generation_reaches_the_sink_and_raises_a_cera_error(loaded, monkeypatch):
    s = loaded.new_session(n_ctx=64)
    s.append_text("Hello")
    calls = {"n": 0}
    real = s._forward

    def failing(tokens, outputs, **layout):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("the device went away")
        return real(tokens, outputs, **layout)

    monkeypatch.setattr(s, "_forward", failing)
    sink = CollectingSink()
    err = _raises_cera(lambda: s.generate(max_tokens=10, temperature=0, sink=sink), "the device went away")
    assert type(err).__name__ == "GenerationError"
    assert sink.reason == FinishReason.ERROR
    assert len(sink.tokens) == 2  # what was generated before the failure was delivered


def test_tokenizer_and_template_misuse(loaded):
    _raises_cera(lambda: loaded.tokenize(None))
    _raises_cera(lambda: loaded.detokenize([-4]))
    _raises_cera(lambda: loaded.detokenize(["x"]))
    _raises_cera(lambda: loaded.chat_template.render("not a list", add_generation_prompt=True))
    _raises_cera(lambda: loaded.chat_template.render([{"role": "user"}], add_generation_prompt=True))


def test_sampler_misuse():
    from cera.generation.sampling import Sampler, SamplingOptions

    _raises_cera(lambda: SamplingOptions(top_k=-2), "top_k")
    s = Sampler(SamplingOptions(temperature=1.0, seed=1))
    _raises_cera(lambda: s.sample(np.full(4, -np.inf, np.float32)), "nothing to sample")
    _raises_cera(lambda: Sampler(SamplingOptions(temperature=0)).sample(np.full(4, np.nan, np.float32)), "logits")


def test_scheduler_misuse(loaded):
    _raises_cera(lambda: loaded.scheduler(n_slots=0), "n_slots")
    sched = loaded.scheduler(n_slots=1, n_ctx=32)
    sched.new_session()
    _raises_cera(lambda: sched.new_session(), "slots")
