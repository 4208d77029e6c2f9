"""Produce llama.cpp reference data (greedy continuations, per-step top logits) for cera.

    python tests/models/reference/make_reference.py --out tests/models/reference/data
    python tests/models/reference/make_reference.py --out ... --only smollm2-135m-instruct-q4_1

Runs with llama-cpp-python 0.3.36 (the /work/venv). Real models come from
``cera.sources.bundles``; tiny random-weight models from ``tiny/*.gguf`` beside this file (made by
make_tiny_models.py). One JSON file per model; README.md describes every field.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import prompts as P  # noqa: E402
from llamacpp_driver import ContextSettings, LlamaCppModel, llama_cpp_facts, sha256_of  # noqa: E402

FORMAT = "cera-llamacpp-reference/1"
LLAMA_CPP_COMMIT = "0c1e57098"  # vendored by llama-cpp-python 0.3.36 (its CHANGELOG)
MAX_NEW_TOKENS = 32
TOP_K = 10
DECIMALS = 4  # logits are stored rounded to this many decimals
LOW_MARGIN = 0.5

REAL_MODELS = [
    "smollm2-135m-instruct-q4_1",
    "gemma3-270m-q4_k_m",
    "qwen2.5-coder-0.5b-instruct-q4_k_m",
    "qwen2.5-coder-1.5b-instruct-q4_k_m",
]
# Gemma 3 270M is a base model without a chat template: its chat prompts use llama.cpp's
# built-in "gemma" template, named explicitly.
CHAT_TEMPLATE_OVERRIDE = {"gemma3-270m-q4_k_m": "gemma"}


def r(x: float) -> float:
    return round(float(x), DECIMALS)


def top_entries(logits: np.ndarray, k: int) -> list[list]:
    """Top-k (id, logit), by logit descending then id ascending (llama.cpp's greedy
    sampler takes the first maximum, i.e. the lowest id on a tie)."""
    idx = np.argpartition(-logits, k)[: k * 4] if logits.size > 4 * k else np.arange(logits.size)
    order = sorted(idx.tolist(), key=lambda t: (-float(logits[t]), t))[:k]
    return [[int(t), r(logits[t])] for t in order]


def margin(logits: np.ndarray) -> float:
    two = np.partition(logits, -2)[-2:]
    return float(two[1] - two[0])


def greedy(model: LlamaCppModel, prompt_tokens: list[int]) -> tuple[list[dict], list[np.ndarray], str]:
    """llama.cpp's generation loop: the prompt as one batch, then each new token alone."""
    model.reset()
    logits = model.eval(prompt_tokens)
    steps, rows = [], []
    finish = "length"
    for i in range(MAX_NEW_TOKENS):
        rows.append(logits)
        token = int(np.argmax(logits))
        top10 = top_entries(logits, TOP_K)
        assert top10[0][0] == token
        eog = model.is_eog(token)
        steps.append({"token": token, "margin": r(margin(logits)), "eog": eog, "top2": top10[:2], "top10": top10})
        if eog:
            finish = "eog"
            break
        if i + 1 < MAX_NEW_TOKENS:
            logits = model.eval([token])
    return steps, rows, finish


def compare(a: np.ndarray, b: np.ndarray) -> dict:
    """Logit rows a and b (same positions): how far apart, where the argmax differs."""
    diff = np.abs(a - b).max(axis=1)
    flips = []
    for i in np.nonzero(a.argmax(axis=1) != b.argmax(axis=1))[0].tolist():
        flips.append({"pos": i, "margin_a": r(margin(a[i])), "margin_b": r(margin(b[i]))})
    return {
        "n_positions": int(a.shape[0]),
        "max_abs_diff": r(diff.max()),
        "mean_max_abs_diff": r(diff.mean()),
        "per_position_max_abs_diff": [round(float(x), 3) for x in diff],
        "argmax_flips": len(flips),
        "flips": flips,
    }


