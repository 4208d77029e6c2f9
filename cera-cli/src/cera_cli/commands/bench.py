"""`cera bench`: prompt-processing and decode speed, like llama-bench's pp and tg tests.

pp N: evaluate N random tokens in one batch on a fresh session. tg N: decode N tokens one
at a time after a single start token. With ``--parallel P``, tg runs P independent
sequences at once through a batching scheduler (`cera.generation.scheduler`) and reports their
aggregate decode tokens/s (each sequence's tokens are the ones it would decode alone).
Each test runs once to warm up, then `--reps` times; the median tok/s and the standard
deviation are reported.
"""

from __future__ import annotations

import json
import statistics
import time

import click

from ..draft import attach_draft, draft_options
from ..lora_options import apply_loras, lora_options
from ..options import Console, kv_type_options, load_model, model_options


def _ints(ctx, param, value):
    try:
        values = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
    # llama-bench's habit: 0 skips the tests; a negative count would skip them silently
    bad = [v for v in values if v < 0]
    if bad:
        raise click.BadParameter(f"counts are 0 or more (0 skips these tests), got {bad[0]}")
    return values


KV_TYPE = "f16"


def _pp(loaded, n: int, rng) -> float:
    session = loaded.new_session(n_ctx=n + 1, n_batch=max(n, 1), kv_type=KV_TYPE)
    session.append_tokens(rng.integers(0, loaded.model.n_vocab, size=n).tolist())
    t0 = time.perf_counter()
    session.evaluate()
    return n / (time.perf_counter() - t0)


def _tg_parallel(loaded, n: int, rng, parallel: int, depth: int = 0) -> float:
    """Aggregate decode tokens/s of ``parallel`` sequences decoding together."""
    scheduler = loaded.scheduler(n_slots=parallel, n_ctx=depth + n + 2, n_batch=512)
    prompts = [rng.integers(0, loaded.model.n_vocab, size=depth + 1).tolist() for _ in range(parallel)]
    summaries = scheduler.generate_many(prompts, max_tokens=n, temperature=0.0, ignore_eos=True)
    # generate_many evaluates every prompt before the first decode step, so each sequence's
    # generate_seconds runs from its own prompt's end to its last token: the shortest, the
    # last prompted sequence's, spans exactly the decode steps (all of them: every sequence
    # decodes n tokens and they end in the same step).
    decode = min(s.generate_seconds for s in summaries)
    return sum(s.n_generated for s in summaries) / decode


def _tg_spec(loaded, n: int, rng, depth: int = 0) -> float:
    """Greedy decoding with speculation after a random prompt (drafts come from it)."""
    session = loaded.new_session(n_ctx=depth + n + 2, n_batch=512, kv_type=KV_TYPE)
    session.append_tokens(rng.integers(0, loaded.model.n_vocab, size=depth + 1).tolist())
    summary = session.generate(max_tokens=n, temperature=0.0, ignore_eos=True, spec=True)
    return summary.n_generated / summary.generate_seconds


def _tg_draft(loaded, n: int, rng, depth: int = 0) -> float:
    """Greedy decoding with the attached draft model after a random prompt."""
    session = loaded.new_session(n_ctx=depth + n + 2, n_batch=512, kv_type=KV_TYPE)
    session.append_tokens(rng.integers(0, loaded.model.n_vocab, size=depth + 1).tolist())
    summary = session.generate(max_tokens=n, temperature=0.0, ignore_eos=True)
    return summary.n_generated / summary.generate_seconds


def _tg(loaded, n: int, rng, depth: int = 0) -> float:
    session = loaded.new_session(n_ctx=depth + n + 2, n_batch=512, kv_type=KV_TYPE)
    session.append_tokens(rng.integers(0, loaded.model.n_vocab, size=depth + 1).tolist())
    logits = session.evaluate()
    t0 = time.perf_counter()
    for _ in range(n):
        session.append_tokens([int(logits.argmax())])
        logits = session.evaluate()  # all logits read back each step, as llama-bench's tg
    return n / (time.perf_counter() - t0)


