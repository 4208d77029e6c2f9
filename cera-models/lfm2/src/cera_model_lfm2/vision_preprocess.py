"""LFM2-VL's image preprocessing, as llama.cpp's libmtmd does it (mtmd_image_preprocessor_lfm2).

An image whose aligned area is at most twice the largest single image (256 image tokens)
is one tile: resized, keeping its aspect ratio, to sides that are multiples of the patch
times the unshuffle factor, between 64 and 256 image tokens of area ("smart resize":
rounded to the nearest multiple, then shrunk or grown by the square root of the area
ratio, floored or ceiled), with Pillow's bilinear filter (libmtmd carries a copy of
Pillow's fixed-point resampler), then scaled to [0, 1] and normalized by the projector's
mean and std. Larger images are cut into 512-pixel tiles plus a thumbnail by libmtmd;
cera refuses them with an error that says so (`UnsupportedOperation`) rather than
encoding them another way.
"""

from __future__ import annotations

import math

import numpy as np

from cera.errors import UnsupportedOperation

MIN_TOKENS, MAX_TOKENS = 64, 256  # LFM2.5-VL's processor_config.json, as libmtmd sets them
MAX_PIXELS_TOLERANCE = 2.0
IMAGE_BEGIN, IMAGE_END = "<|image_start|>", "<|image_end|>"


def _f32(x) -> float:
    return float(np.float32(x))


def smart_size(width: int, height: int, align: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """The resized (width, height): libmtmd's calc_size_preserved_ratio (in float32 as it computes)."""

    def by(fn, x):
        return int(fn(_f32(_f32(x) / np.float32(align)))) * align

    w_bar = max(align, by(_round_half_away, width))
    h_bar = max(align, by(_round_half_away, height))
    if max_pixels > 0 and h_bar * w_bar > max_pixels:
        beta = _f32(math.sqrt(_f32(np.float32(height) * np.float32(width) / np.float32(max_pixels))))
        h_bar = max(align, by(math.floor, _f32(height / np.float32(beta))))
        w_bar = max(align, by(math.floor, _f32(width / np.float32(beta))))
    elif min_pixels > 0 and h_bar * w_bar < min_pixels:
        beta = _f32(math.sqrt(_f32(np.float32(min_pixels) / (np.float32(height) * np.float32(width)))))
        h_bar = by(math.ceil, _f32(np.float32(height) * np.float32(beta)))
        w_bar = by(math.ceil, _f32(np.float32(width) * np.float32(beta)))
    return w_bar, h_bar


def _round_half_away(x: float) -> float:
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def needs_tiling(width: int, height: int, patch: int, align: int, max_pixels: int) -> bool:
    def by(x):
        return int(round(x / align)) * align  # std::nearbyint: half to even, in double

    return max(patch, by(height)) * max(patch, by(width)) > max_pixels * MAX_PIXELS_TOLERANCE


def preprocess(rgb: np.ndarray, config) -> np.ndarray:
    """One RGB image ``[height, width, 3]`` (uint8) to the encoder's normalized float32
    pixels ``[height', width', 3]``."""
    from PIL import Image

    height, width = int(rgb.shape[0]), int(rgb.shape[1])
    area = config.align**2
    min_pixels, max_pixels = MIN_TOKENS * area, MAX_TOKENS * area
    if needs_tiling(width, height, config.patch_size, config.align, max_pixels):
        raise UnsupportedOperation(
            f"an image of {width} x {height} pixels is larger than LFM2-VL encodes in one tile (about "
            f"{int(math.sqrt(max_pixels * MAX_PIXELS_TOLERANCE))} pixels square); cera does not cut images into tiles yet: "
            f"downscale it first"
        )
    w, h = smart_size(width, height, config.align, min_pixels, max_pixels)
    img = Image.fromarray(np.ascontiguousarray(rgb, np.uint8), "RGB")
    if (w, h) != (width, height):
        img = img.resize((w, h), Image.Resampling.BILINEAR)
    x = np.asarray(img, np.float32) / np.float32(255.0)
    mean = np.asarray(config.mean, np.float32)
    std = np.asarray(config.std, np.float32)
    return ((x - mean) / std).astype(np.float32)


__all__ = ["IMAGE_BEGIN", "IMAGE_END", "needs_tiling", "preprocess", "smart_size"]