def self_consistency(model: LlamaCppModel, no_fa: LlamaCppModel | None, case: dict, gen_rows) -> dict:
    """llama.cpp against itself on one case (prompt + its greedy continuation)."""
    prompt = case["prompt_tokens"]
    generated = [s["token"] for s in case["steps"]]
    seq = prompt + generated[:-1]  # every token whose logits the generation loop read
    n_prompt = len(prompt)

    model.reset()
    batch = model.eval(seq, all_logits=True)
    model.reset()
    sequential = np.stack([model.eval([t]) for t in seq])
    gen = np.stack(gen_rows)
    out = {
        "case": case["id"],
        "n_prompt_tokens": n_prompt,
        "positions": "a row per token of prompt + continuation (minus the last); row i holds the logits after token i",
        "batch_vs_sequential": compare(batch, sequential),
        "generation_vs_batch": compare(gen, batch[n_prompt - 1 :]),
    }
    out["batch_vs_sequential"]["a"] = "whole sequence as one batch"
    out["batch_vs_sequential"]["b"] = "token by token from position 0"
    out["generation_vs_batch"]["a"] = "generation loop (prompt batch, then single tokens), generated positions only"
    out["generation_vs_batch"]["b"] = "whole sequence as one batch, same positions"
    if no_fa is not None:
        no_fa.reset()
        rows = [no_fa.eval(prompt)]
        rows += [no_fa.eval([t]) for t in generated[:-1]]
        out["flash_attn_disabled_vs_auto"] = compare(np.stack(rows), gen)
        out["flash_attn_disabled_vs_auto"]["a"] = "generation loop, flash attention disabled (teacher forced)"
        out["flash_attn_disabled_vs_auto"]["b"] = "generation loop, flash attention auto (the reference)"
    return out