@click.command("bench")
@model_options
@lora_options
@click.option("-p", "--n-prompt", default="128,512", callback=_ints, show_default=True, help="Prompt lengths for pp tests.")
@click.option("-n", "--n-gen", default="128", callback=_ints, show_default=True, help="Token counts for tg tests.")
@click.option("-d", "--depth", default="0", callback=_ints, show_default=True, help="Context depths at which tg runs.")
@click.option("-r", "--reps", type=click.IntRange(min=1), default=5, show_default=True, help="Repetitions per test.")
@kv_type_options
@click.option("--spec", is_flag=True, help="tg tests decode with speculative decoding (prompt lookup; greedy).")
@click.option("-P", "--parallel", type=click.IntRange(min=1), default=1, show_default=True, help="Sequences decoding at once in tg tests (aggregate tokens/s).")
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON.")
@click.option("--profile", is_flag=True, help="Also time every kernel of one decoded token, at the largest --depth (backends with a kernel profile: vulkan).")
@draft_options
def bench_cmd(model, threads, device, ctx_size, n_gpu_layers, verbose, quiet, n_prompt, n_gen, depth, reps, kv_type,
              spec, parallel, as_json, profile, model_draft, device_draft, loras=()):  # fmt: skip
    """Measure prompt processing (pp) and decode (tg) speed in tokens per second."""
    import numpy as np

    if ctx_size is not None:
        # each test sizes its own context (as llama-bench does); a -c would be silently ignored
        raise click.BadParameter(
            "bench sizes each test's context from -p/--n-prompt, -n/--n-gen and -d/--depth; leave -c out",
            param_hint="'-c' / '--ctx-size'",
        )
    global KV_TYPE
    KV_TYPE = kv_type
    console = Console(verbose, quiet)
    loaded = load_model(model, device, threads, console, n_gpu_layers)
    apply_loras(loaded, loras)
    drafting = attach_draft(loaded, model, model_draft, device_draft, threads, console, spec)
    rng = np.random.default_rng(1234)
    n_ctx = max([*n_prompt, 1]) + max(depth) + max([*n_gen, 1]) + 2
    kv_bytes = loaded.runner.new_state(n_ctx, kv_type=kv_type).nbytes()
    if not as_json:
        click.echo(f"KV cache ({kv_type}) for {n_ctx} tokens: {kv_bytes / 1e6:.1f} MB")
    tg = _tg_draft if drafting else _tg_spec if spec else _tg
    suffix = "+draft" if drafting else "+spec" if spec else ""
    tests = [(f"pp{n}", lambda n=n: _pp(loaded, n, rng)) for n in n_prompt if n > 0]
    if parallel == 1:
        tests += [(f"tg{n}" + (f"@d{d}" if d else "") + suffix, lambda n=n, d=d: tg(loaded, n, rng, d)) for n in n_gen if n > 0 for d in depth]
    else:
        tests += [
            (f"tg{n}" + (f"@d{d}" if d else "") + f"x{parallel}", lambda n=n, d=d: _tg_parallel(loaded, n, rng, parallel, d))
            for n in n_gen if n > 0 for d in depth
        ]  # fmt: skip
    results = []
    for name, fn in tests:
        fn()  # warm-up
        samples = [fn() for _ in range(reps)]
        results.append(
            {
                "test": name,
                "median_tok_s": statistics.median(samples),
                "stdev_tok_s": statistics.stdev(samples) if len(samples) > 1 else 0.0,
                "samples": samples,
            }
        )
        if not as_json:
            r = results[-1]
            click.echo(f"{loaded.name:40.40s} {loaded.backend.name:6s} {name:12s} {r['median_tok_s']:10.2f} ± {r['stdev_tok_s']:.2f} tok/s")
    kernels = _kernel_profile(loaded, rng, depth=max(16, *depth)) if profile else None
    prompt_kernels = _kernel_profile(loaded, rng, max(n_prompt)) if profile and max(n_prompt) > 1 else None
    if as_json:
        used = getattr(loaded.backend, "threads", threads)  # what the backend runs with (-t, or its default)
        click.echo(json.dumps({"model": str(loaded.path), "backend": loaded.backend.name, "threads": used, "parallel": parallel, "kv_type": kv_type, "kv_bytes": kv_bytes, "results": results, "kernel_profile": kernels}, indent=2))
    else:
        for what, ks in (("one decoded token", kernels), (f"a prompt pass of {max(n_prompt)} tokens", prompt_kernels)):
            if ks is None:
                continue
            total = sum(k["ns"] for k in ks)
            click.echo(f"kernels of {what} ({sum(k['count'] for k in ks)} dispatches, {total / 1e3:.1f} us on the device, "
                       f"timestamps between the dispatches, which add to each):")  # fmt: skip
            for k in ks:
                click.echo(f"  {k['kernel']:36s} {k['count']:5d} x {k['ns'] / 1e3:10.1f} us  {100 * k['ns'] / max(total, 1):5.1f} %")


def _kernel_profile(loaded, rng, n_tokens: int = 1, depth: int = 16) -> list[dict]:
    """Per-kernel device time of one pass of ``n_tokens`` after ``depth`` tokens (1: a
    decode step; `--depth` sets it, 16 at least), from the backend's timestamp queries."""
    from cera.graph.builder import ARGMAX, Layout
    from cera.generation.runtime import SeqStep

    backend = loaded.backend
    if not hasattr(backend, "profile"):
        raise click.UsageError(f"backend {backend.name!r} has no kernel profile (--profile needs the vulkan backend)")
    session = loaded.new_session(n_ctx=depth + n_tokens + 48, n_batch=max(64, n_tokens), kv_type=KV_TYPE)
    session.append_tokens(rng.integers(0, loaded.model.n_vocab, size=depth).tolist())
    session.evaluate()
    state = session.state
    ids = rng.integers(0, loaded.model.n_vocab, size=n_tokens).tolist()
    layout = Layout((n_tokens,), prompt_rows=n_tokens >= 64)
    exe = loaded.runner.executable(layout, ARGMAX, state, session.adapters)
    backend.profile = True
    try:
        loaded.runner.forward(state, [SeqStep(session.slot, ids, range(depth, depth + n_tokens))], ARGMAX,
                              prompt_rows=n_tokens >= 64, adapters=session.adapters)  # fmt: skip
    finally:
        backend.profile = False
    by: dict = {}
    for name, ns in exe.profile():
        k = by.setdefault(name, {"kernel": name, "count": 0, "ns": 0})
        k["count"] += 1
        k["ns"] += ns
    return sorted(by.values(), key=lambda k: -k["ns"])
