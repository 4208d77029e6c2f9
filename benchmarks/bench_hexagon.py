"""cera on a Snapdragon's Hexagon NPU side by side with llama.cpp's Hexagon backend, one command.

    python benchmarks/bench_hexagon.py -m MODEL.gguf --llama-bench ./llama-bench [--prompt 128] [--gen 64]
    python benchmarks/bench_hexagon.py --simulator [-m MODEL] [--gen 8]     # on x86-64: the simulator's figures

On a Snapdragon (ARM64 with Qualcomm's FastRPC runtime and onnxruntime-qnn): cera runs the
model with ``--device hexagon`` (its context binaries built once, then reused), timing a
prompt pass of ``--prompt`` tokens and ``--gen`` greedy decode steps; llama.cpp's
``llama-bench`` (built with GGML_HEXAGON=ON) runs the same file on its HTP device
(``-dev HTP0``) with the same counts. Both print tokens per second; the last column is
cera / llama.cpp.

Anywhere else it refuses in one line, unless ``--simulator``: then it runs on QNN's x86-64
HTP simulator and prints what the simulator can tell, none of it a device speed: each graph's
compile time and context binary size, the bytes a decode step moves between host and HTP,
the weight bytes a token reads, and the simulator's HTP cycle count per prompt pass and per
decoded token (QNN's profile, ``profiling_level=detailed``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def _args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("-m", "--model", default="smollm2-135m-instruct-q4_1", help="GGUF file or bundle name")
    p.add_argument("--soc", default=None, help="SM8650 (default), SM8550, SM8750, ... (CERA_HEXAGON_SOC)")
    p.add_argument("--prompt", type=int, default=128, help="prompt tokens (default 128; 16 with --simulator)")
    p.add_argument("--gen", type=int, default=64, help="decoded tokens (default 64; 8 with --simulator)")
    p.add_argument("--ctx", type=int, default=None, help="context cells (default prompt + gen + 8)")
    p.add_argument("--llama-bench", default=None, help="path of llama.cpp's llama-bench built with GGML_HEXAGON=ON")
    p.add_argument("--llama-device", default="HTP0", help="llama.cpp's device name (default HTP0)")
    p.add_argument("--simulator", action="store_true", help="run on QNN's x86-64 HTP simulator and print its figures")
    a = p.parse_args(argv)
    if a.simulator:
        a.prompt = 16 if a.prompt == 128 else a.prompt
        a.gen = 8 if a.gen == 64 else a.gen
    a.ctx = a.ctx or a.prompt + a.gen + 8
    return a


def _cera(a):
    """tok/s of a prompt pass and of greedy decoding, and the per-graph figures."""
    import cera
    from cera.graph.builder import ARGMAX
    from cera.generation.runtime import SeqStep

    m = cera.load(a.model, device="hexagon", quiet=True, soc=a.soc, profile=True)
    try:
        ids = [int(t) % m.model.n_vocab for t in range(100, 100 + a.prompt)]
        st = m.runner.new_state(a.ctx)
        slot = st.acquire()
        # compile (or load) both graphs before timing
        m.runner.executable(_layout(a.prompt), ARGMAX, st)
        m.runner.executable(_layout(1), ARGMAX, st)
        t0 = time.perf_counter()
        out = m.runner.forward(st, [SeqStep(slot, ids, range(a.prompt))], ARGMAX)
        t_prompt = time.perf_counter() - t0
        tok = int(out["argmax"][0])
        t0 = time.perf_counter()
        for i in range(a.gen):
            tok = int(m.runner.forward(st, [SeqStep(slot, [tok], [a.prompt + i])], ARGMAX)["argmax"][0])
        t_gen = time.perf_counter() - t0
        exes = {k[0].n_tokens: v for k, v in m.runner._cache.items() if k[1] == ARGMAX}
        return {
            "prompt_tok_s": a.prompt / t_prompt, "gen_tok_s": a.gen / t_gen, "stats": m.backend.stats,
            "prompt_cycles": exes[a.prompt].cycles() if a.prompt in exes else [],
            "decode_cycles": exes[1].cycles() if 1 in exes else [],
            "decode_bytes": exes[1].bytes_per_run() if 1 in exes else 0, "weight_bytes": exes[1].weight_bytes_read() if 1 in exes else 0,
            "device": m.backend.probe().device,
        }  # fmt: skip
    finally:
        m.close()


def _layout(n):
    from cera.graph.builder import Layout

    return Layout((n,))


def _llama(a) -> dict:
    cmd = [a.llama_bench, "-m", a.model, "-p", str(a.prompt), "-n", str(a.gen), "-dev", a.llama_device, "-o", "json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = json.loads(out)
    res = {}
    for r in rows:
        key = "prompt_tok_s" if r.get("n_prompt", 0) and not r.get("n_gen", 0) else "gen_tok_s"
        res[key] = float(r["avg_ts"])
    return res


def main(argv=None) -> int:
    a = _args(argv)
    if a.simulator:
        os.environ["CERA_HEXAGON_TARGET"] = "simulator"
    if a.soc:
        os.environ["CERA_HEXAGON_SOC"] = a.soc
    from cera_backend_hexagon.target import unavailable_reason

    why = unavailable_reason()
    if why:
        print(
            f"bench_hexagon: cannot run here: {why}; or pass --simulator for the simulator's figures", file=sys.stderr
        )
        return 2
    r = _cera(a)
    if a.simulator:
        print(f"{r['device']}; model {a.model}; prompt {a.prompt}, decode {a.gen}, context {a.ctx}")
        for s in r["stats"]:
            how = "loaded from the cache" if s.get("cached") else f"compiled in {s['compile_s']} s"
            print(
                f"  graph of {s['tokens']} token(s) -> {', '.join(s['outputs'])}: {how}; context binary {s['context_bytes'] / 1e6:.1f} MB"
            )
        med = lambda xs: int(statistics.median(xs)) if xs else None  # noqa: E731
        print(f"  HTP cycles (simulator): prompt pass {med(r['prompt_cycles'])}, per decoded token {med(r['decode_cycles'])} "
              f"(median of {len(r['decode_cycles'])}; range {min(r['decode_cycles'], default=0)}-{max(r['decode_cycles'], default=0)})")  # fmt: skip
        print(
            f"  bytes a decode step moves host<->HTP: {r['decode_bytes'] / 1e6:.2f} MB; float16 weight bytes a decoded token reads: {r['weight_bytes'] / 1e6:.1f} MB"
        )
        print(
            f"  simulator wall time (x86, not a device speed): prompt {r['prompt_tok_s']:.2f} tok/s, decode {r['gen_tok_s']:.3f} tok/s"
        )
        return 0
    rows = [("cera (hexagon)", r["prompt_tok_s"], r["gen_tok_s"])]
    if a.llama_bench:
        ll = _llama(a)
        rows.append(("llama.cpp (Hexagon)", ll.get("prompt_tok_s", float("nan")), ll.get("gen_tok_s", float("nan"))))
    print(f"{r['device']}; {a.model}; prompt {a.prompt}, decode {a.gen}")
    print(f"{'engine':22s} {'prompt tok/s':>13s} {'decode tok/s':>13s}")
    for name, pp, tg in rows:
        print(f"{name:22s} {pp:13.1f} {tg:13.1f}")
    if len(rows) == 2:
        print(f"{'cera / llama.cpp':22s} {rows[0][1] / rows[1][1]:13.2f} {rows[0][2] / rows[1][2]:13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