def jinja_render(template: str, messages: list[dict], bos: str, eos: str) -> str:
    """The file's Jinja chat template, rendered like HF transformers does (a cross-check)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise ValueError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(
        messages=messages, add_generation_prompt=True, bos_token=bos, eos_token=eos
    )


def build_cases(name: str, model: LlamaCppModel, tiny: bool) -> list[dict]:
    cases = []
    raw = P.TINY_PROMPTS if tiny else {**P.RAW_PROMPTS, **P.ENDOFTEXT_PROMPTS}
    for pid, text in raw.items():
        cases.append({
            "id": pid, "kind": "raw", "text": text, "add_special": True, "parse_special": False,
            "prompt_tokens": model.tokenize(text, add_special=True, parse_special=False),
        })
    if tiny:
        return cases
    template = CHAT_TEMPLATE_OVERRIDE.get(name)
    file_template = model.chat_template()
    for pid, messages in P.CHAT_PROMPTS.items():
        text = model.apply_chat_template(messages, template)
        case = {
            "id": pid, "kind": "chat", "messages": messages,
            "template": f"llama.cpp built-in '{template}'" if template else "the file's tokenizer.chat_template, matched by llama_chat_apply_template",
            "text": text, "add_special": True, "parse_special": True,
            "prompt_tokens": model.tokenize(text, add_special=True, parse_special=True),
        }
        if template is None and file_template:
            ids = model.special_ids()
            jinja = jinja_render(file_template, messages, model.token_text(ids["bos"]), model.token_text(ids["eos"]))
            case["jinja_render_matches"] = jinja == text
        cases.append(case)
    return cases


def model_sources(args) -> list[tuple[str, Path, bool]]:
    out = []
    if not args.tiny_only:
        from cera.sources import bundles

        for name in REAL_MODELS:
            out.append((name, Path(bundles.fetch_file(name, quiet=True)), False))
    for path in sorted((HERE / "tiny").glob("*.gguf")):
        out.append((path.stem, path, True))
    if args.only:
        wanted = set(args.only.split(","))
        out = [o for o in out if o[0] in wanted]
    return out


def run_model(name: str, path: Path, tiny: bool, settings: ContextSettings,
              consistency_cases: list[str] | None = None, first: list[str] | None = None,
              checkpoint: Path | None = None) -> dict:
    t0 = time.time()
    model = LlamaCppModel(path, settings)
    cases = build_cases(name, model, tiny)
    if first:  # run these first (a slow model's partial file then holds them)
        cases.sort(key=lambda c: (first.index(c["id"]) if c["id"] in first else len(first)))
    gen_rows = {}
    for n_done, case in enumerate(cases, 1):
        steps, rows, finish = greedy(model, case["prompt_tokens"])
        case["n_prompt_tokens"] = len(case["prompt_tokens"])
        case["steps"] = steps
        case["generated_tokens"] = [s["token"] for s in steps]
        case["generated_text"] = model.detokenize(case["generated_tokens"])
        case["finish_reason"] = finish
        case["n_steps_margin_below_0_5"] = sum(1 for s in steps if s["margin"] < LOW_MARGIN)
        low = [i for i, s in enumerate(steps) if s["margin"] < LOW_MARGIN]
        case["first_step_margin_below_0_5"] = low[0] if low else None
        gen_rows[case["id"]] = rows
        print(f"  {name} {case['id']}: {len(case['prompt_tokens'])} prompt tokens, {len(steps)} steps, "
              f"{finish}, low-margin {case['n_steps_margin_below_0_5']}: {case['generated_text']!r}", flush=True)
        if checkpoint is not None:
            # What is done so far, in the same case format, for runs cut short.
            checkpoint.write_text(json.dumps({
                "format": FORMAT, "partial": f"{n_done} of {len(cases)} cases; no self_consistency yet",
                "model": {"name": name, "file": path.name}, "settings": settings.as_record(),
                "cases": cases[:n_done]}, ensure_ascii=False, separators=(",", ":")) + "\n")

    # Repeatability: the first case again must give bit-identical logits.
    _, rows_again, _ = greedy(model, cases[0]["prompt_tokens"])
    repeat_identical = all(np.array_equal(a, b) for a, b in zip(gen_rows[cases[0]["id"]], rows_again, strict=False))

    no_fa = LlamaCppModel(path, ContextSettings(settings.n_ctx, settings.n_threads, "disabled", settings.use_extra_bufts))
    wanted = consistency_cases or (P.TINY_SELF_CONSISTENCY_CASES if tiny else P.SELF_CONSISTENCY_CASES)
    consistency = []
    for case in cases:
        if case["id"] in wanted:
            consistency.append(self_consistency(model, no_fa, case, gen_rows[case["id"]]))
            print(f"  {name} self-consistency {case['id']}: "
                  f"batch/seq {consistency[-1]['batch_vs_sequential']['max_abs_diff']} "
                  f"flips {consistency[-1]['batch_vs_sequential']['argmax_flips']}; "
                  f"FA off/auto {consistency[-1]['flash_attn_disabled_vs_auto']['max_abs_diff']}", flush=True)

    record = assemble(name, path, tiny, settings, model, cases, consistency, repeat_identical, t0)
    no_fa.close()
    model.close()
    return record


def assemble(name: str, path: Path, tiny: bool, settings: ContextSettings, model: LlamaCppModel,
             cases: list[dict], consistency: list[dict], repeat_identical: bool | None, t0: float) -> dict:
    """The data file's record (README.md describes every field)."""
    ids = model.special_ids()
    return {
        "format": FORMAT,
        "model": {
            "name": name,
            "file": path.name,
            "sha256": sha256_of(path),
            "size_bytes": path.stat().st_size,
            "architecture": model.meta("general.architecture"),
            "n_vocab": model.n_vocab,
            "special_ids": ids,
            "eog_tokens": {str(t): model.token_text(t) for t in model.eog_tokens()},
            "add_bos_token": model.meta("tokenizer.ggml.add_bos_token"),
            "has_chat_template": model.chat_template() is not None,
            "tiny_random_weights": tiny,
        },
        "llama_cpp": {**llama_cpp_facts(), "llama_cpp_commit": LLAMA_CPP_COMMIT, "api": "C API via llama_cpp ctypes bindings (llamacpp_driver.py)"},
        "settings": {
            **settings.as_record(),
            "n_batch": settings.n_ctx,
            "n_ubatch": settings.n_ctx,
            "flash_attn_resolved": model.flash_attn_resolved(),
            "type_k": "f16",
            "type_v": "f16",
            "context_params": model.context_params,
            "model_params": model.model_params,
            "llama_context_default_params": model.default_context_params,
            "sampling": "greedy: argmax of the raw logits, the lowest id on a tie",
            "max_new_tokens": MAX_NEW_TOKENS,
            "stop": "after the first token llama_vocab_is_eog() marks (it is recorded as the last step), else after max_new_tokens",
            "top_k_recorded": TOP_K,
            "logit_decimals": DECIMALS,
            "repeat_identical": repeat_identical,
        },
        "cases": cases,
        "self_consistency": consistency,
        "summary": {
            "n_cases": len(cases),
            "n_steps": sum(len(c["steps"]) for c in cases),
            "n_steps_margin_below_0_5": sum(c["n_steps_margin_below_0_5"] for c in cases),
            "n_steps_margin_below_0_1": sum(1 for c in cases for s in c["steps"] if s["margin"] < 0.1),
            "finish_eog": [c["id"] for c in cases if c["finish_reason"] == "eog"],
            "batch_vs_sequential_max_abs_diff": max((c["batch_vs_sequential"]["max_abs_diff"] for c in consistency), default=None),
            "batch_vs_sequential_argmax_flips": sum(c["batch_vs_sequential"]["argmax_flips"] for c in consistency),
            "batch_vs_sequential_positions": sum(c["batch_vs_sequential"]["n_positions"] for c in consistency),
            "flash_attn_disabled_vs_auto_max_abs_diff": max((c["flash_attn_disabled_vs_auto"]["max_abs_diff"] for c in consistency), default=None),
            "flash_attn_disabled_vs_auto_argmax_flips": sum(c["flash_attn_disabled_vs_auto"]["argmax_flips"] for c in consistency),
            "seconds": round(time.time() - t0, 1),
        },
    }


