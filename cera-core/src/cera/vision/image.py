"""Reading an image input: a path, encoded bytes, a ``data:`` URL, or an RGB array, to an
RGB uint8 array ``[height, width, 3]``.

Decoding is Pillow's (PNG, JPEG, WebP, GIF's first frame, BMP, ...). Every failure is an
`ImageError` naming the input: not an image, truncated, or larger than ``MAX_PIXELS``
(checked from the header, before the pixels are decoded, so a small file that claims a
huge image costs nothing). An alpha channel is dropped and the colour values kept, as
libmtmd's loader does (stb_image asked for three channels).
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import re
from pathlib import Path

import numpy as np

from ..errors import ImageError

MAX_PIXELS = 64 * 2**20  # 64 megapixels: far more than any encoder takes, far less than memory
MAX_BYTES = 64 * 2**20
_DATA_URL = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w.+-]+=[\w.+-]+)*)(?P<b64>;base64)?,", re.I)


def _pillow():
    try:
        from PIL import Image
    except ImportError:
        raise ImageError("reading images needs Pillow: pip install pillow") from None
    return Image


def decode_data_url(url: str, what: str = "the image URL") -> bytes:
    """The bytes of a ``data:[<mime>][;base64],<data>`` URL (RFC 2397)."""
    m = _DATA_URL.match(url)
    if m is None:
        raise ImageError(f"{what} is not a data: URL (expected data:image/png;base64,...)")
    mime = (m.group("mime") or "").lower()
    if mime and not mime.startswith("image/"):
        raise ImageError(f"{what} holds {mime!r}, not an image")
    payload = url[m.end() :]
    if len(payload) > MAX_BYTES * 4 // 3 + 4:
        raise ImageError(f"{what} is larger than {MAX_BYTES // 2**20} MiB")
    if m.group("b64"):
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as e:
            raise ImageError(f"{what}: its base64 data is malformed ({e})") from None
    from urllib.parse import unquote_to_bytes

    return unquote_to_bytes(payload)


def load_image(source, what: str | None = None) -> np.ndarray:
    """An RGB image ``[height, width, 3]`` uint8 from ``source``: a path, bytes, a
    ``data:`` URL, or an array (``[h, w, 3]`` or ``[h, w]`` of uint8)."""
    if isinstance(source, np.ndarray):
        return _from_array(source, what or "the image array")
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _decode(bytes(source), what or "the image bytes")
    if isinstance(source, str) and source[:5].lower() == "data:":
        return _decode(decode_data_url(source, what or "the image URL"), what or "the image URL")
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        name = what or str(path)
        try:
            size = path.stat().st_size
            if size > MAX_BYTES:
                raise ImageError(f"{name}: {size} bytes is more than an image file may have ({MAX_BYTES // 2**20} MiB)")
            data = path.read_bytes()
        except OSError as e:
            raise ImageError(f"cannot read image {name}: {e.strerror or e}") from None
        return _decode(data, name)
    raise ImageError(f"an image must be a path, bytes, a data: URL or an RGB array, not {type(source).__name__}")


def _from_array(a: np.ndarray, what: str) -> np.ndarray:
    if a.dtype != np.uint8:
        raise ImageError(f"{what} has dtype {a.dtype}; pass uint8 RGB values (0..255)")
    if a.ndim == 2:
        a = np.repeat(a[:, :, None], 3, axis=2)
    if a.ndim != 3 or a.shape[2] not in (3, 4) or a.shape[0] < 1 or a.shape[1] < 1:
        raise ImageError(f"{what} has shape {a.shape}; pass [height, width, 3] RGB")
    if a.shape[0] * a.shape[1] > MAX_PIXELS:
        raise ImageError(f"{what} has {a.shape[0] * a.shape[1]} pixels, more than {MAX_PIXELS}")
    return np.ascontiguousarray(a[:, :, :3])


def _decode(data: bytes, what: str) -> np.ndarray:
    Image = _pillow()
    if not data:
        raise ImageError(f"{what} is empty")
    try:
        with Image.open(io.BytesIO(data)) as img:
            w, h = img.size
            if w < 1 or h < 1 or w * h > MAX_PIXELS:
                raise ImageError(f"{what} is {w} x {h} pixels; cera reads images of at most {MAX_PIXELS} pixels")
            img.load()
            rgb = img.convert("RGB") if img.mode != "RGB" else img
            return np.asarray(rgb, np.uint8).copy()
    except ImageError:
        raise
    except Image.DecompressionBombError as e:
        raise ImageError(f"{what} claims too many pixels to decode safely ({e})") from None
    except (OSError, ValueError, SyntaxError, EOFError) as e:  # PIL.UnidentifiedImageError is an OSError
        kind = "not an image Pillow can read" if "identify" in str(e) else f"damaged or truncated ({e})"
        raise ImageError(f"{what} is {kind}") from None


__all__ = ["MAX_PIXELS", "decode_data_url", "load_image"]
