"""Session reproductions: cancel() during a long prompt waited for a whole
512-token pass; a cancel() just before generate() was lost; restore() of something that
is not a checkpoint raised AttributeError."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

import cera
from cera.generation import session as session_module
from cera.errors import SessionError
from cera.generation.sink import FinishReason

TINY = Path(__file__).resolve().parents[1] / "models" / "reference" / "tiny" / "tiny-mistral.gguf"


@pytest.fixture(scope="module")
def loaded():
    m = cera.load(TINY, device="cpu", threads=1)
    yield m
    m.close()


def test_cancel_before_generate_cancels_that_generation(loaded):
    s = loaded.new_session(n_ctx=128)
    s.append_text("Hello there")
    s.cancel()
    summary = s.generate(max_tokens=8, temperature=0)
    assert summary.finish_reason == FinishReason.CANCELLED and summary.tokens == []
    # ... and only that one: the next generation runs
    summary = s.generate(max_tokens=4, temperature=0, ignore_eos=True)
    assert summary.finish_reason == FinishReason.LENGTH and len(summary.tokens) == 4


def test_a_long_prompt_is_cancelled_within_the_latency_target(loaded, monkeypatch):
    """The prompt goes in passes sized by measured time, so cancel() waits for one short
    pass, not a whole n_batch (a slow backend is simulated: 2 ms a token)."""
    monkeypatch.setattr(session_module, "CANCEL_LATENCY_S", 0.1)
    monkeypatch.setattr(session_module, "CANCEL_MIN_CHUNK", 8)
    s = loaded.new_session(n_ctx=1024, n_batch=512)
    real = s._forward
    chunks = []

    def slow_forward(tokens, outputs, **layout):
        chunks.append(len(tokens))
        time.sleep(0.002 * len(tokens))
        return real(tokens, outputs, **layout)

    monkeypatch.setattr(s, "_forward", slow_forward)
    s.append_tokens([5 + i % 400 for i in range(1000)])
    result = {}

    def run():
        result["summary"] = s.generate(max_tokens=4, temperature=0)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    s.cancel()
    t.join(10)
    waited = time.monotonic() - t0
    assert result["summary"].finish_reason == FinishReason.CANCELLED
    assert max(chunks[1:]) < 200, chunks  # about 0.1 s / 2 ms = 50 tokens a pass, not 512
    assert waited < 1.0, f"cancel took {waited:.2f} s"


def test_how_a_prompt_is_cut_does_not_change_its_logits(loaded):
    ids = [5 + (i * 7) % 500 for i in range(300)]
    out = []
    for responsive in (False, True):
        s = loaded.new_session(n_ctx=512, n_batch=256)
        s.append_tokens(ids)
        assert s._evaluate(session_module.LAST_LOGITS, responsive=responsive)
        out.append(s.logits.copy())
    assert np.array_equal(out[0], out[1])


@pytest.mark.parametrize("bad", [object(), None, {"tokens": []}, "checkpoint"])
def test_restore_of_something_else_is_a_session_error(loaded, bad):
    s = loaded.new_session(n_ctx=64)
    with pytest.raises(SessionError, match="restore takes a Checkpoint"):
        s.restore(bad)