def complete_partial(name: str, path: Path, tiny: bool, settings: ContextSettings, out: Path) -> Path:
    """Turn `<name>.partial.json` (a run cut short) into a full record of the cases done:
    model facts, settings and summary added, no self_consistency, `partial` kept."""
    part = json.loads((out / f"{name}.partial.json").read_text())
    model = LlamaCppModel(path, settings)
    record = assemble(name, path, tiny, settings, model, part["cases"], [], None, time.time())
    model.close()
    record["partial"] = part["partial"] + "; completed with --complete-partial (repeat_identical not checked)"
    record["summary"]["seconds"] = None
    target = out / f"{name}.json"
    target.write_text(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
    (out / f"{name}.partial.json").unlink()
    return target


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "data")
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--tiny-only", action="store_true", help="only the tiny random-weight models")
    ap.add_argument("--n-ctx", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--first", help="comma-separated case ids to run first")
    ap.add_argument("--self-consistency", help="comma-separated case ids to measure llama.cpp against "
                    "itself on (default: prompts.SELF_CONSISTENCY_CASES); it is the slow part")
    ap.add_argument("--complete-partial", action="store_true",
                    help="turn the models' <name>.partial.json into <name>.json without running more cases")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    settings = ContextSettings(n_ctx=args.n_ctx, n_threads=args.threads)
    for name, path, tiny in model_sources(args):
        if args.complete_partial:
            print(f"{name}: wrote {complete_partial(name, path, tiny, settings, args.out)}", flush=True)
            continue
        print(f"{name}: {path}", flush=True)
        cases = args.self_consistency.split(",") if args.self_consistency else None
        partial = args.out / f"{name}.partial.json"
        record = run_model(name, path, tiny, settings, cases,
                           args.first.split(",") if args.first else None, partial)
        partial.unlink(missing_ok=True)
        target = args.out / f"{name}.json"
        target.write_text(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        print(f"{name}: wrote {target} ({os.path.getsize(target)} bytes) {record['summary']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
