"""Audio on standard input for `cera listen --audio -`: raw 16-bit little-endian mono PCM
at 16 kHz, or the same samples in a WAV stream (``sox ... -t wav -``, ``arecord -f S16_LE
-r 16000 -c 1``), whose header is read and checked rather than heard as samples.

A WAV stream's data size is not trusted (programs writing to a pipe cannot know it and
put 0 or 0xFFFFFFFF there): samples are read to the end of the stream.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np

from cera.errors import AudioError

WAVE_FORMAT_PCM = 1
WAVE_FORMAT_EXTENSIBLE = 0xFFFE
CONVERT = "convert it first, e.g. `sox IN -t wav -r 16000 -c 1 -b 16 -e signed-integer -`, or give the file itself"


class _Prefixed:
    """A byte stream with some bytes already read put back in front."""

    def __init__(self, head: bytes, rest: BinaryIO):
        self.head, self.rest = head, rest

    def read(self, n: int) -> bytes:
        if self.head:
            out, self.head = self.head[:n], self.head[n:]
            return out
        return self.rest.read(n)


def _read_exactly(stream: BinaryIO, n: int, what: str) -> bytes:
    out = b""
    while len(out) < n:
        block = stream.read(n - len(out))
        if not block:
            raise AudioError(f"standard input: the WAV stream ended inside its {what}")
        out += block
    return out


def _skip_wav_header(stream: BinaryIO) -> None:
    """Read the chunks after ``RIFF....WAVE`` up to the start of the samples, checking the format."""
    fmt = None
    while True:
        cid, size = struct.unpack("<4sI", _read_exactly(stream, 8, "header"))
        if cid == b"data":
            break
        body = _read_exactly(stream, size + (size & 1), f"{cid.decode('latin-1')!r} chunk")
        if cid == b"fmt ":
            if size < 16:
                raise AudioError("standard input: the WAV stream's fmt chunk is too short")
            fmt = struct.unpack("<HHIIHH", body[:16])
            if fmt[0] == WAVE_FORMAT_EXTENSIBLE and size >= 26:  # the sub-format's tag leads its GUID
                fmt = (struct.unpack("<H", body[24:26])[0], *fmt[1:])
    if fmt is None:
        raise AudioError("standard input: the WAV stream has no fmt chunk before its samples")
    tag, channels, rate, _, _, bits = fmt
    if tag != WAVE_FORMAT_PCM or bits != 16 or channels != 1 or rate != 16000:
        kind = "integer PCM" if tag == WAVE_FORMAT_PCM else f"format tag {tag}"
        raise AudioError(f"standard input: the WAV stream is {kind}, {bits}-bit, {channels} channel(s) at {rate} Hz; "
                         f"`--audio -` takes 16-bit mono PCM at 16 kHz: {CONVERT}")  # fmt: skip


def stdin_blocks(stream: BinaryIO) -> Iterator[np.ndarray]:
    """float32 blocks of the stream's samples as they arrive (raw PCM, or WAV's checked header skipped)."""
    from cera_audio_io import read_raw_pcm

    head = b""
    while len(head) < 12:
        block = stream.read(12 - len(head))
        if not block:
            break
        head += block
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        _skip_wav_header(stream)
        head = b""
    elif head[:4] in (b"RIFF", b"RIFX", b"RF64", b"fLaC", b"OggS", b"ID3\x03", b"ID3\x04"):
        raise AudioError(f"standard input holds a {head[:4].decode('latin-1').strip()} stream; `--audio -` takes "
                         f"raw 16-bit PCM or a 16 kHz mono 16-bit WAV stream: {CONVERT}")  # fmt: skip
    yield from read_raw_pcm(_Prefixed(head, stream))
