"""The families whose tiny files are written with gguf-py (reference/make_tiny_gguf.py:
OLMo 3, nanbeige, mistral3, gemma4) live against llama.cpp. Skipped without llama_cpp.

test_fidelity.py compares cera with the stored llama.cpp data (data/tiny-<family>.json)
everywhere; here llama.cpp runs now, loaded as the data was made (reference/llamacpp_driver.py),
and must still produce the stored greedy steps, and cera, teacher forced on llama.cpp's
live continuation, must pick llama.cpp's token wherever llama.cpp's own top-2 margin is
over 0.5 (fidelity.MARGIN).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from fidelity import MARGIN, REFERENCE, TINY, load_reference

import cera

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install llama-cpp-python==0.3.36)")
sys.path.insert(0, str(REFERENCE))
from llamacpp_driver import greedy_steps  # noqa: E402

NAMES = [n for n in ("tiny-olmo3", "tiny-nanbeige", "tiny-mistral3", "tiny-gemma4") if (TINY / f"{n}.gguf").exists()]
STEPS = 16


@pytest.mark.parametrize("name", NAMES)
def test_live_llama_cpp_reproduces_the_stored_reference_and_cera_agrees(name):
    record = load_reference(name)
    path = TINY / record["model"]["file"]
    live = greedy_steps(path, record, STEPS)
    for case in record["cases"]:
        for i, (token, top1, _) in enumerate(live[case["id"]]):
            assert token == case["steps"][i]["token"], (case["id"], i)
            assert top1 == pytest.approx(case["steps"][i]["top2"][0][1], abs=1e-3), (case["id"], i)
    with cera.load(path, device="cpu", threads=record["settings"]["n_threads"], quiet=True) as loaded:
        for case in record["cases"]:
            steps = live[case["id"]]
            n = len(case["prompt_tokens"])
            session = loaded.new_session(n_ctx=n + STEPS + 8, n_batch=n)
            session.append_tokens(case["prompt_tokens"])
            logits = session.evaluate()
            for i, (token, _, margin) in enumerate(steps):
                if margin > MARGIN:
                    assert int(np.argmax(logits)) == token, (case["id"], i, margin)
                session.append_tokens([token])
                logits = session.evaluate()
