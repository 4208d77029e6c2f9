"""Image encoding: cera's vision encoder + projector against libmtmd's, per image, same file.

    python benchmarks/bench_vision.py [--model TEXT.gguf --mmproj MMPROJ.gguf] [--image FILE ...]
                                      [--threads 2] [--repeat 5]

Both engines encode the same images with the same projector file on the CPU with the same
threads: cera through `Projector.encode` (decode, preprocessing, the encoder graph), libmtmd
through mtmd_helper_bitmap_init_from_file, mtmd_tokenize (its preprocessing) and
mtmd_encode_chunk; each image is encoded once untimed by each engine first (cera compiles
an encoder per image size), then they alternate ``--repeat`` times and the medians are
printed with the ratio. cera's cache of encoded images is cleared before each timed run.
libmtmd runs without flash attention, as the stored reference does.

Without --model/--mmproj the tiny random-weight LFM2-VL of the tests is used, and without
--image the test images; the figures then only show that the script works (the tiny
encoder's time is overhead). llama-cpp-python 0.3.36 must be installed for the libmtmd side.
"""

from __future__ import annotations

import argparse
import ctypes
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REF = ROOT / "tests" / "models" / "reference"
TINY_MODEL = REF / "tiny" / "vl" / "tiny-lfm2-vl.gguf"
TINY_MMPROJ = REF / "tiny" / "vl" / "tiny-lfm2-vl-mmproj.gguf"
TINY_IMAGES = sorted((REF / "data" / "vl").glob("*.png"))


def libmtmd_encoder(model: Path, mmproj: Path, threads: int):
    import llama_cpp as L
    from llama_cpp import mtmd_cpp as M

    L.llama_backend_init()
    mparams = L.llama_model_default_params()
    mparams.use_extra_bufts = False
    lm = L.llama_model_load_from_file(str(model).encode(), mparams)
    params = M.mtmd_context_params_default()
    params.use_gpu, params.n_threads, params.warmup, params.print_timings = False, threads, False, False
    params.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    ctx = M.mtmd_init_from_file(str(mmproj).encode(), lm, params)
    if not ctx:
        raise SystemExit(f"libmtmd could not load {mmproj}")

    def encode(path: Path) -> None:
        bitmap = M.mtmd_helper_bitmap_init_from_file(ctx, str(path).encode(), False)
        chunks = M.mtmd_input_chunks_init()
        text = M.mtmd_input_text(b"<__media__>", 11, False, True)
        if M.mtmd_tokenize(ctx, chunks, ctypes.byref(text), (M.mtmd_bitmap_p_ctypes * 1)(bitmap), 1) != 0:
            raise SystemExit(f"libmtmd could not tokenize {path}")
        for i in range(M.mtmd_input_chunks_size(chunks)):
            chunk = M.mtmd_input_chunks_get(chunks, i)
            if M.mtmd_input_chunk_get_type(chunk) == M.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                if M.mtmd_encode_chunk(ctx, chunk) != 0:
                    raise SystemExit(f"libmtmd could not encode {path}")
        M.mtmd_input_chunks_free(chunks)
        M.mtmd_bitmap_free(bitmap)

    return encode, L.__version__


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=TINY_MODEL, help="the text model (libmtmd needs it; cera loads it too)")
    ap.add_argument("--mmproj", type=Path, default=TINY_MMPROJ, help="the multimodal projector")
    ap.add_argument("--image", type=Path, action="append", help="an image (repeatable; default: the test images)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    images = args.image or TINY_IMAGES

    import cera

    loaded = cera.load(str(args.model), device="cpu", threads=args.threads, quiet=True, mmproj=args.mmproj)
    projector = loaded.projector
    try:
        peer, peer_version = libmtmd_encoder(args.model, args.mmproj, args.threads)
    except ImportError:
        peer, peer_version = None, None
        print("llama-cpp-python is not installed: cera only", file=sys.stderr)

    def cera_encode(path: Path) -> None:
        projector._encoded.clear()
        projector.encode(path)

    print(f"# {platform.processor() or platform.machine()}, {args.threads} threads; cera {cera.__version__}; "
          f"llama-cpp-python {peer_version}; {args.mmproj.name}")  # fmt: skip
    print("| image | tokens | cera ms | libmtmd ms | cera / libmtmd |")
    print("|---|---|---|---|---|")
    for path in images:
        n = projector.encode(path).n_tokens
        cera_encode(path)
        if peer is not None:
            peer(path)
        times: dict[str, list[float]] = {"cera": [], "libmtmd": []}
        for _ in range(args.repeat):
            for name, fn in (("cera", cera_encode), ("libmtmd", peer)):
                if fn is None:
                    continue
                t0 = time.perf_counter()
                fn(path)
                times[name].append((time.perf_counter() - t0) * 1e3)
        c = statistics.median(times["cera"])
        p = statistics.median(times["libmtmd"]) if times["libmtmd"] else float("nan")
        print(f"| {path.name} | {n} | {c:.2f} | {p:.2f} | {c / p:.2f} |")
    loaded.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
