"""llama.cpp's own per-op profile of its Vulkan build, on the same files as cera's
(`vulkan_decode_split.py --profile`): the time of each op kind in one decoded token, and
in one prompt pass of ``--prompt`` tokens, from llama.cpp's perf logger (timestamp
queries around every node, ``GGML_VK_PERF_LOGGER``), to set each of cera's kernels
against the one it competes with.

    PYTHONPATH=<llama-cpp-python built with -DGGML_VULKAN=ON> \\
        python benchmarks/experiments/vulkan_llama_profile.py MODEL.gguf [--tokens 64] [--prompt 512]

The logger prints its sums and means to stderr every GGML_VK_PERF_LOGGER_FREQUENCY
graph evaluations. The decode table: 2 x ``--tokens`` one-token steps with the frequency
at ``--tokens``, and the second print kept (the first holds llama.cpp's pipeline
compilations on first use: a 222 us attention, say). The prompt table, in a second
process (frequency 1): two passes of ``--prompt`` tokens, the second kept.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # benchmarks/, where bench_models_engines.py is


def child(model: str, tokens: int, prompt: int) -> None:
    sys.path.insert(0, str(HERE))
    from bench_models_engines import LlamaCppEngine, TestSpec

    eng = LlamaCppEngine(model, threads=4, gpu=True)
    if prompt:
        test = TestSpec("pp", prompt)
        eng._context_for(test)
        for _ in range(2):  # the second pass is the one printed (warm)
            eng._prepare(test, [])
            eng._decode([1 + i % 100 for i in range(prompt)])
    else:
        # 2 x tokens steps: the logger prints after each ``tokens``; the second print
        # is of warm steps only (llama.cpp compiles some pipelines on first use)
        test = TestSpec("tg", 2 * tokens)
        eng._context_for(test)
        for i in range(2 * tokens):
            eng._decode([1 + i % 100])
    sys.stderr.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=0, help="also profile one prompt pass of this many tokens")
    ap.add_argument("--child", choices=("tg", "pp"), default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.model, args.tokens, args.prompt if args.child == "pp" else 0)
        return
    runs = [("tg", args.tokens)] + ([("pp", 1)] if args.prompt else [])
    for kind, freq in runs:
        env = dict(os.environ, GGML_VK_PERF_LOGGER="1", GGML_VK_PERF_LOGGER_FREQUENCY=str(freq))
        cmd = [sys.executable, __file__, args.model, "--tokens", str(args.tokens), "--prompt", str(args.prompt)]
        title = f"decode, mean of {args.tokens} steps" if kind == "tg" else f"one prompt pass of {args.prompt}"
        print(f"# llama.cpp Vulkan per-op profile of {Path(args.model).name}: {title}", flush=True)
        p = subprocess.run(cmd + ["--child", kind], env=env, capture_output=True, text=True, timeout=300)
        lines = p.stderr.splitlines()
        # the block the logger printed last: warm steps only
        starts = [i for i, ln in enumerate(lines) if ln.startswith("Vulkan Timings:")]
        keep = [ln for ln in lines if "ggml_vulkan:" in ln][:2]
        for ln in keep:
            print(ln)
        if not starts:
            print("no timings printed; stderr tail:\n" + "\n".join(lines[-20:]))
            continue
        first = starts[-1]
        end = next((i for i in range(first, len(lines)) if lines[i].startswith("Total time")), len(lines) - 1)
        print("\n".join(lines[first + 1 : end + 1]), flush=True)


if __name__ == "__main__":
    main()
