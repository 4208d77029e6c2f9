"""Raw 16-bit little-endian mono PCM from a byte stream (a pipe, standard input)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

import numpy as np

from cera.errors import AudioError

RAW_BLOCK = 16000 * 2 // 10  # bytes read at a time: 100 ms at 16 kHz


def read_raw_pcm(stream: BinaryIO, block_bytes: int = RAW_BLOCK) -> Iterator[np.ndarray]:
    """Yield float32 blocks in [-1, 1) as the stream's bytes arrive; a sample split between
    reads is carried over. AudioError if the stream ends inside a sample (an odd byte count)."""
    carry = b""
    while True:
        block = stream.read(block_bytes)
        if not block:
            break
        block = carry + block
        usable = len(block) - len(block) % 2
        carry = block[usable:]
        yield np.frombuffer(block[:usable], dtype="<i2").astype(np.float32) / 32768.0
    if carry:
        raise AudioError("standard input ended in the middle of a 16-bit sample (an odd number of bytes)")
