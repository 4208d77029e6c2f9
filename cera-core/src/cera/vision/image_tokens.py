"""Image positions in a session's token record.

A session records what its state holds as a list of token ids; an image is a run of rows
that enter the model as vectors (`cera.vision.projector.ImageEmbedding`), not as ids. Each
image gets ids of its own, above every vocabulary (``IMAGE_ID_BASE`` and up), one per row:
the same image through the same projector gets the same ids in every session of the
process, a different one other ids. So everything that compares token records (a chat
re-rendered each turn, the prefix cache in memory, rewinding and re-evaluating recurrent
state) treats images as it treats text, with the pixels' digest deciding what is equal.
Sampling penalties ignore ids outside the vocabulary, and the runner feeds an image's
rows by their ids (`rows_for`).

The ids mean something only inside one process: records that leave it (checkpoint files,
the prefix cache's disk tier) must not hold them (`holds_images`).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

import numpy as np

from ..errors import ImageError, SessionError

IMAGE_ID_BASE = 2**31  # above every vocabulary; below 2**32, the token records' width
ROWS_PER_IMAGE = 2**12  # ids set aside per image: an image of more rows is refused
MAX_IMAGES = (2**32 - IMAGE_ID_BASE) // ROWS_PER_IMAGE  # distinct images per process

_lock = threading.Lock()
_by_digest: dict[str, int] = {}  # digest -> image number
_embeddings: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # image number -> ImageEmbedding
# The latest images stay alive between being encoded (a chat prompt rendered and tokenized)
# and being evaluated by a session, which then keeps its own (`rows_for`'s ``held``).
_recent: OrderedDict = OrderedDict()
RECENT = 32


def is_image_id(t: int) -> bool:
    return t >= IMAGE_ID_BASE


def holds_images(tokens) -> bool:
    return any(t >= IMAGE_ID_BASE for t in tokens)


def ids_for(embedding) -> list[int]:
    """The token ids that stand for ``embedding``'s rows (one per row)."""
    n = embedding.n_tokens
    if not 0 < n <= ROWS_PER_IMAGE:
        raise ImageError(f"an image of {n} rows; cera places images of 1 to {ROWS_PER_IMAGE} rows")
    with _lock:
        k = _by_digest.get(embedding.digest)
        if k is None:
            k = len(_by_digest)
            if k >= MAX_IMAGES:
                raise ImageError(f"this process has placed {MAX_IMAGES} distinct images; start a new one")
            _by_digest[embedding.digest] = k
        _embeddings[k] = embedding
        _recent[k] = embedding
        _recent.move_to_end(k)
        while len(_recent) > RECENT:
            _recent.popitem(last=False)
    base = IMAGE_ID_BASE + k * ROWS_PER_IMAGE
    return list(range(base, base + n))


def rows_for(ids, held: dict | None = None) -> np.ndarray:
    """The embedding rows ``[len(ids), n_embd]`` of a run of image ids; ``held``: image
    number -> ImageEmbedding that the asking session keeps alive (what is found elsewhere
    is added to it)."""
    out = []
    held = {} if held is None else held
    for t in ids:
        k, row = divmod(int(t) - IMAGE_ID_BASE, ROWS_PER_IMAGE)
        emb = held.get(k)
        if emb is None:
            emb = _embeddings.get(k)
            if emb is not None:
                held[k] = emb
        if emb is None or row >= emb.n_tokens:
            raise SessionError(
                "the session's record holds an image whose embeddings are gone (restored from elsewhere?); "
                "append the image again"
            )
        out.append(emb.rows[row])
    return np.ascontiguousarray(np.stack(out), np.float32)


def known(t: int, held: dict | None = None) -> bool:
    """Whether image id ``t`` stands for a row of an image this process still has (found
    elsewhere, it is added to ``held``)."""
    k, row = divmod(int(t) - IMAGE_ID_BASE, ROWS_PER_IMAGE)
    emb = (held or {}).get(k) or _embeddings.get(k)
    if emb is not None and held is not None:
        held[k] = emb
    return emb is not None and row < emb.n_tokens


def image_number(t: int) -> int:
    return (int(t) - IMAGE_ID_BASE) // ROWS_PER_IMAGE


__all__ = ["IMAGE_ID_BASE", "holds_images", "ids_for", "image_number", "is_image_id", "known", "rows_for"]
