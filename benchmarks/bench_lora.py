"""What a LoRA adapter costs in decoding: cera and llama.cpp, each with and without the same adapter.

    python benchmarks/bench_lora.py [--model smollm2-135m-instruct-q4_1] [--rank 16] [--type F16]
                                    [--threads 2] [--n-gen 128] [--pairs 5] [--no-llama-cpp]

The adapter is random, of rank ``--rank`` on every projection of every layer (attention q, k,
v, output; feed-forward gate, up, down), written as llama.cpp's GGUF adapter with tensors of
``--type`` (F32, F16 or Q8_0 as llama.cpp's convert_lora_to_gguf.py writes them). Each engine
decodes ``--n-gen`` greedy tokens after a 16-token prompt, the logits read back each step,
base and adapted alternately, ``--pairs`` times after an untimed warm-up of each; the
medians, the range, and the adapter's cost (adapted time over base time, minus one) are
printed. llama.cpp runs through llama-cpp-python (``lora_path``, scale 1) on the same file
with the same threads. The figures belong in benchmarks/README.md with the command, the
commit, the machine and its load average.
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
PROJECTIONS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def write_adapter(base: Path, out: Path, rank: int, ggml_type: str, seed: int = 0) -> Path:
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter
    from gguf.quants import quantize

    from cera.formats.gguf import GGUFFile

    rng = np.random.default_rng(seed)
    with GGUFFile(base) as f:
        arch, n_layer = f.architecture, int(f.arch_get("block_count"))
        shapes = {n: f.tensors[n].shape for n in f.tensors}
    w = GGUFWriter(str(out), arch)
    w.add_type("adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", float(2 * rank))
    for i in range(n_layer):
        for p in PROJECTIONS:
            name = f"blk.{i}.{p}.weight"
            if name not in shapes:
                continue
            n_in, n_out = shapes[name]
            for suffix, arr in ((".lora_a", rng.standard_normal((rank, n_in)) * 0.02),
                                (".lora_b", rng.standard_normal((n_out, rank)) * 0.02)):  # fmt: skip
                if ggml_type == "F16":
                    w.add_tensor(name + suffix, arr.astype(np.float16))
                elif ggml_type == "Q8_0" and arr.shape[1] % 32 == 0:
                    q = GGMLQuantizationType.Q8_0
                    w.add_tensor(name + suffix, quantize(arr.astype(np.float32), q), raw_dtype=q)
                else:  # F32, and Q8_0's halves whose rows do not fill blocks of 32 (what llama.cpp's converter does)
                    w.add_tensor(name + suffix, arr.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def cera_decoder(path: Path, adapter: Path | None, threads: int, n_gen: int):
    import numpy as np

    import cera

    m = cera.load(path, device="cpu", threads=threads, quiet=True)
    adapters = [m.load_adapter(adapter)] if adapter else []
    prompt = np.random.default_rng(1).integers(0, m.model.n_vocab, size=16).tolist()

    def run() -> float:
        s = m.new_session(n_ctx=len(prompt) + n_gen + 2, adapters=adapters)
        s.append_tokens(prompt)
        logits = s.evaluate()
        t0 = time.perf_counter()
        for _ in range(n_gen):
            s.append_tokens([int(logits.argmax())])
            logits = s.evaluate()
        return n_gen / (time.perf_counter() - t0)

    return run


def llama_decoder(path: Path, adapter: Path | None, threads: int, n_gen: int):
    import llama_cpp
    import numpy as np

    kw = {"lora_path": str(adapter), "lora_scale": 1.0} if adapter else {}
    llm = llama_cpp.Llama(str(path), n_ctx=n_gen + 32, n_threads=threads, n_threads_batch=threads, verbose=False, **kw)
    prompt = np.random.default_rng(1).integers(0, llm.n_vocab(), size=16).tolist()

    def run() -> float:
        llm.reset()
        llm.eval(prompt)
        t0 = time.perf_counter()
        for _ in range(n_gen):
            logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
            llm.eval([int(logits.argmax())])
        return n_gen / (time.perf_counter() - t0)

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct-q4_1", help="GGUF file or bundle name")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--type", default="F16", choices=["F32", "F16", "Q8_0"], help="type of the adapter's tensors")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-gen", type=int, default=128)
    ap.add_argument("--pairs", type=int, default=5, help="alternated (base, adapted) runs per engine")
    ap.add_argument("--no-llama-cpp", action="store_true", help="cera only")
    a = ap.parse_args()

    from cera.sources import bundles

    path = Path(a.model) if Path(a.model).exists() else Path(bundles.fetch_file(a.model, quiet=True))
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    engines = [("cera", cera_decoder)]
    if not a.no_llama_cpp:
        try:
            import llama_cpp  # noqa: F401

            engines.append(("llama.cpp", llama_decoder))
        except ImportError:
            print("llama-cpp-python is not installed: cera only", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        adapter = write_adapter(path, Path(tmp) / f"lora-r{a.rank}.gguf", a.rank, a.type)
        print(f"{path.name}, rank-{a.rank} {a.type} adapter on {len(PROJECTIONS)} projections of every layer, "
              f"{a.threads} threads, tg{a.n_gen}, {a.pairs} pairs, commit {commit or '?'}")  # fmt: skip
        print(f"{'engine':10s} {'base tok/s':>12s} {'adapted tok/s':>14s} {'cost':>8s}  range of the paired costs")
        for name, make in engines:
            base, adapted = make(path, None, a.threads, a.n_gen), make(path, adapter, a.threads, a.n_gen)
            base(), adapted()  # warm-up
            b, d = [], []
            for _ in range(a.pairs):
                b.append(base())
                d.append(adapted())
            costs = [x / y - 1 for x, y in zip(b, d, strict=True)]
            mb, md = statistics.median(b), statistics.median(d)
            print(f"{name:10s} {mb:12.2f} {md:14.2f} {mb / md - 1:8.1%}  {min(costs):+.1%} .. {max(costs):+.1%}")


if __name__ == "__main__":
    main()
