"""KV cache types: perplexity, bytes a token, and (optionally) decode speed at depth, per type.

    python benchmarks/bench_kv_cache.py [--model BUNDLE_OR_PATH] [--types f16,q8_0,q4_0,tq3,tq2]
        [--text FILE] [--ctx 256] [--chunks N] [--depths 4096,16384] [--n-gen 64] [--reps 3]
        [--threads N] [--device cpu] [--no-llama-cpp] [--json OUT]

For each cache type:

- perplexity of ``--text`` (default: tests/models/reference/perplexity/text.txt, 771 tokens
  of SmolLM2's vocabulary: three chunks of 256) with chunks of ``--ctx`` tokens, by
  `cera.generation.perplexity` (llama-perplexity's definition), and llama.cpp's for the
  types it has (f16, q8_0, q4_0; computed from its logits as
  tests/models/reference/make_perplexity_reference.py does, over the same chunks) where
  llama-cpp-python is installed, with a note where it is not;
- bytes a token takes in the attention caches (`cera.state.kv_cell_bytes`);
- with ``--depths``: decode tokens/s after ``depth`` cells, for each depth: the context is
  filled once with random tokens through an f16 cache, its rows converted to each type
  (`cera.state.convert_snapshot`, as a pass would have stored them), then ``--n-gen``
  greedy steps are timed (all logits read back each step, as llama-bench's tg); the median
  of ``--reps``. Filling 16,384 cells takes minutes on 2 cores, so no depth is the default.

The default run (SmolLM2-135M, five types, chunks of 256, llama.cpp beside cera) takes a
few minutes on 2 cores. Speeds are only comparable from one quiet machine; the
perplexities are exact figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "models" / "reference"
LLAMA_TYPES = ("f16", "q8_0", "q4_0")


def _decode_speed(loaded, snap_f16, prompt, kv_type, n_gen, reps, n_ctx):
    from cera.generation.session import Checkpoint
    from cera.state import convert_snapshot

    cp = Checkpoint(tuple(prompt), (), convert_snapshot(snap_f16, loaded.model.state, kv_type), None)
    samples = []
    for _ in range(reps + 1):  # the first run warms up
        s = loaded.new_session(n_ctx=n_ctx, kv_type=kv_type)
        s.restore(cp)
        s.append_tokens([int(prompt[-1])])
        logits = s.evaluate()
        t0 = time.perf_counter()
        for _ in range(n_gen):
            s.append_tokens([int(np.argmax(logits))])
            logits = s.evaluate()
        samples.append(n_gen / (time.perf_counter() - t0))
        s.close()
    return statistics.median(samples[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description="KV cache types: perplexity, bytes a token, decode speed at depth.")
    ap.add_argument("--model", default="smollm2-135m-instruct-q4_1", help="bundle name or GGUF path")
    ap.add_argument("--types", default="f16,q8_0,q4_0,tq3,tq2")
    ap.add_argument("--text", default=str(REFERENCE / "perplexity" / "text.txt"), help="text to score")
    ap.add_argument("--ctx", type=int, default=256, help="perplexity chunk size (llama-perplexity's -c)")
    ap.add_argument("--chunks", type=int, default=None, help="score at most this many chunks")
    ap.add_argument("--depths", default="", help="decode depths, comma-separated, e.g. 4096,16384 (default: none)")
    ap.add_argument("--n-gen", type=int, default=64, help="decode steps timed at each depth")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-llama-cpp", action="store_true", help="skip llama.cpp's perplexity")
    ap.add_argument("--json", default=None, help="write the results here as JSON")
    args = ap.parse_args()

    import cera
    from cera.generation.perplexity import perplexity
    from cera.sources import resolve
    from cera.state import kv_cell_bytes

    types = [t for t in args.types.split(",") if t]
    depths = [int(d) for d in args.depths.split(",") if d.strip()]
    text = Path(args.text).read_text(encoding="utf-8")
    path = resolve(args.model, quiet=True).path
    llama = None
    if not args.no_llama_cpp:
        try:
            import llama_cpp  # noqa: F401

            sys.path.insert(0, str(REFERENCE))
            import make_perplexity_reference as llama
        except ImportError:
            print("llama-cpp-python is not installed (pip install llama-cpp-python==0.3.36): llama.cpp's "
                  "perplexity is left out, cera's figures only", file=sys.stderr)  # fmt: skip
    rows = []
    with cera.load(path, device=args.device, threads=args.threads, quiet=True) as loaded:
        snaps = {}
        rng = np.random.default_rng(0)
        for depth in depths:
            prompt = rng.integers(0, loaded.model.n_vocab, size=depth).tolist()
            s = loaded.new_session(n_ctx=depth + args.n_gen + 2, kv_type="f16", n_batch=512)
            s.append_tokens(prompt)
            s.evaluate()
            snaps[depth] = (prompt, s.checkpoint().state)
            s.close()
        for t in types:
            r = perplexity(loaded, text, n_ctx=args.ctx, kv_type=t, max_chunks=args.chunks)
            row = {"kv_type": t, "ppl": r.ppl, "ppl_stderr": r.stderr, "chunks": r.chunks,
                   "bytes_per_token": kv_cell_bytes(loaded.model.state, t), "ppl_seconds": r.seconds}  # fmt: skip
            if llama is not None and t in LLAMA_TYPES:
                ref = llama.llama_perplexity(path, text, args.ctx, t, t, threads=args.threads or 2,
                                             max_chunks=args.chunks)  # fmt: skip
                row["llama_cpp_ppl"] = ref["ppl"]
            for depth, (prompt, snap) in snaps.items():
                row[f"tg{args.n_gen}@d{depth}"] = _decode_speed(loaded, snap, prompt, t, args.n_gen, args.reps,
                                                                 depth + args.n_gen + 2)  # fmt: skip
            rows.append(row)
            f16 = rows[0]["ppl"] if rows[0]["kv_type"] == "f16" else None
            delta = f" ({100 * (r.ppl / f16 - 1):+.2f}% vs f16)" if f16 and t != "f16" else ""
            speeds = ", ".join(f"{k} {v:.1f} tok/s" for k, v in row.items() if k.startswith("tg"))
            peer = f", llama.cpp {row['llama_cpp_ppl']:.4f}" if row.get("llama_cpp_ppl") else ""
            print(f"{t:5s} PPL {r.ppl:.4f} +/- {r.stderr:.4f}{delta}{peer}; {row['bytes_per_token']:,} B a token"
                  + (f"; {speeds}" if speeds else ""), flush=True)  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"model": str(path), "ctx": args.ctx, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    from cera.errors import CeraError

    try:
        main()
    except CeraError as e:  # a text too short for --ctx, a type the model's heads cannot take
        sys.exit(f"bench_kv_cache: {e}")
