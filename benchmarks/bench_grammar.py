"""Structured output: constrained decode against free decode, over the same tokens.

    python benchmarks/bench_grammar.py [--models gemma3-270m-q4_k_m,smollm2-135m-instruct-q4_1]
                                       [--threads 2] [--tokens 128] [--reps 5] [--llama]

Each constraint here never ends before the token budget (JSON lines: one JSON Schema value a
line, repeated; a GBNF list of lines; a regular expression of free text), and every run
bans the end-of-generation tokens, so free and constrained runs decode exactly ``--tokens``
tokens from the same prompt, greedily, on the same loaded model. Runs alternate (free, then
each constraint, ``--reps`` rounds) so the machine's drift hits all alike; the table gives
each configuration's median decode tokens/s with its range, and the median and range of the
paired ratios constrained / free of the same round. The load average is printed at the
start and the end: on a loaded machine ratios are provisional.

Where a constrained token's time goes (per token, medians over the runs):

- **forward**: the forward pass (`Session._forward`), free and constrained;
- **draw**: choosing the token from the pass's output (`Stepper.draw`: the finiteness
  check, the candidates, the sampler chain), of which **apply** is the grammar's step of
  the chain (waiting for the mask, the budget rule, handing the mask on) and **wait** the
  part of it spent waiting for the mask;
- **accept**: the grammar reading the chosen token and handing the next mask to the worker;
- **mask**: llguidance's mask computation, on the worker thread during the forward pass.

``--overlap-off`` adds runs with the mask computed in the sampler instead of on the worker.
``--llama`` adds llama-cpp-python's grammar sampler on the same file: its mask time per token
along cera's token path (`llama_sampler_apply` over the whole vocabulary), and its
constrained decode through `Llama.create_completion(grammar=...)` beside its free decode.

No speed is asserted; figures go to benchmarks/README.md with the command and commit.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
PROMPT = "Records of the people in the team, one JSON object a line:\n"
RECORD = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "city": {"type": "string"},
        "skills": {"type": "array", "items": {"type": "string"}, "maxItems": 6},
        "note": {"type": "string"},
    },
    "required": ["name", "age", "city", "skills", "note"],
    "additionalProperties": False,
}
# (label, kind, source): grammars with no end, so a run decodes every token it is given
CONSTRAINTS = (
    ("json-lines", "lark", 'start: (record "\\n")+\nrecord: %json ' + __import__("json").dumps(RECORD) + "\n"),
    ("gbnf-lines", "gbnf", 'root ::= ("- " [A-Za-z] [a-z ,.]* ": " [0-9]+ "\\n")+\n'),
    ("regex-text", "regex", r"[A-Za-z0-9 ,.:;'()\-\n]*"),
)


def constraint(kind: str, source: str):
    from cera.grammar import Constraint

    return {"lark": Constraint.lark, "gbnf": Constraint.gbnf, "regex": Constraint.regex}[kind](source)


class Clock:
    """Wall time spent in a few methods, while installed (wrapping the classes' methods)."""

    def __init__(self):
        from cera.generation.decode_step import Stepper
        from cera.generation.session import Session
        from cera.grammar.processor import GrammarProcessor

        self.spots = {"forward": (Session, "_forward"), "draw": (Stepper, "draw"),
                      "apply": (GrammarProcessor, "apply"), "accept": (GrammarProcessor, "accept")}  # fmt: skip
        self.totals = dict.fromkeys(self.spots, 0.0)

    def __enter__(self):
        self.saved = {}
        for name, (cls, attr) in self.spots.items():
            f = getattr(cls, attr)
            self.saved[name] = f

            def timed(*a, _f=f, _name=name, **kw):
                t0 = time.perf_counter()
                try:
                    return _f(*a, **kw)
                finally:
                    self.totals[_name] += time.perf_counter() - t0

            setattr(cls, attr, timed)
        return self

    def __exit__(self, *exc):
        for name, (cls, attr) in self.spots.items():
            setattr(cls, attr, self.saved[name])


def cera_run(loaded, c, n: int, overlap: bool = True) -> dict:
    """One greedy run of n tokens (ending only at n): tokens/s and the per-token breakdown."""
    from cera.grammar import GrammarProcessor

    s = loaded.new_session(n_ctx=n + 128)
    s.append_text(PROMPT)
    s.evaluate()  # the prompt, outside the timed part
    procs = [GrammarProcessor(c, loaded.tokenizer, loaded.model.n_vocab, overlap=overlap)] if c is not None else []
    with Clock() as clock:
        r = s.generate(max_tokens=n, temperature=0, ignore_eos=True, processors=procs)
    if r.n_generated != n:
        raise SystemExit(f"a run ended after {r.n_generated} of {n} tokens ({r.finish_reason}): the comparison needs every run to decode {n}")
    out = {"tps": r.tokens_per_second, "text": r.text}
    out.update({k: v / n for k, v in clock.totals.items()})
    if procs:
        p = procs[0]
        out["mask"] = float(np.sum(p.mask_seconds)) / n
        out["wait"] = float(np.sum(p.wait_seconds)) / n
    return out


def spread(xs) -> str:
    a = np.asarray(xs, float)
    return f"{np.median(a):7.1f} ({a.min():.1f}-{a.max():.1f})"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def llama_mask_times(llm, gbnf_text: str, tokens) -> list[float]:
    import llama_cpp as lc

    vocab = lc.llama_model_get_vocab(llm.model)
    n = lc.llama_vocab_n_tokens(vocab)
    smpl = lc.llama_sampler_init_grammar(vocab, gbnf_text.encode(), b"root")
    if not smpl:
        return []
    arr = (lc.llama_token_data * n)()
    view = np.frombuffer(arr, dtype=np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)]))
    out = []
    for t in tokens:
        view["id"] = np.arange(n)
        view["logit"] = 0.0
        cur = lc.llama_token_data_array(arr, n, -1, False)
        t0 = time.perf_counter()
        lc.llama_sampler_apply(smpl, ctypes.byref(cur))
        out.append(time.perf_counter() - t0)
        if not np.isfinite(arr[t].logit):
            break
        lc.llama_sampler_accept(smpl, int(t))
    lc.llama_sampler_free(smpl)
    return out


