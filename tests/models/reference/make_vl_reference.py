"""llama.cpp's (libmtmd's) outputs for the tiny LFM2-VL, stored for the tests.

    python tests/models/reference/make_vl_reference.py

Needs llama-cpp-python 0.3.36 (it ships libmtmd and its bindings, llama_cpp.mtmd_cpp).
For each generated image (``IMAGES``, written as PNG to ``data/vl/``) it records what
libmtmd makes of the file: the image chunk's size in patches and tokens, the projector's
output (mtmd_encode_chunk, then mtmd_get_output_embd), the text tokens around the image,
and the greedy continuation of a raw prompt holding the image (mtmd_helper_eval_chunks,
then one token at a time). Written to ``data/vl/tiny-lfm2-vl.json`` and the embeddings to
``data/vl/tiny-lfm2-vl-embeddings.npz``.

Attention in the vision encoder runs without flash attention (the plain float32 product
and softmax), the text model with llama.cpp's defaults (as the other references).
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from llamacpp_driver import ContextSettings, LlamaCppModel, llama_cpp_facts  # noqa: E402

MODEL = HERE / "tiny" / "vl" / "tiny-lfm2-vl.gguf"
MMPROJ = HERE / "tiny" / "vl" / "tiny-lfm2-vl-mmproj.gguf"
OUT = HERE / "data" / "vl"
N_GENERATE = 12
PROMPT = "<__media__>Describe this image."
CHAT_PROMPT = "<|im_start|>user\n<__media__>What is in it?<|im_end|>\n<|im_start|>assistant\n"


def make_images() -> dict[str, np.ndarray]:
    """Deterministic RGB images of several sizes: aligned and not, small enough to be
    grown to the 64-token minimum, large enough to be shrunk to the 256-token maximum."""
    rng = np.random.default_rng(7)
    y, x = np.mgrid[0:96, 0:128]
    gradient = np.stack([x * 2, y * 2, (x + y)], axis=-1).astype(np.uint8)  # 128 x 96: grown
    noise = rng.integers(0, 256, (200, 300, 3), dtype=np.uint8)  # 300 x 200: rounded, grown
    yy, xx = np.mgrid[0:384, 0:512]
    checker = (((yy // 24 + xx // 24) % 2) * 200 + 30).astype(np.uint8)
    checker = np.stack([checker, 255 - checker, (xx // 2 % 256).astype(np.uint8)], axis=-1)  # 512 x 384: as is
    yy, xx = np.mgrid[0:700, 0:650]
    rings = (127 + 120 * np.sin(np.hypot(yy - 350, xx - 325) / 9.0)).astype(np.uint8)
    rings = np.stack([rings, rings // 2, 255 - rings], axis=-1)  # 650 x 700: shrunk to 256 tokens, one tile
    return {"gradient": gradient, "noise": noise, "checker": checker, "rings": rings}


def write_images() -> dict[str, Path]:
    OUT.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, rgb in make_images().items():
        path = OUT / f"{name}.png"
        Image.fromarray(rgb, "RGB").save(path, optimize=True)
        paths[name] = path
    return paths


def main() -> int:
    import llama_cpp as L
    from llama_cpp import mtmd_cpp as M

    paths = write_images()
    settings = ContextSettings(n_ctx=1024, n_threads=2)
    lm = LlamaCppModel(MODEL, settings)
    params = M.mtmd_context_params_default()
    params.use_gpu = False
    params.n_threads = 2
    params.warmup = False
    params.print_timings = False
    params.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    mctx = M.mtmd_init_from_file(str(MMPROJ).encode(), lm.model, params)
    if not mctx:
        raise RuntimeError(f"libmtmd could not load {MMPROJ}")
    n_embd = L.llama_model_n_embd(lm.model)
    record = {"model": MODEL.name, "mmproj": MMPROJ.name, "prompt": PROMPT, "chat_prompt": CHAT_PROMPT,
              "n_generate": N_GENERATE, "settings": settings.as_record(), "vision_flash_attn": "disabled",
              "llama_cpp": llama_cpp_facts(), "images": {}}  # fmt: skip
    embeddings = {}
    for name, path in paths.items():
        bitmap = M.mtmd_helper_bitmap_init_from_file(mctx, str(path).encode(), False)
        entry = {"file": path.name}
        for key, prompt in (("raw", PROMPT), ("chat", CHAT_PROMPT)):
            chunks = M.mtmd_input_chunks_init()
            text = M.mtmd_input_text(prompt.encode(), len(prompt.encode()), True, True)
            arr = (M.mtmd_bitmap_p_ctypes * 1)(bitmap)
            rc = M.mtmd_tokenize(mctx, chunks, ctypes.byref(text), arr, 1)
            if rc != 0:
                raise RuntimeError(f"mtmd_tokenize returned {rc}")
            layout = []
            for i in range(M.mtmd_input_chunks_size(chunks)):
                chunk = M.mtmd_input_chunks_get(chunks, i)
                kind = M.mtmd_input_chunk_get_type(chunk)
                if kind == M.MTMD_INPUT_CHUNK_TYPE_TEXT:
                    n = ctypes.c_size_t(0)
                    ptr = M.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                    layout.append({"text": [int(ptr[j]) for j in range(n.value)]})
                else:
                    img = M.mtmd_input_chunk_get_tokens_image(chunk)
                    n_tok = M.mtmd_image_tokens_get_n_tokens(img)
                    layout.append({"image": n_tok, "nx": M.mtmd_image_tokens_get_nx(img),
                                   "ny": M.mtmd_image_tokens_get_ny(img)})  # fmt: skip
                    if key == "raw":
                        if M.mtmd_encode_chunk(mctx, chunk) != 0:
                            raise RuntimeError("mtmd_encode_chunk failed")
                        out = M.mtmd_get_output_embd(mctx)
                        embeddings[name] = np.ctypeslib.as_array(out, shape=(n_tok * n_embd,)).reshape(n_tok, n_embd).copy()
            lm.reset()
            new_past = L.llama_pos(0)
            rc = M.mtmd_helper_eval_chunks(mctx, lm.ctx, chunks, 0, 0, 512, True, ctypes.byref(new_past))
            if rc != 0:
                raise RuntimeError(f"mtmd_helper_eval_chunks returned {rc}")
            lm.n_past = new_past.value
            generated = []
            logits = lm._logits_row(-1)
            for _ in range(N_GENERATE):
                t = int(np.argmax(logits))
                if lm.is_eog(t):  # the end of the turn, not part of the answer (as cera's summary)
                    break
                generated.append(t)
                logits = lm.eval([t])
            entry[key] = {"chunks": layout, "n_past": new_past.value, "greedy": generated}
            M.mtmd_input_chunks_free(chunks)
        M.mtmd_bitmap_free(bitmap)
        record["images"][name] = entry
        print(name, entry["raw"]["chunks"][1] if len(entry["raw"]["chunks"]) > 1 else entry["raw"]["chunks"],
              entry["raw"]["greedy"])  # fmt: skip
    M.mtmd_free(mctx)
    lm.close()
    (OUT / "tiny-lfm2-vl.json").write_text(json.dumps(record, indent=1) + "\n")
    np.savez_compressed(OUT / "tiny-lfm2-vl-embeddings.npz", **embeddings)
    print("wrote", OUT / "tiny-lfm2-vl.json", OUT / "tiny-lfm2-vl-embeddings.npz")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
