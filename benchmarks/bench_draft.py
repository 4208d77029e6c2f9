"""Speculative decoding with a draft model: decode speed with and without the draft, and
how many draft tokens the model accepts.

    python benchmarks/bench_draft.py [--model BUNDLE_OR_PATH] [--draft BUNDLE_OR_PATH] [--threads 2]
        [--tokens 128] [--reps 3] [--tasks code,prose,rewrite] [--draft-max 16] [--draft-p-min 0.75]
        [--draft-vocab 32768] [--json OUT]

The default pair is Qwen2.5-Coder-1.5B with the 0.5B draft (the same tokenizer). For each
task (writing code, prose, rewriting a code snippet with one change), greedy decoding of
``--tokens`` tokens after a chat prompt, in one process and alternated rep by rep: plain
decoding, the draft model, and prompt lookup (``spec``) beside them. Printed per task:
decode tokens/s of each (the median of ``--reps``; the prompt is not timed), the speed-ups
over plain decoding, the draft's acceptance rate (accepted / drafted tokens), and whether
each output is plain decoding's token for token (it must be). Figures belong in
benchmarks/README.md with the command and commit that made them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SNIPPET = '''def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(line.split(","))
    return rows


def total(rows, column):
    return sum(float(r[column]) for r in rows)


def largest(rows, column, n=3):
    return sorted(rows, key=lambda r: float(r[column]), reverse=True)[:n]
'''

TASKS = {
    "code": "Write a Python class for a least-recently-used cache with get, put and a capacity, with docstrings.",
    "prose": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "rewrite": "Rewrite this Python code exactly, but rename the function `largest` to `biggest`. "
    "Output only the code.\n\n" + SNIPPET,
}


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def prompt_tokens(m, text: str) -> list[int]:
    from cera.chat.prompt import ChatPrompt, message

    if m.chat_template.is_fallback:
        return m.tokenize(text)
    chat = ChatPrompt(m)
    return chat.encode(chat.render([message({"role": "user", "content": text})]))


def run(m, ids: list[int], n: int, **kw):
    s = m.new_session(n_ctx=len(ids) + n + 64)
    s.append_tokens(ids)
    return s.generate(max_tokens=n, temperature=0, **kw)  # no ignore_eos: prompt lookup refuses banned tokens


def bench_task(m, ids, args) -> dict:
    modes = {"plain": dict(draft_max=0),
             "draft": dict(draft_max=args.draft_max, draft_p_min=args.draft_p_min, draft_vocab=args.draft_vocab),
             "lookup": dict(draft_max=0, spec=True)}  # fmt: skip
    tps: dict[str, list[float]] = {k: [] for k in modes}
    rates, same = [], {k: True for k in modes}
    for _ in range(args.reps):
        outs = {k: run(m, ids, args.tokens, **kw) for k, kw in modes.items()}
        for k, summary in outs.items():
            tps[k].append(summary.tokens_per_second)
            same[k] &= summary.tokens == outs["plain"].tokens
        rates.append(outs["draft"].acceptance_rate)
    med = {k: statistics.median(v) for k, v in tps.items()}
    return {"prompt_tokens": len(ids), "tok_s": med, "speedup_draft": med["draft"] / med["plain"],
            "speedup_lookup": med["lookup"] / med["plain"], "acceptance": statistics.median(rates),
            "identical": same, "samples": tps}  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    ap.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct-q4_k_m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--draft-max", type=int, default=16)
    ap.add_argument("--draft-p-min", type=float, default=0.75)
    ap.add_argument("--draft-vocab", type=int, default=32768, help="the draft proposes from the first this many ids (0: all)")
    ap.add_argument("--json", default=None, help="also write every sample and setting here")
    args = ap.parse_args(argv)
    tasks = args.tasks.split(",")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        ap.error(f"unknown tasks {unknown}; choose from {', '.join(TASKS)}")
    import cera

    m = cera.load(args.model, threads=args.threads, quiet=True)
    draft = cera.load(args.draft, threads=args.threads, quiet=True)
    m.set_draft(draft)
    print(f"model {args.model}, draft {args.draft}, {args.threads} threads, {args.tokens} tokens, "
          f"median of {args.reps}, commit {commit()}", file=sys.stderr)  # fmt: skip
    print("| task | plain tok/s | draft model tok/s | speed-up | acceptance | prompt lookup tok/s | speed-up | identical |")
    print("|---|---|---|---|---|---|---|---|")
    report = {"model": args.model, "draft": args.draft, "threads": args.threads, "tokens": args.tokens,
              "reps": args.reps, "draft_max": args.draft_max, "draft_p_min": args.draft_p_min,
              "draft_vocab": args.draft_vocab, "commit": commit(),
              "tasks": {}}  # fmt: skip
    ok = True
    for task in tasks:
        r = bench_task(m, prompt_tokens(m, TASKS[task]), args)
        report["tasks"][task] = r
        t = r["tok_s"]
        ok &= all(r["identical"].values())
        print(f"| {task} | {t['plain']:.1f} | {t['draft']:.1f} | {r['speedup_draft']:.2f}x | {r['acceptance'] * 100:.0f}% "
              f"| {t['lookup']:.1f} | {r['speedup_lookup']:.2f}x | {'yes' if all(r['identical'].values()) else 'NO'} |",
              flush=True)  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    m.close()
    draft.close()
    if not ok:
        print("bench_draft: an output differs from plain decoding's", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
