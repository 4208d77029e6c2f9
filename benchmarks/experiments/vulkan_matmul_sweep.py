"""The Vulkan backend's tiled (prompt) product kernels on every product shape of the four
real files, over a prompt's rows: microseconds and TFLOPS per kernel and shape, from the
backend's own timestamps.

    python benchmarks/experiments/vulkan_matmul_sweep.py [--variants 4x4,4x4-split] [--rows 512]
        [--reps 5] [--chain 16] [--quick] [--json OUT]

Each (variant, shape) compiles a graph of ``--chain`` copies of one product (x of
``--rows`` rows times the weights, random, of the shape's type) the way the backend
compiles a prompt pass (`CERA_VULKAN_MATMUL=<variant>`, the tiled kernel forced), runs
it with the backend's profile on, and takes the device time of each copy's "matmul"
dispatches (a split product's join included), the median of the chain's later half. The
chain keeps the device busy: its first run, one product a pass, timed short bursts
between pauses, and the H200's clock fell between them (the Qwens' shapes at 0.4-4.5
TFLOPS against 18-26 inside a prompt pass). The variants of a shape take turns, one
untimed run each first; the median of ``--reps`` runs is reported. A prompt pass of 512 tokens runs every shape once a layer
(gate and up: once each), so the table says which products hold the pass back, which
`cera bench --profile` (its time per kernel type, all shapes together) cannot.

``--quick``: a few small shapes over 64 rows, for a software adapter (lavapipe), to check
the script; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
for sub in ("cera-core/src", "cera-backend-vulkan/src", "benchmarks"):
    if str(ROOT / sub) not in sys.path:
        sys.path.insert(0, str(ROOT / sub))

from vulkan_matvec_sweep import QUICK_SHAPES, SHAPES  # noqa: E402  (the same products)


def product_case(type_name: str, K: int, N: int, chain: int = 1):
    """An OpCase of ``chain`` products y_i = x W^T of N features of depth K (no bias), the
    same x and W, run one after another in one pass."""
    from cera.testing.conformance import OpCase, WeightSpec, _emb, _x

    def build(g, w, s):
        x = _x(g, K)
        for i in range(chain):
            g.output(f"y{i}", g.linear(x, w["w"], None))

    return OpCase(f"linear[{type_name},{K}x{N}]", "linear", build, (_emb(K), WeightSpec("w", (N, K), type_name)))


class Product:
    """One shape's weights on the device, compiled once per variant."""

    def __init__(self, backend, type_name: str, K: int, N: int, rows: int, rng, chain: int = 1):
        from cera.formats.gguf import GGUFFile
        from cera.graph.builder import Layout, WeightRef
        from cera.state import StateSpec
        from cera.testing import conformance

        self.backend, self.rows, self.chain = backend, rows, chain
        self.case = product_case(type_name, K, N, chain)
        with tempfile.TemporaryDirectory(prefix="cera-matmul-sweep-") as tmp:
            path = Path(tmp) / "w.gguf"
            conformance.write_weights(path, self.case.weights, rng)
            with GGUFFile(path) as gguf:
                self.refs = {n: WeightRef(n, i.type_name, i.shape) for n, i in gguf.tensors.items()}
                self.weights = {n: backend.upload(gguf, n) for n in self.refs}
        self.layout = Layout((rows,))
        self.state = backend.new_state(StateSpec(), rows + 1, n_slots=1, kv_type="f16", n_batch=rows)
        self.inputs = conformance._inputs(self.case, self.layout, rng, [0], [0])
        self.exes: dict = {}

    def run(self, variant: str) -> float:
        """Device microseconds of the product's matmul dispatches under ``variant``."""
        from cera.testing import conformance

        exe = self.exes.get(variant)
        if exe is None:
            os.environ["CERA_VULKAN_MATMUL"] = variant
            graph = conformance._graph(self.case, self.layout, self.refs, [])
            exe = self.exes[variant] = self.backend.compile(graph, self.weights, self.state)
        self.state.begin(0, self.inputs.positions)
        exe.run(self.state, self.inputs)
        self.state.rollback(0)  # the same cells again next run
        ns = [t for name, t in exe.profile() if name.startswith("matmul")]
        per = len(ns) // self.chain  # dispatches a product (a split product's join too)
        if per < 1 or per * self.chain != len(ns):
            raise RuntimeError(f"{len(ns)} matmul dispatches for a chain of {self.chain} products")
        each = [sum(ns[i * per : (i + 1) * per]) for i in range(self.chain)]
        # the later half of the chain: the device busy since the pass began
        return statistics.median(each[self.chain // 2 :]) / 1e3


def main() -> None:
    from cera_backend_vulkan.backend import VulkanBackend
    from cera_backend_vulkan.compile import MATMUL_KERNELS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default=",".join(MATMUL_KERNELS))
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--chain", type=int, default=16, help="products a pass, one after another (the later half timed)")
    ap.add_argument("--json")
    args = ap.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in MATMUL_KERNELS]
    if bad:
        ap.error(f"unknown variant(s) {', '.join(bad)}; the tiled kernels are {', '.join(MATMUL_KERNELS)}")
    rows = 64 if args.quick else args.rows
    shapes = [s for s in (QUICK_SHAPES if args.quick else SHAPES) if s[1] != "output"]  # a prompt's output: 1 row

    backend = VulkanBackend(profile=True)
    backend.tiled = True
    print(f"# {backend.probe().device}; {rows} rows; {args.chain} products a pass, the later half's median; "
          f"median of {args.reps} runs, us on the device")  # fmt: skip
    print(f"{'model':14s} {'product':8s} {'type':5s} {'K':>6s} {'N':>6s} " + " ".join(f"{v:>18s}" for v in variants))
    rng = np.random.default_rng(0)
    out = []
    for model, product, type_name, K, N, _glu in shapes:
        p = Product(backend, type_name, K, N, rows, rng, max(1, args.chain))
        times: dict[str, list[float]] = {v: [] for v in variants}
        for v in variants:
            p.run(v)  # compiles, then an untimed run
        for _ in range(args.reps):
            for v in variants:
                times[v].append(p.run(v))
        med = {v: statistics.median(t) for v, t in times.items()}
        flops = 2.0 * rows * K * N
        cells = " ".join(f"{med[v]:9.1f} {flops / med[v] / 1e6:5.1f} TF" for v in variants)
        print(f"{model:14s} {product:8s} {type_name:5s} {K:6d} {N:6d} {cells}", flush=True)
        out.append({"model": model, "product": product, "type": type_name, "K": K, "N": N, "rows": rows,
                    "us": med, "samples": times})  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
