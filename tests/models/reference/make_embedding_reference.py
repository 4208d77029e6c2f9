"""llama.cpp's embeddings of fixed texts, for cera's embedding tests.

    /work/main/.venv/bin/python tests/models/reference/make_embedding_reference.py [--only NAME]

Runs llama.cpp through llama-cpp-python 0.3.36 (``Llama(embedding=True)``, 2 threads,
n_ctx 2048, the file's own pooling) and writes ``embeddings/<name>.json``: the texts,
llama.cpp's token ids for each, and its L2-normalised embedding of each (``Llama.embed``
with ``normalize=True``), rounded to 7 decimals. Models: the real nomic-embed-text v1.5
F16 file (fetched through ``cera.sources.bundles``) and the tiny random-weight encoders in tiny/.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

TEXTS = [
    "search_query: What is the capital of France?",
    "search_document: Paris is the capital and largest city of France.",
    "search_document: The mitochondrion is the powerhouse of the cell.",
    "hello world",
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings map text to vectors; similar meanings land close together.",
    "def add(a, b):\n    return a + b",
    "Ünïcödé, accents and CJK: 東京は日本の首都です。",
    "a",
    " ".join(["A longer passage that repeats itself to make a sequence of a few hundred tokens."] * 20),
]


def sources(only: set[str] | None) -> list[tuple[str, Path]]:
    out = []
    if not only or "nomic-embed-text-v1.5-f16" in only:
        from cera.sources import bundles

        out.append(("nomic-embed-text-v1.5-f16", Path(bundles.fetch_file("nomic-embed-text-v1.5-f16", quiet=True))))
    for path in sorted((HERE / "tiny").glob("tiny-*bert*.gguf")):
        if not only or path.stem in only:
            out.append((path.stem, path))
    return out


def run(name: str, path: Path) -> dict:
    import llama_cpp
    from llama_cpp import Llama

    t0 = time.time()
    llm = Llama(model_path=str(path), embedding=True, n_threads=2, n_threads_batch=2, n_ctx=2048, n_batch=2048,
                n_ubatch=2048, verbose=False)  # fmt: skip
    cases = []
    for text in TEXTS:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        vec = np.asarray(llm.embed(text, normalize=True), np.float64)
        cases.append({"text": text, "tokens": ids, "embedding": [round(float(v), 7) for v in vec]})
    pooling = int(llama_cpp.llama_pooling_type(llm.ctx))
    llm.close()
    from llamacpp_driver import sha256_of

    return {
        "format": "cera-llamacpp-embeddings/1",
        "model": {"name": name, "file": path.name, "sha256": sha256_of(path), "size_bytes": path.stat().st_size},
        "llama_cpp": {"llama_cpp_python": llama_cpp.__version__},
        "settings": {
            "n_ctx": 2048,
            "n_batch": 2048,
            "n_threads": 2,
            "pooling_type": pooling,
            "normalize": True,
            "api": "llama_cpp.Llama(embedding=True).embed(text, normalize=True)",
        },
        "cases": cases,
        "seconds": round(time.time() - t0, 1),
    }


DECODER_TEXTS = ["The quick brown fox jumps over the lazy dog.", "def add(a, b):\n    return a + b", "hello"]


def run_decoder(name: str, path: Path) -> dict:
    """A decoder's hidden states after the final norm, as llama.cpp gives them with
    pooling none (one vector per token), mean and last, not normalised."""
    import llama_cpp
    from llama_cpp import Llama
    from llamacpp_driver import sha256_of

    out = {"format": "cera-llamacpp-embeddings/1",
           "model": {"name": name, "file": path.name, "sha256": sha256_of(path)},
           "llama_cpp": {"llama_cpp_python": llama_cpp.__version__},
           "settings": {"n_ctx": 512, "n_threads": 2, "normalize": False,
                        "api": "llama_cpp.Llama(embedding=True, pooling_type=...).embed(text, normalize=False)"},
           "cases": [{"text": t} for t in DECODER_TEXTS]}  # fmt: skip
    for pooling, kind in (("none", llama_cpp.LLAMA_POOLING_TYPE_NONE), ("mean", llama_cpp.LLAMA_POOLING_TYPE_MEAN),
                          ("last", llama_cpp.LLAMA_POOLING_TYPE_LAST)):  # fmt: skip
        llm = Llama(model_path=str(path), embedding=True, n_threads=2, n_ctx=512, pooling_type=kind, verbose=False)
        for case in out["cases"]:
            vec = np.asarray(llm.embed(case["text"], normalize=False), np.float64)
            case[pooling] = np.round(vec, 6).tolist()
        llm.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--out", default=str(HERE / "embeddings"))
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE))
    only = set(args.only.split(",")) if args.only else None
    for name in ("tiny-lfm2",):
        if not only or name in only:
            out = Path(args.out) / f"{name}.json"
            out.write_text(json.dumps(run_decoder(name, HERE / "tiny" / f"{name}.gguf")) + "\n")
            print(f"{name}: wrote {out}", flush=True)
    for name, path in sources(only):
        record = run(name, path)
        out = Path(args.out) / f"{name}.json"
        out.write_text(json.dumps(record, ensure_ascii=False) + "\n")
        print(f"{name}: wrote {out} ({out.stat().st_size} bytes, {record['seconds']} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
