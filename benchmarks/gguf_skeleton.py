"""A GGUF file's skeleton, and a file rebuilt from it with random weights.

For machines a model file cannot reach (a GPU machine that takes 64 MiB of files a run
and downloads nothing): the skeleton is the file's header, metadata (tokenizer included) and
tensor table, a few MB; `synth` writes a file with exactly that header and tensor layout
and random weights of each tensor's type (quantized blocks with small finite scales). Both
engines read it as they read the real file, and a kernel's speed does not depend on the
values, so speed comparisons on it are those of the real file. Its outputs are noise:
correctness is tested on real files elsewhere.

    python benchmarks/gguf_skeleton.py skeleton MODEL.gguf OUT.skel
    python benchmarks/gguf_skeleton.py synth OUT.skel MODEL.gguf [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import lzma
import struct
import sys
from pathlib import Path

import numpy as np

MAGIC = b"CERASKEL"
# byte offsets of the f16 scale fields of each block type, kept small and finite
F16_FIELDS = {
    "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "IQ4_NL": (0,),
    "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
}  # fmt: skip


def skeleton(src: Path, out: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cera-core" / "src"))
    from cera.formats.gguf import GGUFFile

    with GGUFFile(src) as g:
        tensors = sorted(g.tensors.values(), key=lambda t: t.offset)
        start = min(t.offset for t in tensors)
        table = [
            {"name": t.name, "type": t.type_name, "offset": t.offset, "nbytes": t.nbytes, "shape": list(t.shape)}
            for t in tensors
        ]
        size = g.path.stat().st_size
    with open(src, "rb") as f:
        header = f.read(start)
    meta = json.dumps({"source": src.name, "size": size, "tensors": table}).encode()
    with lzma.open(out, "wb", preset=6) as f:
        f.write(MAGIC + struct.pack("<QQ", len(meta), len(header)) + meta + header)
    print(f"{out}: header {len(header)} bytes, {len(table)} tensors, file of {size} bytes")


def synth(skel: Path, out: Path, seed: int = 0) -> None:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    with lzma.open(skel, "rb") as f:
        raw = f.read()
    if raw[:8] != MAGIC:
        raise SystemExit(f"{skel}: not a skeleton")
    n_meta, n_header = struct.unpack("<QQ", raw[8:24])
    meta = json.loads(raw[24 : 24 + n_meta])
    header = raw[24 + n_meta : 24 + n_meta + n_header]
    rng = np.random.default_rng(seed)
    with open(out, "wb") as f:
        f.write(header)
        for t in meta["tensors"]:
            if f.tell() < t["offset"]:
                f.write(b"\0" * (t["offset"] - f.tell()))
            kind = t["type"]
            n = t["nbytes"]
            if kind == "F32":
                count = n // 4
                # norm weights near 1, other F32 tensors (biases) small
                base = 1.0 if "norm" in t["name"] else 0.0
                data = (base + 0.02 * rng.standard_normal(count)).astype(np.float32).tobytes()
            elif kind in ("F16", "BF16"):
                vals = (0.02 * rng.standard_normal(n // 2)).astype(np.float32)
                data = (
                    vals.astype(np.float16).tobytes()
                    if kind == "F16"
                    else (vals.view(np.uint32) >> 16).astype(np.uint16).tobytes()
                )
            else:
                _, bsize = GGML_QUANT_SIZES[GGMLQuantizationType[kind]]
                blocks = rng.integers(0, 256, (n // bsize, bsize), dtype=np.uint8)
                for off in F16_FIELDS.get(kind, ()):
                    scale = rng.uniform(0.0005, 0.002, blocks.shape[0]).astype(np.float16)
                    blocks[:, off : off + 2] = scale.view(np.uint8).reshape(-1, 2)
                data = blocks.tobytes()
            f.write(data)
        if f.tell() < meta["size"]:
            f.write(b"\0" * (meta["size"] - f.tell()))
    print(f"{out}: {meta['size']} bytes with random weights, the layout of {meta['source']}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("skeleton")
    a.add_argument("model", type=Path)
    a.add_argument("out", type=Path)
    b = sub.add_parser("synth")
    b.add_argument("skeleton", type=Path)
    b.add_argument("out", type=Path)
    b.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.cmd == "skeleton":
        skeleton(args.model, args.out)
    else:
        synth(args.skeleton, args.out, args.seed)


if __name__ == "__main__":
    main()
