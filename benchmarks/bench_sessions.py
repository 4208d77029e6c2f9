"""Sessions that last: what a disk prompt cache and speculative decoding save.

    python benchmarks/bench_sessions.py [--model BUNDLE_OR_PATH] [--threads 2] [--reps 3]

Two measurements, each cera against itself on the same model and input:

- **prompt cache**: a 1,500-token prompt evaluated by a fresh process-like load with an
  empty disk cache, then again (a new `LoadedModel`, the same cache directory) with a new
  question after it: the second prompt's time as a fraction of the first's (target <= 10%);
  the two runs' greedy tokens after the shared prefix are compared with a run without the
  cache (they must be equal).
- **speculative decoding**: greedy decoding of a rewrite task (a ~300-token code snippet
  to reproduce with one change) with and without `spec` (prompt lookup): decode tokens/s
  of each, the ratio (target >= 1.8x on Qwen2.5-Coder-0.5B), the acceptance rate, and
  whether the outputs are identical (they must be).

The median of ``--reps`` runs is printed, with the commit; figures belong in
benchmarks/README.md with the command that made them.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SNIPPET = '''import json
import os
from dataclasses import dataclass


@dataclass
class Record:
    name: str
    size: int
    tags: list


def load_records(path):
    """Read records from a JSON lines file."""
    records = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            data = json.loads(line)
            records.append(Record(data["name"], int(data["size"]), list(data.get("tags", []))))
    return records


def total_size(records):
    return sum(r.size for r in records)


def by_tag(records):
    out = {}
    for r in records:
        for t in r.tags:
            out.setdefault(t, []).append(r)
    return out


def largest(records, n=3):
    return sorted(records, key=lambda r: r.size, reverse=True)[:n]


def main():
    path = os.environ.get("RECORDS", "records.jsonl")
    records = load_records(path)
    print("total", total_size(records))
    for tag, items in sorted(by_tag(records).items()):
        print(tag, len(items))
    for r in largest(records):
        print(r.name, r.size)


if __name__ == "__main__":
    main()
'''


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def bench_prompt_cache(model: str, threads: int, reps: int) -> dict:
    import cera

    base = "You are a meticulous assistant who answers questions about the following notes.\n"
    notes = " ".join(f"Note {i}: the value of item {i} is {i * 7 % 101} units, stored in bin {i % 13}." for i in range(200))
    first_ids = None
    firsts, seconds, agree = [], [], []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as d:
            m = cera.load(model, threads=threads, quiet=True)
            ids = m.tokenize(base + notes)[:1500]
            first_ids = ids
            question = m.tokenize(" Question: which bin holds item 42?", add_special=False)
            m.enable_prefix_cache(directory=d)
            s = m.new_session(n_ctx=2048, n_batch=512)
            s.append_tokens(ids)
            t0 = time.perf_counter()
            s.evaluate()
            firsts.append(time.perf_counter() - t0)
            m.close()
            m = cera.load(model, threads=threads, quiet=True)  # a new process would see only the disk
            m.enable_prefix_cache(directory=d)
            s = m.new_session(n_ctx=2048, n_batch=512)
            s.append_tokens(ids + question)
            t0 = time.perf_counter()
            s.evaluate()
            seconds.append(time.perf_counter() - t0)
            got = s.generate(max_tokens=16, temperature=0).tokens
            plain = m.new_session(n_ctx=2048, n_batch=512)
            plain.prefix_cache = None
            plain.append_tokens(ids + question)
            agree.append(got == plain.generate(max_tokens=16, temperature=0).tokens)
            m.close()
    f, s2 = statistics.median(firsts), statistics.median(seconds)
    return {"prompt_tokens": len(first_ids), "first_s": f, "second_s": s2, "fraction": s2 / f, "same_tokens": all(agree)}


def bench_spec(model: str, threads: int, reps: int, n: int = 300) -> dict:
    import cera

    m = cera.load(model, threads=threads, quiet=True)
    prompt = (
        "Rewrite the following Python module exactly, but rename the function `largest` to `biggest` "
        "everywhere. Output only the code.\n\n" + SNIPPET + "\nRewritten module:\n"
    )
    plain_tps, spec_tps, rates, same = [], [], [], []
    for _ in range(reps):
        outs = {}
        for spec in (False, True):
            s = m.new_session(n_ctx=2048)
            s.append_text(prompt)
            summary = s.generate(max_tokens=n, temperature=0, spec=spec)
            outs[spec] = summary
        plain_tps.append(outs[False].tokens_per_second)
        spec_tps.append(outs[True].tokens_per_second)
        rates.append(outs[True].acceptance_rate)
        same.append(outs[True].tokens == outs[False].tokens)
    m.close()
    p, q = statistics.median(plain_tps), statistics.median(spec_tps)
    return {"tokens": n, "plain_tok_s": p, "spec_tok_s": q, "ratio": q / p, "acceptance": statistics.median(rates),
            "identical": all(same)}  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct-q4_k_m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"model {args.model}, {args.threads} threads, commit {commit()}", file=sys.stderr)
    pc = bench_prompt_cache(args.model, args.threads, args.reps)
    print(
        f"prompt cache: {pc['prompt_tokens']}-token prompt {pc['first_s']:.2f} s cold, {pc['second_s']:.3f} s with "
        f"the disk cache ({pc['fraction'] * 100:.1f}% of cold); tokens after it equal to no cache: {pc['same_tokens']}"
    )
    sp = bench_spec(args.model, args.threads, args.reps)
    print(
        f"speculative decoding ({sp['tokens']} tokens, rewrite task): greedy {sp['plain_tok_s']:.1f} tok/s, with "
        f"prompt lookup {sp['spec_tok_s']:.1f} tok/s ({sp['ratio']:.2f}x), acceptance {sp['acceptance'] * 100:.0f}%, "
        f"identical output: {sp['identical']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
