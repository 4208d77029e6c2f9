"""Structured output: what a grammar costs per token, cera beside llama.cpp.

    python benchmarks/bench_grammar.py [--models smollm2-135m-instruct-q4_1,gemma3-270m-q4_k_m]
                                       [--threads 2] [--tokens 96]

For each model (SmolLM2: 49k vocabulary; Gemma 3: 262k) and each constraint (a nested
JSON Schema, and llama.cpp's json.gbnf as a GBNF grammar):

- **mask**: per-token time to compute the grammar's mask, mean / p50 / p99, along the
  token path cera generated: cera (llguidance, measured on the worker thread) and
  llama.cpp's grammar sampler applied to the whole vocabulary (llama-cpp-python's
  low-level `llama_sampler_init_grammar`, what `LlamaGrammar` sampling runs each token);
- **wait**: how long cera's sampler waited for a mask that the worker computed during the
  forward pass (the part of the mask time that overlap did not hide);
- **decode tok/s**: greedy decoding without a constraint, with it (overlap on, and off),
  cera and llama.cpp (`Llama.create_completion(grammar=LlamaGrammar...)`), same file,
  same threads; and the ratios constrained / unconstrained.

No speed is asserted; figures go to benchmarks/README.md with the command and commit.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
JSON_GBNF = REPO / "tests" / "core" / "data" / "llama_cpp_grammar" / "json.gbnf"
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["street", "city", "zip"],
        },
        "skills": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}, "level": {"type": "integer", "minimum": 1, "maximum": 5}}, "required": ["name", "level"]}, "maxItems": 6},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "address", "skills", "active"],
}
PROMPT = "Write a JSON record for a software engineer named Ada, with her address and six skills."


def stats(xs) -> str:
    if not len(xs):
        return "-"
    a = np.asarray(xs) * 1e6
    return f"{a.mean():8.1f} {np.percentile(a, 50):8.1f} {np.percentile(a, 99):8.1f}"


def cera_run(loaded, constraint, n, overlap=True):
    from cera.grammar import GrammarProcessor

    s = loaded.new_session(n_ctx=1024)
    s.append_text(PROMPT + "\n")
    procs = []
    if constraint is not None:
        procs = [GrammarProcessor(constraint, loaded.tokenizer, loaded.model.n_vocab, overlap=overlap)]
    r = s.generate(max_tokens=n, temperature=0, ignore_eos=constraint is None, processors=procs)
    return r, (procs[0] if procs else None)


def llama_mask_times(llm, gbnf_text: str, tokens) -> list[float]:
    import llama_cpp as lc

    vocab = lc.llama_model_get_vocab(llm.model)
    n = lc.llama_vocab_n_tokens(vocab)
    smpl = lc.llama_sampler_init_grammar(vocab, gbnf_text.encode(), b"root")
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


def llama_decode(llm, grammar, n) -> tuple[float, int]:
    """Decode tokens/s of llama-cpp-python's completion (time from the first token on)."""
    llm.reset()
    times = []
    for _ in llm.create_completion(PROMPT + "\n", max_tokens=n, temperature=0, grammar=grammar, stream=True):
        times.append(time.perf_counter())
    if len(times) < 2:
        return float("nan"), len(times)
    return (len(times) - 1) / (times[-1] - times[0]), len(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="smollm2-135m-instruct-q4_1,gemma3-270m-q4_k_m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=96)
    args = ap.parse_args()

    import cera
    from cera.grammar import Constraint
    from cera.grammar.vocab import ll_tokenizer

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    print(f"# bench_grammar  commit {commit}  threads {args.threads}  tokens {args.tokens}")
    gbnf_text = JSON_GBNF.read_text()
    try:
        import llama_cpp
        from llama_cpp.llama_grammar import LlamaGrammar
    except ImportError:
        llama_cpp = None
    for name in args.models.split(","):
        loaded = cera.load(name, device="cpu", threads=args.threads)
        t0 = time.perf_counter()
        ll_tokenizer(loaded.tokenizer, loaded.model.n_vocab)
        print(f"\n## {name}  (vocabulary {loaded.model.n_vocab}; grammar token view built in {time.perf_counter() - t0:.2f} s, once per model)")
        free, _ = cera_run(loaded, None, args.tokens)
        llm = None
        if llama_cpp is not None:
            llm = llama_cpp.Llama(model_path=str(loaded.path), n_threads=args.threads, n_ctx=1024, verbose=False)
            lfree, _ = llama_decode(llm, None, args.tokens)
        print(f"unconstrained decode: cera {free.tokens_per_second:.1f} tok/s" + (f", llama.cpp {lfree:.1f} tok/s" if llm else ""))
        print(f"{'constraint':12s} {'engine':22s} {'mask mean/p50/p99 us':>27s} {'wait mean us':>13s} {'tok/s':>7s} {'x free':>7s} {'n':>4s}")
        for label, constraint, gtext in (
            ("json-schema", Constraint.json_schema(SCHEMA), None),
            ("json.gbnf", Constraint.gbnf(gbnf_text), gbnf_text),
        ):
            for overlap in (True, False):
                r, p = cera_run(loaded, constraint, args.tokens, overlap=overlap)
                wait = np.mean(p.wait_seconds) * 1e6 if p.wait_seconds else float("nan")
                print(
                    f"{label:12s} {'cera overlap ' + ('on' if overlap else 'off'):22s} {stats(p.mask_seconds[1:]):>27s} "
                    f"{wait:13.1f} {r.tokens_per_second:7.1f} {r.tokens_per_second / free.tokens_per_second:7.3f} {r.n_generated:4d}"
                )
            if llm is not None:
                if gtext is None:
                    from llama_cpp.llama_grammar import json_schema_to_gbnf

                    gtext = json_schema_to_gbnf(json.dumps(SCHEMA))
                masks = llama_mask_times(llm, gtext, r.tokens)
                tps, n = llama_decode(llm, LlamaGrammar.from_string(gtext, verbose=False), args.tokens)
                print(f"{label:12s} {'llama.cpp LlamaGrammar':22s} {stats(masks[1:]):>27s} {'':13s} {tps:7.1f} {tps / lfree:7.3f} {n:4d}")
        del llm


if __name__ == "__main__":
    main()
