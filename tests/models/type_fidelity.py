"""cera against llama.cpp on one file per tensor type: the same logits, bit for bit.

Each file comes from quantized_files.py (SmolLM2 requantized with ggml's quantizer). A
run evaluates a few prompts of the SmolLM2 reference as one batch each (5, 13 and 39
tokens: below llama.cpp's 8-row threshold of the tiled K-quant/IQ kernels, above it, and
above the 16 rows of cera's legacy-format tiles), then STEPS greedy tokens one at a time,
llama.cpp choosing them and both engines fed the same ones. llama.cpp runs as the stored
references of tests/models/reference were made: its defaults, flash attention on, weight
repacking off unless asked (``repack=True``: llama.cpp as shipped), 2 threads.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
TYPES_DIR = HERE / "reference" / "types"
CASES = ("en_fact", "en_story", "code_py_sort")
STEPS = 8
N_CTX = 1024
THREADS = 2
TOP = 10


def prompts() -> dict[str, list[int]]:
    from fidelity import load_reference

    record = load_reference("smollm2-135m-instruct-q4_1")
    by_id = {c["id"]: c["prompt_tokens"] for c in record["cases"]}
    return {cid: by_id[cid] for cid in CASES}


def llama_cpp_logits(path, repack: bool = False) -> dict[str, tuple[list[int], list[np.ndarray]]]:
    """Per case: llama.cpp's greedy tokens and its logits after the prompt and after each."""
    sys.path.insert(0, str(HERE / "reference"))
    from llamacpp_driver import ContextSettings, LlamaCppModel

    model = LlamaCppModel(path, ContextSettings(n_ctx=N_CTX, n_threads=THREADS, use_extra_bufts=repack))
    out = {}
    try:
        for cid, prompt in prompts().items():
            model.reset()
            logits = [np.array(model.eval(prompt), dtype=np.float32)]
            tokens = []
            for _ in range(STEPS):
                tokens.append(int(np.argmax(logits[-1])))
                logits.append(np.array(model.eval([tokens[-1]]), dtype=np.float32))
            out[cid] = (tokens, logits)
    finally:
        model.close()
    return out


def cera_logits(loaded, tokens_by_case: dict[str, list[int]]) -> dict[str, list[np.ndarray]]:
    """cera's logits on the same inputs (the prompt as one batch, then the given tokens)."""
    out = {}
    for cid, prompt in prompts().items():
        session = loaded.new_session(n_ctx=N_CTX, n_batch=len(prompt))
        session.append_tokens(prompt)
        rows = [np.array(session.evaluate(), dtype=np.float32)]
        for t in tokens_by_case[cid]:
            session.append_tokens([int(t)])
            rows.append(np.array(session.evaluate(), dtype=np.float32))
        out[cid] = rows
    return out


def top(logits: np.ndarray, k: int = TOP) -> list[list]:
    order = np.lexsort((np.arange(len(logits)), -logits))[:k]
    return [[int(i), float(logits[i])] for i in order]


def reference_path(type_name: str, repack: bool = False) -> Path:
    return TYPES_DIR / f"{type_name.lower()}{'-repack' if repack else ''}.json"


def load_stored(type_name: str, repack: bool = False) -> dict | None:
    p = reference_path(type_name, repack)
    return json.loads(p.read_text()) if p.exists() else None
