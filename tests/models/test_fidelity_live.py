"""Live check against llama.cpp (llama-cpp-python): the stored reference is still what
llama.cpp produces, and cera agrees with it on a few cases. Skipped without llama_cpp.

llama.cpp is loaded as the reference data was made (reference/llamacpp_driver.py): its
defaults, 2 threads, flash attention "auto", and no weight repacking (repacked Q4_K
weights move its logits by up to 0.46, see reference/README.md).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from fidelity import REFERENCE, load_reference

import cera

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install llama-cpp-python==0.3.36)")
sys.path.insert(0, str(REFERENCE))
from llamacpp_driver import greedy_steps  # noqa: E402

NAME = "smollm2-135m-instruct-q4_1"


@pytest.fixture(scope="module")
def record():
    return load_reference(NAME)


@pytest.fixture(scope="module")
def path():
    from cera.sources import bundles

    return bundles.fetch_file(NAME, quiet=True)


@pytest.fixture(scope="module")
def live(record, path):
    """llama.cpp's greedy steps, computed now: per case, (token, top-1 logit, margin) for 8 steps."""
    return greedy_steps(path, record, 8, cases=4)


def test_llama_cpp_still_produces_the_stored_reference(record, live):
    for case in record["cases"][:4]:
        for i, (token, top1, _) in enumerate(live[case["id"]]):
            assert token == case["steps"][i]["token"], (case["id"], i)
            assert top1 == pytest.approx(case["steps"][i]["top2"][0][1], abs=1e-3)


def test_cera_agrees_with_live_llama_cpp_where_it_is_confident(record, path, live):
    with cera.load(path, device="cpu", quiet=True) as loaded:
        for case in record["cases"][:4]:
            steps = live[case["id"]]
            session = loaded.new_session(n_ctx=256, n_batch=256)
            session.append_tokens(case["prompt_tokens"])
            logits = session.evaluate()
            for i, (token, _, margin) in enumerate(steps):
                if margin > 0.5:
                    assert int(np.argmax(logits)) == token, (case["id"], i, margin)
                session.append_tokens([token])
                logits = session.evaluate()
