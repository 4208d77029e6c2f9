"""Reading image inputs (cera.vision.image), where they may come from (content_parts), and
how a session's queue is cut around an image's rows (image_tokens, Session._next_chunk).
Pixels are checked against numpy arrays written through Pillow, the decoder cera uses."""

from __future__ import annotations

import base64
import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from cera.errors import ImageError
from cera.vision.content_parts import MEDIA_MARKER, part_source, readable
from cera.vision.image import MAX_PIXELS, load_image


def _png(rgb: np.ndarray, mode: str = "RGB") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rgb, mode).save(buf, "PNG")
    return buf.getvalue()


def test_png_bytes_path_and_data_url_give_the_same_pixels(tmp_path):
    rgb = np.random.default_rng(1).integers(0, 256, (7, 11, 3), dtype=np.uint8)
    data = _png(rgb)
    (tmp_path / "a.png").write_bytes(data)
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    for source in (data, tmp_path / "a.png", str(tmp_path / "a.png"), url, rgb):
        np.testing.assert_array_equal(load_image(source), rgb)


def test_alpha_is_dropped_and_grey_is_spread():
    rgba = np.random.default_rng(2).integers(0, 256, (5, 4, 4), dtype=np.uint8)
    np.testing.assert_array_equal(load_image(_png(rgba, "RGBA")), rgba[:, :, :3])  # colour kept, as stb_image
    grey = np.arange(20, dtype=np.uint8).reshape(4, 5)
    np.testing.assert_array_equal(load_image(_png(grey, "L")), np.repeat(grey[:, :, None], 3, axis=2))


def test_jpeg_decodes():
    rgb = np.full((16, 16, 3), 120, np.uint8)
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "JPEG", quality=95)
    assert np.abs(load_image(buf.getvalue()).astype(int) - 120).max() <= 2


def _png_claiming(width: int, height: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b"")


@pytest.mark.parametrize(
    ("source", "match"),
    [
        (b"", "empty"),
        (b"GIF89a not really", "not an image|damaged"),
        (b"hello, world", "not an image"),
        (_png_claiming(100_000, 100_000), "pixels"),
        ("data:image/png;base64,@@@", "base64"),
        ("data:text/plain;base64,aGk=", "not an image"),
        (np.zeros((4, 4, 3), np.float32), "uint8"),
        (np.zeros((4, 4, 2), np.uint8), "shape"),
        (12, "must be a path"),
    ],
)
def test_bad_inputs_are_image_errors(source, match):
    with pytest.raises(ImageError, match=match):
        load_image(source)


def test_truncated_png_names_the_file(tmp_path):
    data = _png(np.random.default_rng(3).integers(0, 256, (64, 64, 3), dtype=np.uint8))
    (tmp_path / "half.png").write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageError, match="half.png"):
        load_image(tmp_path / "half.png")
    assert MAX_PIXELS >= 4096 * 4096


def test_where_images_may_come_from(tmp_path):
    assert part_source({"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}).startswith("data:")
    assert part_source({"type": "image", "image": b"xy"}) == b"xy"
    with pytest.raises(ImageError, match="image_url"):
        part_source({"type": "image_url", "image_url": {}})
    with pytest.raises(ImageError, match="network"):
        readable("https://example.com/a.png")
    with pytest.raises(ImageError, match="local files"):
        readable(str(tmp_path / "a.png"), allow_files=False)
    assert readable("file://" + str(tmp_path / "a%20b.png")) == tmp_path / "a b.png"
    assert readable("data:image/png;base64,AA==", allow_files=False).startswith("data:")


def test_message_parts_become_markers():
    from cera.chat.prompt import ChatError, message

    m = message({"role": "user", "content": [{"type": "text", "text": "see "}, {"type": "image", "image": b"x"},
                                             {"type": "text", "text": " here"}]})  # fmt: skip
    assert m["content"] == f"see {MEDIA_MARKER} here" and m["images"] == [b"x"]
    with pytest.raises(ChatError, match="input_audio"):
        message({"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]})


def test_queue_is_cut_at_image_boundaries():
    from cera.generation.session import _next_chunk
    from cera.vision.image_tokens import IMAGE_ID_BASE, ROWS_PER_IMAGE

    a = [IMAGE_ID_BASE + i for i in range(5)]
    b = [IMAGE_ID_BASE + ROWS_PER_IMAGE + i for i in range(3)]
    q = [1, 2, *a, *b, 7, 8]
    assert _next_chunk(q, 512) == [1, 2]
    assert _next_chunk(q[2:], 512) == a
    assert _next_chunk(q[2:], 3) == a[:3]
    assert _next_chunk(q[7:], 512) == b
    assert _next_chunk(q[10:], 512) == [7, 8]
