"""Record llama.cpp's tokenizer on tiny files whose pre-tokenizer is theirs alone.

A tiny file's greedy prompts (data/) are short ASCII; a pre-tokenizer's rules (digit runs,
contractions, letters of other scripts, newlines) show on the corpus of
tests/core/data/tokenizer/make_llama_reference.py. This writes, for each file named,
`tokenizer/<name>.json`: that corpus tokenized by llama.cpp with (add_special,
parse_special) (False, False) and (True, True), the detokenized bytes, pieces of a sample
of ids, the special ids and the end-of-generation set (make_llama_reference.record).

Run from the repository root with llama-cpp-python 0.3.36 installed:
    python tests/models/reference/make_tiny_tokenizer_reference.py [--only tiny-minicpm5]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "core" / "data" / "tokenizer"))
from make_llama_reference import CORPUS, record  # noqa: E402

FILES = ("tiny-minicpm5",)  # pre-tokenizer "minicpm5"


def main() -> int:
    import llama_cpp

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated file names (default: all of FILES)")
    args = ap.parse_args()
    out_dir = HERE / "tokenizer"
    out_dir.mkdir(exist_ok=True)
    for name in args.only.split(",") if args.only else FILES:
        rec = record(HERE / "tiny" / f"{name}.gguf", [(False, False), (True, True)], long_text=False)
        rec |= {"llama_cpp_python": llama_cpp.__version__, "corpus": CORPUS}
        out = out_dir / f"{name}.json"
        out.write_text(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
        print(f"wrote {out} ({out.stat().st_size} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
