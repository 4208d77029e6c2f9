"""Images in chat messages: content parts, and where their pixels may come from.

A message's content may be a list of parts (OpenAI's shape). An image part is

- ``{"type": "image_url", "image_url": {"url": URL}}`` (OpenAI; the ``url`` may also be
  the value of ``image_url`` itself), URL a ``data:image/...;base64,...`` URL, or a local
  file (a path or ``file://`` URL) where the caller allows files;
- ``{"type": "image", "image": SOURCE}`` (also ``"path"`` or ``"url"`` for the key), SOURCE
  a path, encoded bytes, a data: URL or an RGB array (the Python API).

In the rendered prompt an image part becomes llama.cpp's marker ``<__media__>``, where the
image's rows go (`cera.chat.prompt.ChatPrompt.encode`). cera fetches nothing from the
network: an ``http(s)://`` URL is refused with an error that says to send a data: URL.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

from ..errors import ImageError

MEDIA_MARKER = "<__media__>"  # llama.cpp's marker: where an image goes in a prompt
IMAGE_PART_TYPES = ("image_url", "image", "input_image")


def is_image_part(part) -> bool:
    return isinstance(part, dict) and part.get("type") in IMAGE_PART_TYPES


def part_source(part: dict):
    """The image source an image part names (not yet read)."""
    kind = part.get("type")
    if kind in ("image_url", "input_image"):
        value = part.get("image_url")
        if isinstance(value, dict):
            value = value.get("url")
        if not isinstance(value, str) or not value:
            raise ImageError("an image_url content part needs image_url.url (a data:image/...;base64,... URL)")
        return value
    for key in ("image", "path", "url"):
        if part.get(key) is not None:
            return part[key]
    raise ImageError("an image content part needs 'image' (a path, bytes, a data: URL or an RGB array)")


def readable(source, allow_files: bool = True):
    """``source`` as `cera.vision.image.load_image` takes it, under the policy: data: URLs
    and in-memory images always; local files only when ``allow_files``; no network."""
    if not isinstance(source, str):
        return source
    low = source[:8].lower()
    if low.startswith("data:"):
        return source
    if low.startswith(("http://", "https:/")):
        raise ImageError(
            f"cera does not fetch images from the network ({source[:60]}...); send the image itself as a "
            f"data:image/...;base64,... URL"
        )
    if low.startswith("file:"):
        source = unquote(urlparse(source).path)
    if not allow_files:
        raise ImageError(
            "images from local files are not allowed here (the server takes data: URLs; start it with "
            "--allow-local-images to read files)"
        )
    return Path(source).expanduser()


__all__ = ["IMAGE_PART_TYPES", "MEDIA_MARKER", "is_image_part", "part_source", "readable"]
