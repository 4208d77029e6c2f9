"""A random-weight LFM2-VL at LFM2-VL-450M's shape, for the encoder's speed table (not quality).

    python benchmarks/make_lfm2_vl_bench_model.py OUT_DIR

Writes, with the `gguf` package:

- OUT_DIR/mmproj-lfm2-vl-450m-shape-f16.gguf: LFM2-VL-450M's vision tower, SigLIP2 NaFlex
  base (width 768, 12 layers of 12 heads, MLP 3072, patch 16, a 16 x 16 grid of learned
  position embeddings: llama.cpp's converter writes image_size 256 for LFM2-VL), LayerNorm
  eps 1e-6, and its projector (pixel unshuffle by 2, LayerNorm, GELU MLP 3072 -> 2560 ->
  1024, the text width), F16 matrices as the converter stores an mmproj by default
  (tests/models/reference/make_tiny_lfm2_vl.py writes the same tensors at a tiny size);
- OUT_DIR/lfm2-vl-450m-shape-f16.gguf: the text model at LFM2-350M's shape
  (benchmarks/make_lfm2_bench_model.py) whose vocabulary holds LFM2-VL's image tokens.

Then:

    python benchmarks/bench_vision.py --model OUT_DIR/lfm2-vl-450m-shape-f16.gguf \\
        --mmproj OUT_DIR/mmproj-lfm2-vl-450m-shape-f16.gguf --threads 4 --repeat 5
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REF = HERE.parent / "tests" / "models" / "reference"

# LFM2-VL-450M (Lfm2VlConfig): vision_config of SigLIP2 NaFlex base, vision_feature_layer -1
# (all 12 layers kept), downsample_factor 2, projector_hidden_size 2560; text width 1024.
VISION_450M = dict(n_embd=768, n_ff=3072, n_layer=12, n_head=12, patch=16, grid=16, merge=2, proj_hidden=2560, eps=1e-6)


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    text_shape = _module(HERE / "make_lfm2_bench_model.py", "make_lfm2_bench_model")
    tiny_vl = _module(REF / "make_tiny_lfm2_vl.py", "make_tiny_lfm2_vl")
    text = args.out / "lfm2-vl-450m-shape-f16.gguf"
    if not text.exists():
        text_shape.TINY = REF / "tiny" / "vl" / "tiny-lfm2-vl.gguf"  # its vocabulary has the image tokens
        text_shape.write_f16(text, seed=args.seed)
    mmproj = args.out / "mmproj-lfm2-vl-450m-shape-f16.gguf"
    if not mmproj.exists():
        rng = np.random.default_rng(args.seed + 1)
        tiny_vl.write_mmproj(mmproj, rng, text_shape.N_EMBD, VISION_450M)
    for p in (text, mmproj):
        print(p, p.stat().st_size, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