def llama_decode(llm, grammar, n) -> float:
    """Decode tokens/s of llama-cpp-python's completion (from the first token on)."""
    llm.reset()
    times = []
    for _ in llm.create_completion(PROMPT, max_tokens=n, temperature=0, grammar=grammar, stream=True,
                                   logit_bias={llm.token_eos(): -1e9}):  # fmt: skip
        times.append(time.perf_counter())
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description="constrained decode against free decode, the same tokens, interleaved")
    ap.add_argument("--models", default="gemma3-270m-q4_k_m,smollm2-135m-instruct-q4_1")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--constraints", default=",".join(c[0] for c in CONSTRAINTS), help="which of: " + ", ".join(c[0] for c in CONSTRAINTS))
    ap.add_argument("--overlap-off", action="store_true", help="also the mask computed in the sampler, not on the worker")
    ap.add_argument("--llama", action="store_true", help="also llama-cpp-python's grammar sampler on the same file")
    args = ap.parse_args()

    import cera
    from cera.grammar.vocab import ll_tokenizer

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    print(f"# bench_grammar  commit {commit}  threads {args.threads}  tokens {args.tokens}  reps {args.reps}  load {load()}")
    chosen = [c for c in CONSTRAINTS if c[0] in args.constraints.split(",")]
    for name in args.models.split(","):
        loaded = cera.load(name, device="cpu", threads=args.threads)
        t0 = time.perf_counter()
        ll_tokenizer(loaded.tokenizer, loaded.model.n_vocab)
        print(f"\n## {name}  (vocabulary {loaded.model.n_vocab}; grammar token view built in {time.perf_counter() - t0:.2f} s, once per model)")
        configs = [("free", None, True)]
        for label, kind, source in chosen:
            configs.append((label, constraint(kind, source), True))
            if args.overlap_off:
                configs.append((label + " (overlap off)", constraint(kind, source), False))
        for _label, c, overlap in configs:  # warm every path once, untimed
            cera_run(loaded, c, min(args.tokens, 16), overlap)
        runs = {label: [] for label, _, _ in configs}
        for _ in range(args.reps):
            for label, c, overlap in configs:
                runs[label].append(cera_run(loaded, c, args.tokens, overlap))
        free = runs["free"]
        print(f"load {load()}")
        print(f"{'run':28s} {'tok/s median (range)':>24s} {'x free median (range)':>24s} "
              f"{'forward':>8s} {'draw':>6s} {'apply':>6s} {'wait':>6s} {'accept':>6s} {'mask':>6s}  us/token")  # fmt: skip
        for label, _, _ in configs:
            rs = runs[label]
            ratios = [r["tps"] / f["tps"] for r, f in zip(rs, free, strict=True)]
            x = f"{np.median(ratios):7.3f} ({min(ratios):.3f}-{max(ratios):.3f})" if label != "free" else ""
            us = [np.median([r.get(k, np.nan) for r in rs]) * 1e6 for k in ("forward", "draw", "apply", "wait", "accept", "mask")]
            cols = " ".join(f"{u:6.0f}" if np.isfinite(u) else f"{'-':>6s}" for u in us)
            print(f"{label:28s} {spread([r['tps'] for r in rs]):>24s} {x:>24s} {us[0]:8.0f} {cols[7:]}")
        for label, _, _ in configs[1:]:
            print(f"  {label}: {runs[label][0]['text'][:90]!r}")
        if args.llama:
            llama_table(loaded, chosen, args)


def gbnf_form(kind: str, source: str) -> str | None:
    """The constraint as llama.cpp's GBNF (None: no form here)."""
    if kind == "gbnf":
        return source
    if kind == "lark" and source.startswith("start: (record"):
        import json

        from llama_cpp.llama_grammar import json_schema_to_gbnf

        record = json_schema_to_gbnf(json.dumps(RECORD)).replace("root ::=", "record ::=", 1)
        return 'root ::= (record "\\n")+\n' + record
    return None


def llama_table(loaded, chosen, args) -> None:
    try:
        import llama_cpp
        from llama_cpp.llama_grammar import LlamaGrammar
    except ImportError:
        print("llama-cpp-python is not installed: no llama.cpp rows")
        return
    llm = llama_cpp.Llama(model_path=str(loaded.path), n_threads=args.threads, n_ctx=args.tokens + 128, verbose=False)
    free = llama_decode(llm, None, args.tokens)
    print(f"llama.cpp free decode {free:.1f} tok/s")
    for label, kind, source in chosen:
        gtext = gbnf_form(kind, source)
        if gtext is None:
            print(f"  {label}: no GBNF form for llama.cpp")
            continue
        r = cera_run(loaded, constraint(kind, source), args.tokens)
        tokens = loaded.tokenizer.encode(r["text"], add_special=False)
        masks = np.asarray(llama_mask_times(llm, gtext, tokens)[1:]) * 1e6
        tps = llama_decode(llm, LlamaGrammar.from_string(gtext, verbose=False), args.tokens)
        print(f"  {label}: llama.cpp mask mean {masks.mean():.0f} us, decode {tps:.1f} tok/s ({tps / free:.3f} x free)")


if __name__ == "__main__":
    main()
