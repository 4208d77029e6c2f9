"""llama.cpp's perplexity of perplexity/text.txt, per KV cache type, stored for cera's tests.

llama-cpp-python ships no llama-perplexity binary, so this computes what its
`perplexity()` (tools/perplexity/perplexity.cpp, without --ppl-stride) computes, from
llama.cpp's own tokens and logits through the C API (`llamacpp_driver`):

- the text tokenized once with ``add_special=True, parse_special=False``
  (``common_tokenize(ctx, text, true)``); at least 2 * n_ctx tokens;
- chunks of n_ctx tokens (the rest dropped), each from a cleared cache, its first token
  replaced by BOS when the vocabulary adds one, evaluated as one batch (n_batch = n_ctx, as
  llama-perplexity sets it for a context of n_ctx);
- the tokens after positions n_ctx/2 .. n_ctx-2 scored by its ``log_softmax``: the maximum
  subtracted and ``expf`` in float32, the sum in double;
- PPL = exp(mean NLL), its "+/-" = sqrt((mean(NLL^2) - mean^2) / (count - 1)) * PPL.

The context uses llama.cpp's defaults (flash attention "auto", which is on for these CPU
runs, and must be for a quantized V cache) with the KV cache types set as -ctk/-ctv set
them. Run where llama-cpp-python 0.3.36 is installed:

    python tests/models/reference/make_perplexity_reference.py [--only NAME,...]

writes perplexity/<model>.json. tests/models/test_perplexity.py compares cera with it,
and with llama.cpp live where llama_cpp is importable (`llama_perplexity` below).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TEXT = HERE / "perplexity" / "text.txt"
OUT = HERE / "perplexity"
MODELS = ("smollm2-135m-instruct-q4_1", "gemma3-270m-q4_k_m")
N_CTX = (128, 256)
KV_TYPES = ("f16", "q8_0", "q4_0")
THREADS = 2


def nll_rows(logits: np.ndarray, targets) -> np.ndarray:
    """-log_softmax(logits[i])[targets[i]], as perplexity.cpp's log_softmax computes it."""
    rows = np.asarray(logits, np.float32)
    shifted = rows - rows.max(axis=1, keepdims=True)
    lse = np.log(np.exp(shifted).sum(axis=1, dtype=np.float64))
    return lse - shifted[np.arange(len(targets)), np.asarray(targets)].astype(np.float64)


def summary(nll: np.ndarray, n_chunks: int) -> dict:
    count = len(nll)
    mean = float(nll.sum()) / count
    var = float((nll * nll).sum()) / count - mean * mean
    ppl = math.exp(mean)
    per_chunk = np.asarray(nll).reshape(n_chunks, -1)
    running = [math.exp(float(per_chunk[: i + 1].sum()) / per_chunk[: i + 1].size) for i in range(n_chunks)]
    return {"ppl": ppl, "ppl_stderr": math.sqrt(var / (count - 1)) * ppl if var > 0 else 0.0, "chunks": n_chunks,
            "tokens": count, "chunk_ppl": running}  # fmt: skip


def llama_perplexity(path, text: str, n_ctx: int, type_k: str = "f16", type_v: str = "f16",
                     threads: int = THREADS, max_chunks: int | None = None) -> dict:  # fmt: skip
    """llama-perplexity's figures for ``text`` with chunks of ``n_ctx`` (module docstring),
    with every scored token's NLL; ``max_chunks``: the first that many chunks only
    (llama-perplexity's --chunks)."""
    sys.path.insert(0, str(HERE))
    import llama_cpp as L
    from llamacpp_driver import ContextSettings, LlamaCppModel

    model = LlamaCppModel(path, ContextSettings(n_ctx=n_ctx, n_threads=threads, type_k=type_k, type_v=type_v))
    try:
        tokens = model.tokenize(text, add_special=True, parse_special=False)
        if len(tokens) < 2 * n_ctx:
            raise ValueError(f"{len(tokens)} tokens: llama-perplexity needs at least {2 * n_ctx}")
        add_bos = bool(L.llama_vocab_get_add_bos(model.vocab))
        bos = int(L.llama_vocab_bos(model.vocab))
        first = n_ctx // 2
        n_chunks = len(tokens) // n_ctx
        if max_chunks is not None:
            n_chunks = min(n_chunks, max_chunks)
        nll = []
        for i in range(n_chunks):
            chunk = list(tokens[i * n_ctx : (i + 1) * n_ctx])
            inputs = [bos] + chunk[1:] if add_bos else chunk
            model.reset()
            logits = model.eval(inputs, all_logits=True)
            nll.append(nll_rows(logits[first : n_ctx - 1], chunk[first + 1 :]))
        nll = np.concatenate(nll)
        out = summary(nll, n_chunks)
        out.update(nll=[float(x) for x in nll], text_tokens=tokens, flash_attn=model.flash_attn_resolved(),
                   type_k=type_k, type_v=type_v, n_ctx=n_ctx)  # fmt: skip
        return out
    finally:
        model.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=None, help="models, comma-separated (default: all)")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from llamacpp_driver import llama_cpp_facts

    from cera.sources import bundles

    text = TEXT.read_text(encoding="utf-8")
    for name in args.only.split(",") if args.only else MODELS:
        path = bundles.fetch_file(name, quiet=True)
        runs = []
        for n_ctx in N_CTX:
            for kv in KV_TYPES:
                r = llama_perplexity(path, text, n_ctx, kv, kv)
                print(f"{name} n_ctx={n_ctx} {kv}: PPL = {r['ppl']:.4f} +/- {r['ppl_stderr']:.5f} "
                      f"({r['chunks']} chunks, flash attention {r['flash_attn']})", flush=True)  # fmt: skip
                runs.append(r)
        tokens = runs[0].pop("text_tokens")
        for r in runs[1:]:
            assert r.pop("text_tokens") == tokens
        record = {"model": name, "file": Path(path).name, "text": TEXT.name, "text_tokens": tokens,
                  "threads": THREADS, "runs": runs, "llama_cpp": llama_cpp_facts()}  # fmt: skip
        OUT.mkdir(exist_ok=True)
        (OUT / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
