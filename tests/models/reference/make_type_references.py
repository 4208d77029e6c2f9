"""Store llama.cpp's logits on the per-type files for machines without llama.cpp.

    python tests/models/reference/make_type_references.py [TYPE ...] [--repack]

Makes each file with tests/models/quantized_files.py (cached), runs llama.cpp on it as
tests/models/type_fidelity.py describes and writes reference/types/<type>.json: the
file's SHA-256 (a test whose file differs does not compare), llama.cpp's build facts,
and per case the prompt, llama.cpp's greedy tokens and its top-10 logits at every step
(float32 values, stored exactly).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import quantized_files  # noqa: E402
import type_fidelity as tf  # noqa: E402
from llamacpp_driver import llama_cpp_facts  # noqa: E402

DEFAULT = ("Q5_K", "Q3_K", "Q2_K", "IQ4_NL", "F16", "BF16", "F32", "IQ4_XS", "IQ3_S", "IQ3_XXS", "IQ2_S",
           "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("types", nargs="*", default=list(DEFAULT))
    ap.add_argument("--repack", action="store_true", help="llama.cpp as shipped (weight repacking on)")
    args = ap.parse_args()
    tf.TYPES_DIR.mkdir(parents=True, exist_ok=True)
    for t in args.types:
        path = quantized_files.make(t)
        runs = tf.llama_cpp_logits(path, repack=args.repack)
        record = {
            "format": "cera-type-reference/1",
            "type": t,
            "file": path.name,
            "file_sha256": quantized_files.sha256(path),
            "made_by": "tests/models/quantized_files.py (ggml_quantize_chunk of llama-cpp-python's library)",
            "llama_cpp": llama_cpp_facts(),
            "settings": {"n_ctx": tf.N_CTX, "n_threads": tf.THREADS, "flash_attn": "auto",
                         "use_extra_bufts": args.repack, "steps": tf.STEPS},  # fmt: skip
            "cases": [
                {"id": cid, "prompt_tokens": tf.prompts()[cid], "tokens": tokens,
                 "top10": [tf.top(row) for row in logits]}  # fmt: skip
                for cid, (tokens, logits) in runs.items()
            ],
        }
        out = tf.reference_path(t, args.repack)
        out.write_text(json.dumps(record, indent=1) + "\n")
        print(out, out.stat().st_size)


if __name__ == "__main__":
    main()
